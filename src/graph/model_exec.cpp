// Executes a graph in node order: a region runs in place of its last node (by then every
// operand exists, and its inner values are used by nobody else); other nodes run natively.
#include <chrono>

#include "fusor/model_exec.hpp"

namespace fusor {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

Status run_region(const DiscoveredRegion& r, size_t index, ValueMap& values, GraphRun& run) {
  std::vector<Tensor> operands;
  for (size_t i = 0; i < r.operands.size(); ++i) {
    auto it = values.find(r.operands[i]);
    if (it == values.end()) return make_error(ErrorCode::internal, "region operand '" + r.operands[i] + "' missing");
    Tensor t = it->second.to_tensor();
    if (shape_numel(r.operand_shapes[i]) != t.numel())
      return make_error(ErrorCode::shape_mismatch, "region operand '" + r.operands[i] + "' " + shape_str(t.shape) +
                                                       " cannot be viewed as " + shape_str(r.operand_shapes[i]));
    t.shape = r.operand_shapes[i]; // a row-major view: same elements, region's shape
    operands.push_back(std::move(t));
  }
  auto out = dispatch_region(r.region, operands);
  if (!out)
    return make_error(out.error().code, std::string(region_kind_name(region_kind(r.region))) + " region (" + r.ops +
                                            "): " + out.error().message);
  if (out->output.numel() != shape_numel(r.output_shape))
    return make_error(ErrorCode::internal,
                      "region output " + shape_str(out->output.shape) + " does not fit " + shape_str(r.output_shape));
  values[r.output] = GraphTensor::f32(r.output_shape, std::move(out->output.data));
  run.regions.push_back({index, out->tag, out->time_ms, out->verified, out->note});
  return {};
}

} // namespace

Expected<GraphRun> execute_graph(const Graph& graph, const Discovery& discovery, const ValueMap& inputs) {
  const auto start = std::chrono::steady_clock::now();
  GraphRun run;
  run.node_ms.assign(graph.nodes.size(), 0.0);
  // Which region (if any) finishes at each node, and which nodes a region covers.
  std::vector<int> finishes(graph.nodes.size(), -1);
  std::vector<bool> covered(graph.nodes.size(), false);
  for (size_t k = 0; k < discovery.regions.size(); ++k) {
    for (auto n : discovery.regions[k].nodes) covered[n] = true;
    finishes[discovery.regions[k].nodes.back()] = static_cast<int>(k);
  }
  ValueMap& values = run.values;
  values = graph.constants;
  for (const auto& in : graph.inputs) {
    auto it = inputs.find(in.name);
    if (it == inputs.end()) return make_error(ErrorCode::bad_argument, "graph input '" + in.name + "' was not given");
    if (it->second.type != in.type)
      return make_error(ErrorCode::bad_argument,
                        "graph input '" + in.name + "' must be " + std::string(elem_type_name(in.type)));
    for (size_t d = 0; d < in.shape.size(); ++d)
      if (in.shape.size() != it->second.shape.size() || (in.shape[d] >= 0 && in.shape[d] != it->second.shape[d]))
        return make_error(ErrorCode::shape_mismatch, "graph input '" + in.name + "' expects shape " +
                                                         shape_str(in.shape) + ", got " + shape_str(it->second.shape));
    values[in.name] = it->second;
  }
  std::vector<const GraphTensor*> args;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    if (finishes[k] >= 0) {
      FUSOR_TRY(run_region(discovery.regions[static_cast<size_t>(finishes[k])], static_cast<size_t>(finishes[k]),
                           values, run));
      continue;
    }
    if (covered[k]) continue;
    const Node& node = graph.nodes[k];
    args.clear();
    for (const auto& name : node.inputs) {
      auto it = name.empty() ? values.end() : values.find(name);
      if (!name.empty() && it == values.end())
        return make_error(ErrorCode::internal, node.label() + " reads '" + name + "', which was not computed");
      args.push_back(name.empty() ? nullptr : &it->second);
    }
    const auto t0 = std::chrono::steady_clock::now();
    FUSOR_TRY_ASSIGN(std::vector<GraphTensor> outs, run_native_node(node, args));
    run.node_ms[k] = ms_since(t0);
    for (size_t o = 0; o < node.outputs.size() && o < outs.size(); ++o)
      if (!node.outputs[o].empty()) values[node.outputs[o]] = std::move(outs[o]);
  }
  run.total_ms = ms_since(start);
  return run;
}

} // namespace fusor
