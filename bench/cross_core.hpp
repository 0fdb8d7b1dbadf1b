// How far apart the bench's first two threads sit: a development VM's two vCPUs move between
// cores that share a core complex (a cache line crosses in ~60 ns) and cores in different
// ones (~290 ns) within seconds. The placement changes what a case measures: far apart, each
// core has its own link to memory (a copy runs ~1.6x faster) and every line one core wrote
// and the other reads crosses slowly. Each round records it, so a ratio can be read by
// placement instead of as noise.
#pragma once

namespace fusor::bench {

// The median time of a cache line's round trip between OpenMP threads 0 and 1 (nanoseconds)
// over a few short bursts; NaN with fewer than two threads.
double cross_core_round_trip_ns();

} // namespace fusor::bench
