#include "tile_rate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fusor/toolchain.hpp"

namespace fusor::bench {
namespace {

constexpr int kProducts = 120'000; // part products of four tile products each: ~4 ms at full rate
constexpr int kRuns = 5;
constexpr double kFlopsPerProduct = 2.0 * 16 * 16 * 32;
constexpr int kTiles = 96; // 1 KiB tiles per operand buffer: 2 x 96 KiB, L2-resident like a kernel's panels

// The palette-1 layout LDTILECFG reads.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

#define FUSOR_TDP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define FUSOR_TILELOAD(t, p) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"(64L) : "memory")

// ns per tile product on this thread, fed the way the x86_amx lane's micro-kernels are: C in
// tmm0-3 (32 x 32), A's two 16-row halves in tmm4-5 and B's in tmm6-7, each part product four
// TDPBF16PS with one operand pair reloaded from L2 as soon as its last reader has issued
// (operands random bf16: the tiles draw more power, and slow down sooner, than on zeros). In
// assembly, so the bench needs no AMX compiler flags. A loop on register-resident operands read
// 7 to 25 ns within seconds while the lane's micro-kernel ran at 7.3-7.8; this one follows the
// micro-kernel (interleaved with it: 7.0 against 7.7 at full rate, 35-37 against 20-22 slowed).
double one_thread() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.colsb[i] = 64, cfg.rows[i] = 16;
  std::vector<std::uint16_t> a(static_cast<size_t>(kTiles) * 512 + 32), b(a.size());
  std::uint32_t s = 1;
  for (auto* v : {&a, &b})
    for (auto& x : *v) {
      s = s * 1103515245u + 12345u;
      x = static_cast<std::uint16_t>((0x3c00u + ((s >> 16) & 0x3ffu)) ^ ((s >> 8) & 0x8000u));
    }
  // 64-byte aligned tiles
  const auto align = [](std::vector<std::uint16_t>& v) {
    const auto p = reinterpret_cast<std::uintptr_t>(v.data());
    return v.data() + ((64 - p % 64) % 64) / 2;
  };
  const std::uint16_t* const pa = align(a);
  const std::uint16_t* const pb = align(b);
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  FUSOR_TILELOAD(4, pa);
  FUSOR_TILELOAD(5, pa + 512);
  FUSOR_TILELOAD(6, pb);
  FUSOR_TILELOAD(7, pb + 512);
  std::vector<double> ns(kRuns);
  for (int run = 0; run < kRuns; ++run) {
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
    const auto t0 = std::chrono::steady_clock::now();
    for (int p = 0, t = 0; p < kProducts; p += 2, t = (t + 2) % kTiles) {
      FUSOR_TDP(0, 4, 6); // B's pair reloaded
      FUSOR_TDP(2, 5, 6);
      FUSOR_TILELOAD(6, pb + t * 512);
      FUSOR_TDP(1, 4, 7);
      FUSOR_TDP(3, 5, 7);
      FUSOR_TILELOAD(7, pb + (t + 1) * 512);
      FUSOR_TDP(0, 4, 6); // A's pair reloaded
      FUSOR_TDP(1, 4, 7);
      FUSOR_TILELOAD(4, pa + t * 512);
      FUSOR_TDP(2, 5, 6);
      FUSOR_TDP(3, 5, 7);
      FUSOR_TILELOAD(5, pa + (t + 1) * 512);
    }
    const double s_run = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ns[static_cast<size_t>(run)] = s_run * 1e9 / (4.0 * kProducts);
  }
  __asm__ volatile("tilerelease" ::);
  std::nth_element(ns.begin(), ns.begin() + kRuns / 2, ns.end());
  return ns[kRuns / 2]; // the median: the rate changes within milliseconds, the best would hide it
}

#undef FUSOR_TILELOAD
#undef FUSOR_TDP

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
