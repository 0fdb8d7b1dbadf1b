#include "cross_core.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace fusor::bench {

double cross_core_round_trip_ns() {
#ifdef _OPENMP
  if (omp_get_max_threads() < 2) return NAN;
  // Thread 0 writes odd values, thread 1 even ones, each waiting for the other's: one round
  // trip per two writes. A few bursts of 500, their median: a burst the host preempts is
  // slow alone. The whole team takes part, the other threads spinning until the pair is done:
  // a team of two left the rest idle long enough to sleep, and the case timed next (fusor's,
  // first in every round) then waited for them to wake. On the lent host's 16 threads that
  // took layer norm 4096 x 4096 from 0.8 ms to 1.8 ms and fusor's GEMMs to 0.42-0.64 of
  // oneDNN's speed (run az).
  constexpr long kTrips = 500;
  constexpr int kBursts = 5;
  alignas(64) static std::atomic<long> flag;
  alignas(64) static std::atomic<int> done;
  std::vector<double> ns;
  for (int b = 0; b < kBursts; ++b) {
    flag.store(0);
    done.store(0);
    double elapsed = 0;
#pragma omp parallel
    {
      const long me = omp_get_thread_num();
      // (A team of one, where the runtime gives fewer threads, must not wait for a partner.)
      const bool pair = omp_get_num_threads() >= 2;
#pragma omp barrier
      const auto t0 = std::chrono::steady_clock::now();
      if (me < 2) {
        for (long i = 0; pair && i < kTrips; ++i) {
          while (flag.load(std::memory_order_acquire) != 2 * i + me) {
          }
          flag.store(2 * i + me + 1, std::memory_order_release);
        }
      } else {
        while (!done.load(std::memory_order_acquire)) {
        }
      }
      if (me == 0) {
        elapsed = pair ? std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() : NAN;
        done.store(1, std::memory_order_release);
      }
    }
    ns.push_back(elapsed / kTrips);
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
#else
  return NAN;
#endif
}

} // namespace fusor::bench
