// Whole-graph execution: discovered regions through region dispatch (today the best
// available target's execute_on_target; the arbiter's dispatch() replaces it in
// src/graph/dispatch.cpp, the one place that call lives), every other op natively.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "fusor/discovery.hpp"
#include "fusor/graph_exec.hpp"
#include "fusor/target.hpp"

namespace fusor {

// Runs one region on the best available target (reference fallback when it declines).
Expected<RunOutput> dispatch_region(const Region& region, std::span<const Tensor> operands);
// The target dispatch_region uses: the first available non-host target, else x86.
const Target* dispatch_target();

struct RegionRun {
  size_t region = 0; // index into Discovery::regions
  std::string tag;   // lane that ran
  double time_ms = 0;
  bool verified = false;
  std::string note;
};

struct GraphRun {
  ValueMap values; // every value of the run
  std::vector<RegionRun> regions;
  std::vector<double> node_ms; // native time per graph node (0 for nodes inside regions)
  double total_ms = 0;
};

// `discovery` may be empty (no regions): everything then runs natively.
Expected<GraphRun> execute_graph(const Graph& graph, const Discovery& discovery, const ValueMap& inputs);

} // namespace fusor
