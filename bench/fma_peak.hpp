// The host's f32 FMA throughput on the bench's threads: the ceiling no GEMM-rooted kernel can
// pass, so a target ratio that would need more than it is missed by arithmetic, not by code.
#pragma once

#include <optional>

namespace fusor::bench {

// GFLOP/s (an FMA counts two) of independent 16-lane FMAs on every OpenMP thread (8-lane
// AVX2 ones without AVX-512), best of a few ~50 ms runs; nullopt where the CPU has neither.
std::optional<double> fma_peak_gflops();

} // namespace fusor::bench
