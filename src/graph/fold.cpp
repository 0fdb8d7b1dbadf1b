// Import-time simplification: constant folding, shape-query folding, dead-node removal.
#include <optional>
#include <set>

#include "fusor/graph_exec.hpp"

namespace fusor {
namespace {

bool shapes_known(const Graph& g) {
  for (const auto& in : g.inputs)
    for (auto d : in.shape)
      if (d < 0) return false;
  return true;
}

// Folds nodes with constant inputs (and shape queries when `types` is given), in order.
Status fold_pass(Graph& g, const std::map<std::string, ValueType>* types, bool& changed) {
  std::vector<Node> kept;
  for (auto& node : g.nodes) {
    if ((node.op == "shape" || node.op == "size") && types && !node.inputs.empty()) {
      auto it = types->find(node.inputs[0]);
      if (it != types->end()) {
        const GraphTensor probe = GraphTensor::zeros(it->second.type, it->second.shape);
        const GraphTensor* arg = &probe;
        FUSOR_TRY_ASSIGN(std::vector<GraphTensor> out, run_native_node(node, std::span(&arg, 1)));
        g.constants[node.outputs[0]] = std::move(out[0]);
        changed = true;
        continue;
      }
    }
    if (node.op == "cast_like" && types && node.inputs.size() == 2 && g.constants.count(node.inputs[0]) &&
        types->count(node.inputs[1])) {
      const GraphTensor like = GraphTensor::zeros(types->at(node.inputs[1]).type, {0});
      const GraphTensor* args2[] = {&g.constants.at(node.inputs[0]), &like};
      FUSOR_TRY_ASSIGN(std::vector<GraphTensor> out, run_native_node(node, args2));
      g.constants[node.outputs[0]] = std::move(out[0]);
      changed = true;
      continue;
    }
    bool all_const = native_op_known(node.op);
    std::vector<const GraphTensor*> args;
    for (const auto& in : node.inputs) {
      if (in.empty()) {
        args.push_back(nullptr);
        continue;
      }
      auto it = g.constants.find(in);
      all_const = all_const && it != g.constants.end();
      args.push_back(it == g.constants.end() ? nullptr : &it->second);
    }
    if (!all_const) {
      kept.push_back(std::move(node));
      continue;
    }
    FUSOR_TRY_ASSIGN(std::vector<GraphTensor> out, run_native_node(node, args));
    for (size_t k = 0; k < node.outputs.size() && k < out.size(); ++k)
      if (!node.outputs[k].empty()) g.constants[node.outputs[k]] = std::move(out[k]);
    changed = true;
  }
  g.nodes = std::move(kept);
  return {};
}

// identity, and casts to the type a value already has, forward their input: consumers read
// the input directly (a graph output keeps its node, since its name must survive).
bool forward_trivial(Graph& g, const std::map<std::string, ValueType>* types) {
  std::map<std::string, std::string> alias;
  std::set<std::string> outs(g.outputs.begin(), g.outputs.end());
  auto type_of = [&](const std::string& v) -> std::optional<ElemType> {
    if (auto c = g.constants.find(v); c != g.constants.end()) return c->second.type;
    if (types)
      if (auto t = types->find(v); t != types->end()) return t->second.type;
    return std::nullopt;
  };
  bool changed = false;
  for (auto& node : g.nodes) {
    for (auto& in : node.inputs)
      if (auto a = alias.find(in); a != alias.end()) in = a->second;
    if (node.outputs.empty() || node.inputs.empty() || node.inputs[0].empty() || outs.count(node.outputs[0])) continue;
    bool trivial = node.op == "identity";
    const auto src = type_of(node.inputs[0]);
    if (node.op == "cast" && src) trivial = elem_type_name(*src) == node.attr_string("to", "");
    if (node.op == "cast_like" && src && node.inputs.size() == 2) trivial = src == type_of(node.inputs[1]);
    if (trivial) {
      alias[node.outputs[0]] = node.inputs[0];
      changed = true;
    }
  }
  return changed;
}

void remove_dead(Graph& g) {
  std::set<std::string> live(g.outputs.begin(), g.outputs.end());
  std::vector<Node> kept;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    bool used = false;
    for (const auto& out : it->outputs) used = used || live.count(out);
    if (!used) continue;
    for (const auto& in : it->inputs) live.insert(in);
    kept.insert(kept.begin(), std::move(*it));
  }
  g.nodes = std::move(kept);
  for (auto it = g.constants.begin(); it != g.constants.end();)
    it = live.count(it->first) ? std::next(it) : g.constants.erase(it);
}

} // namespace

Expected<std::map<std::string, ValueType>> infer_value_types(const Graph& graph) {
  ValueMap inputs;
  for (const auto& in : graph.inputs) {
    for (auto d : in.shape)
      if (d < 0)
        return make_error(ErrorCode::shape_mismatch, "graph input '" + in.name + "' has a free dimension " +
                                                         shape_str(in.shape) + "; give concrete inputs");
    inputs[in.name] = GraphTensor::zeros(in.type, in.shape);
  }
  FUSOR_TRY_ASSIGN(ValueMap values, run_graph_native(graph, inputs));
  std::map<std::string, ValueType> types;
  for (auto& [name, t] : values) types[name] = ValueType{t.type, t.shape};
  return types;
}

Status fold_graph(Graph& graph) {
  bool changed = true;
  for (int round = 0; changed && round < 8; ++round) {
    changed = false;
    FUSOR_TRY(fold_pass(graph, nullptr, changed));
    changed = forward_trivial(graph, nullptr) || changed;
    remove_dead(graph);
    if (!shapes_known(graph)) break;
    // Shape queries over computed values: their shapes come from one run on zeros. A graph
    // that cannot run on zeros (a data-dependent failure) simply keeps its shape ops.
    auto types = infer_value_types(graph);
    if (!types) break;
    FUSOR_TRY(fold_pass(graph, &*types, changed));
    changed = forward_trivial(graph, &*types) || changed;
    remove_dead(graph);
  }
  remove_dead(graph);
  return {};
}

} // namespace fusor
