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
// The first available non-host target, else x86: where a region goes when no lane says.
const Target* dispatch_target();
// Every available target's name, accelerators first: the arbiter behind dispatch_region
// picks each region's lane among all of them.
std::vector<std::string> dispatch_target_names();

struct RegionRun {
  size_t region = 0; // index into Discovery::regions
  std::string tag;   // lane that ran
  double time_ms = 0;
  bool verified = false;
  std::string note;
};

struct GraphRun {
  ValueMap values; // the run's inputs, computed values and outputs (constants stay in the graph)
  std::vector<RegionRun> regions;
  std::vector<double> node_ms; // native time per graph node (0 for nodes inside regions)
  double total_ms = 0;
};

// Region operand tensors kept between runs of one graph and discovery (a caller that runs
// them repeatedly owns one): constants such as weights are converted once, the other
// operands are refilled in place, so a run neither copies every weight nor allocates.
struct RegionOperands {
  std::vector<std::vector<Tensor>> slots;        // per region, its operands
  std::vector<std::vector<bool>> constant_ready; // per region and operand: a constant already there
};

// `discovery` may be empty (no regions): everything then runs natively. `kept` must come
// from earlier runs of the same graph and discovery, or be fresh.
Expected<GraphRun> execute_graph(const Graph& graph, const Discovery& discovery, const ValueMap& inputs,
                                 RegionOperands* kept = nullptr);

} // namespace fusor
