// The host's AMX bf16 tile throughput, per bench thread. The shared machines this bench runs
// on slow their tiles to a third or less, for milliseconds to minutes, on one core or both, so
// a run records the rate it started and ended with beside the lanes' own times.
#pragma once

#include <optional>
#include <vector>

namespace fusor::bench {

struct TileRate {
  std::vector<double> ns_per_product; // one TDPBF16PS (16x16x32), per OpenMP thread
  double gflops = 0;                  // bf16 GFLOP/s of all threads together (a product is 16 384 flops)
};

// Median of a few ~4 ms runs of the lane's micro-kernel pattern (tile products on operands
// streamed from L2), on every OpenMP thread at once; nullopt where this process cannot run
// AMX bf16 tiles. A reading of the moment: the lane's own times per case are the record of
// the run.
std::optional<TileRate> tile_rate();

} // namespace fusor::bench
