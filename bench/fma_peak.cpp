#include "fma_peak.hpp"

#include <algorithm>
#include <chrono>

#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace fusor::bench {
namespace {

constexpr int kChains = 24; // > FMA latency x ports: every FMA issue slot is filled
constexpr long kIters = 4'000'000;

#define FUSOR_FMA(i) "vfmadd231ps %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define FUSOR_FMA8(a, b, c, d, e, f, g, h)                                                                             \
  FUSOR_FMA(a) FUSOR_FMA(b) FUSOR_FMA(c) FUSOR_FMA(d) FUSOR_FMA(e) FUSOR_FMA(f) FUSOR_FMA(g) FUSOR_FMA(h)

// One thread's loop, in assembly so that no compiler keeps a chain in memory: 24 independent
// accumulators zmm0..zmm23, operands zmm24/zmm25 held at zero (no denormal assists).
__attribute__((target("avx512f"))) void fma_loop() {
  for (long k = 0; k < kIters; ++k) // zeroing idioms retire without an execution port
    __asm__ volatile("vpxord %%zmm24, %%zmm24, %%zmm24\n\tvpxord %%zmm25, %%zmm25, %%zmm25\n\t" //
                     FUSOR_FMA8(0, 1, 2, 3, 4, 5, 6, 7) FUSOR_FMA8(8, 9, 10, 11, 12, 13, 14, 15)
                         FUSOR_FMA8(16, 17, 18, 19, 20, 21, 22, 23)::
                             : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                               "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20",
                               "xmm21", "xmm22", "xmm23", "xmm24", "xmm25");
}

#undef FUSOR_FMA8
#undef FUSOR_FMA

// Without AVX-512: 8-lane FMAs, 12 chains in ymm0..ymm11 (enough for two ports of 4-5 cycle
// latency), operands ymm14/ymm15 at zero.
constexpr int kChains8 = 12;
#define FUSOR_FMA(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n\t"
__attribute__((target("avx2,fma"))) void fma_loop8() {
  for (long k = 0; k < kIters; ++k)
    __asm__ volatile("vpxor %%ymm14, %%ymm14, %%ymm14\n\tvpxor %%ymm15, %%ymm15, %%ymm15\n\t" //
                     FUSOR_FMA(0) FUSOR_FMA(1) FUSOR_FMA(2) FUSOR_FMA(3) FUSOR_FMA(4) FUSOR_FMA(5) FUSOR_FMA(6)
                         FUSOR_FMA(7) FUSOR_FMA(8) FUSOR_FMA(9) FUSOR_FMA(10) FUSOR_FMA(11)::
                             : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                               "xmm11", "xmm14", "xmm15");
}
#undef FUSOR_FMA

} // namespace

std::optional<double> fma_peak_gflops() {
  const bool wide = __builtin_cpu_supports("avx512f");
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return std::nullopt;
  const double flops_per_iter = wide ? 2.0 * 16 * kChains : 2.0 * 8 * kChains8;
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
      if (wide)
        fma_loop();
      else
        fma_loop8();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops_per_iter * static_cast<double>(kIters) * threads / s / 1e9);
  }
  return best;
}

} // namespace fusor::bench
