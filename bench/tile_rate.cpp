#include "tile_rate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fusor/toolchain.hpp"

namespace fusor::bench {
namespace {

constexpr long kIters = 500'000; // four products each: ~15 ms at full rate
constexpr int kRuns = 5;
constexpr double kFlopsPerProduct = 2.0 * 16 * 16 * 32;

// The palette-1 layout LDTILECFG reads.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// ns per tile product on this thread. In assembly, so the bench needs no AMX compiler flags:
// accumulators tmm0-3, operands tmm4-7 loaded once with random bf16 (the tiles draw more power,
// and slow down sooner, on random data than on zeros).
double one_thread() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  alignas(64) std::uint16_t operands[4][512];
  std::uint32_t s = 1;
  for (auto& tile : operands)
    for (auto& v : tile) {
      s = s * 1103515245u + 12345u;
      v = static_cast<std::uint16_t>((0x3c00u + ((s >> 16) & 0x3ffu)) ^ ((s >> 8) & 0x8000u));
    }
  const long stride = 64;
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm4" ::"r"(operands[0]), "r"(stride) : "memory");
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm5" ::"r"(operands[1]), "r"(stride) : "memory");
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm6" ::"r"(operands[2]), "r"(stride) : "memory");
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm7" ::"r"(operands[3]), "r"(stride) : "memory");
  double best = 1e30;
  for (int run = 0; run < kRuns; ++run) {
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
    const auto t0 = std::chrono::steady_clock::now();
    for (long k = 0; k < kIters; ++k)
      __asm__ volatile("tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\t"
                       "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
                       "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\t"
                       "tdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
    const double s_run = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s_run * 1e9 / (4.0 * kIters));
  }
  __asm__ volatile("tilerelease" ::);
  return best;
}

} // namespace

std::optional<TileRate> tile_rate() {
#if defined(__x86_64__) && defined(__linux__)
  if (host_lacks_amx_bf16()) return std::nullopt; // (it also asks Linux for the tile state)
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  TileRate r;
  r.ns_per_product.assign(static_cast<size_t>(threads), 0.0);
#pragma omp parallel
  {
    int t = 0;
#ifdef _OPENMP
    t = omp_get_thread_num();
#endif
    r.ns_per_product[static_cast<size_t>(t)] = one_thread();
  }
  for (const double ns : r.ns_per_product) r.gflops += kFlopsPerProduct / ns;
  return r;
#else
  return std::nullopt;
#endif
}

} // namespace fusor::bench
