// Executes a graph in node order: a region runs in place of its last node (by then every
// operand exists, and its inner values are used by nobody else); other nodes run natively.
#include <algorithm>
#include <chrono>

#include "fusor/model_exec.hpp"

namespace fusor {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A value of the run: computed (or a graph input) first, else one of the graph's constants,
// which are read in place rather than copied into every run.
const GraphTensor* find_value(const Graph& graph, const ValueMap& values, const std::string& name) {
  if (auto it = values.find(name); it != values.end()) return &it->second;
  if (auto it = graph.constants.find(name); it != graph.constants.end()) return &it->second;
  return nullptr;
}

Status run_region(const Graph& graph, const DiscoveredRegion& r, size_t index, ValueMap& values, GraphRun& run,
                  RegionOperands* kept) {
  std::vector<Tensor> local;
  std::vector<bool> local_ready;
  std::vector<Tensor>& operands = kept ? kept->slots[index] : local;
  std::vector<bool>& constant_ready = kept ? kept->constant_ready[index] : local_ready;
  operands.resize(r.operands.size());
  constant_ready.resize(r.operands.size(), false);
  // Computed f32 values are lent to their operand slots for the call — their storage is
  // swapped in and swapped back, no copy — and constants are converted once into `kept`.
  std::vector<std::pair<size_t, GraphTensor*>> lent;
  struct GiveBack {
    std::vector<Tensor>& slots;
    std::vector<std::pair<size_t, GraphTensor*>>& lent;
    ~GiveBack() {
      for (auto [i, value] : lent) std::swap(slots[i].data, value->f);
    }
  } give_back{operands, lent};
  for (size_t i = 0; i < r.operands.size(); ++i) {
    auto computed = values.find(r.operands[i]);
    if (computed == values.end() && constant_ready[i]) continue; // converted by an earlier run
    const GraphTensor* value = computed != values.end() ? &computed->second : find_value(graph, values, r.operands[i]);
    if (!value) return make_error(ErrorCode::internal, "region operand '" + r.operands[i] + "' missing");
    if (shape_numel(r.operand_shapes[i]) != value->numel())
      return make_error(ErrorCode::shape_mismatch, "region operand '" + r.operands[i] + "' " + shape_str(value->shape) +
                                                       " cannot be viewed as " + shape_str(r.operand_shapes[i]));
    Tensor& t = operands[i];
    const auto holder = std::find_if(lent.begin(), lent.end(), [&](const auto& l) { return l.second == value; });
    if (holder != lent.end()) {
      t.data = operands[holder->first].data; // the same value twice: the second slot gets a copy
    } else if (computed != values.end() && value->type == ElemType::f32) {
      std::swap(t.data, computed->second.f);
      lent.emplace_back(i, &computed->second);
    } else if (value->type == ElemType::f32) {
      t.data.assign(value->f.begin(), value->f.end()); // reuses the slot's storage
    } else {
      t = value->to_tensor();
    }
    t.shape = r.operand_shapes[i]; // a row-major view: same elements, region's shape
    constant_ready[i] = kept && computed == values.end();
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

Expected<GraphRun> execute_graph(const Graph& graph, const Discovery& discovery, const ValueMap& inputs,
                                 RegionOperands* kept) {
  if (kept) {
    kept->slots.resize(discovery.regions.size());
    kept->constant_ready.resize(discovery.regions.size());
  }
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
      FUSOR_TRY(run_region(graph, discovery.regions[static_cast<size_t>(finishes[k])], static_cast<size_t>(finishes[k]),
                           values, run, kept));
      continue;
    }
    if (covered[k]) continue;
    const Node& node = graph.nodes[k];
    args.clear();
    for (const auto& name : node.inputs) {
      const GraphTensor* value = name.empty() ? nullptr : find_value(graph, values, name);
      if (!name.empty() && !value)
        return make_error(ErrorCode::internal, node.label() + " reads '" + name + "', which was not computed");
      args.push_back(value);
    }
    const auto t0 = std::chrono::steady_clock::now();
    FUSOR_TRY_ASSIGN(std::vector<GraphTensor> outs, run_native_node(node, args));
    run.node_ms[k] = ms_since(t0);
    for (size_t o = 0; o < node.outputs.size() && o < outs.size(); ++o)
      if (!node.outputs[o].empty()) values[node.outputs[o]] = std::move(outs[o]);
  }
  run.total_ms = ms_since(start);
  for (const auto& name : graph.outputs) // an output folded to a constant is still an output
    if (!values.contains(name))
      if (auto it = graph.constants.find(name); it != graph.constants.end()) values[name] = it->second;
  return run;
}

} // namespace fusor
