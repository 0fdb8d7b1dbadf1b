// Discovery (SPEC §6): cut an op graph into regions. Only values with a single consumer
// are fused; passes run gated → matmul chains → norm chains → attention → pointwise, and a
// claimed op is never reused. Every op left unfused gets the reason why.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/graph.hpp"
#include "fusor/graph_exec.hpp"
#include "fusor/region.hpp"

namespace fusor {

struct DiscoveredRegion {
  Region region;
  std::vector<size_t> nodes;         // indices into graph.nodes, ascending
  std::vector<std::string> operands; // graph values in the region's operand order
  std::vector<Shape> operand_shapes; // the row-major view each operand is passed as
  std::string output;                // the graph value the region computes
  Shape output_shape;                // its shape in the graph
  std::string ops;                   // "matmul + bias + gelu + residual"
};

struct UnfusedOp {
  size_t node;
  std::string reason;
};

struct Discovery {
  std::vector<DiscoveredRegion> regions;
  std::vector<UnfusedOp> unfused;
};

// `types`: every value's dtype and shape (infer_value_types).
Discovery discover_regions(const Graph& graph, const std::map<std::string, ValueType>& types);

// The `fusor regions` listing: one line per region (kind, ops covered, operands) and one per
// op left unfused with its reason.
std::string format_discovery(const Graph& graph, const Discovery& discovery);

} // namespace fusor
