// The native executor's front: shared kernel helpers, op dispatch, whole-graph runs.
#include <algorithm>

#include "fusor/graph_exec.hpp"
#include "fusor/operands.hpp"
#include "graph/kernels.hpp"

namespace fusor {
namespace graph_kernels {

Error bad(const Node& node, const std::string& what) {
  return make_error(ErrorCode::graph_invalid, node.label() + ": " + what);
}

Error shape(const Node& node, const std::string& what) {
  return make_error(ErrorCode::shape_mismatch, node.label() + ": " + what);
}

Status arity(const Node& node, Ins in, size_t min, size_t max) {
  size_t present_min = 0;
  for (size_t k = 0; k < std::min(in.size(), min); ++k) present_min += in[k] != nullptr;
  if (in.size() < min || present_min < min || in.size() > max)
    return bad(node, "takes " + std::to_string(min) + (max == min ? "" : ".." + std::to_string(max)) + " inputs, got " +
                         std::to_string(in.size()));
  return {};
}

const GraphTensor* opt(Ins in, size_t k) { return k < in.size() ? in[k] : nullptr; }

Status want_type(const Node& node, const GraphTensor& t, ElemType type, const char* operand) {
  if (t.type == type) return {};
  return bad(node, std::string(operand) + " must be " + std::string(elem_type_name(type)) + ", got " +
                       std::string(elem_type_name(t.type)));
}

Expected<std::vector<std::int64_t>> ints_of(const Node& node, const GraphTensor& t, const char* operand) {
  if (t.type == ElemType::f32) return bad(node, std::string(operand) + " must be an i64 tensor, got f32");
  return t.i;
}

Expected<std::int64_t> norm_axis(const Node& node, std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= std::max<std::int64_t>(rank, 1))
    return bad(node, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

std::vector<std::int64_t> strides_of(const Shape& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

Expected<Broadcast> broadcast(const Node& node, const std::vector<Shape>& shapes) {
  auto out = broadcast_shapes(shapes);
  if (!out) {
    std::string given;
    for (const auto& s : shapes) given += (given.empty() ? "" : ", ") + shape_str(s);
    return shape(node, "input shapes " + given + " do not broadcast (numpy rules)");
  }
  Broadcast b;
  b.out = *out;
  const size_t rank = b.out.size();
  for (const auto& s : shapes) {
    std::vector<std::int64_t> st(rank, 0);
    const auto own = strides_of(s);
    for (size_t d = 0; d < s.size(); ++d)
      if (s[d] != 1) st[rank - s.size() + d] = own[d];
    b.strides.push_back(std::move(st));
  }
  return b;
}

Expected<ReducePlan> reduce_plan(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 1, 2));
  const Shape& shape = in[0]->shape;
  const auto rank = static_cast<std::int64_t>(shape.size());
  std::vector<std::int64_t> axes;
  if (const GraphTensor* a = opt(in, 1)) {
    FUSOR_TRY_ASSIGN(axes, ints_of(node, *a, "axes"));
  } else if (auto attr = node.attr_ints("axes")) {
    axes = *attr;
  }
  ReducePlan plan;
  const bool noop = axes.empty() && node.attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(shape.size(), axes.empty() && !noop);
  for (auto a : axes) {
    FUSOR_TRY_ASSIGN(std::int64_t ax, norm_axis(node, a, rank));
    reduced[static_cast<size_t>(ax)] = true;
  }
  const bool keep = node.attr_int("keepdims", 1) != 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d] || keep) plan.out.push_back(reduced[d] ? 1 : shape[d]);
    plan.kept.push_back(reduced[d] ? 1 : shape[d]);
  }
  // Every input element maps to the output element of its kept coordinates.
  plan.to_out.out = shape;
  auto ks = strides_of(plan.kept);
  for (size_t d = 0; d < ks.size(); ++d)
    if (reduced[d]) ks[d] = 0;
  plan.to_out.strides.push_back(std::move(ks));
  return plan;
}

} // namespace graph_kernels

using namespace graph_kernels;

std::vector<std::string_view> native_op_names() {
  std::vector<std::string_view> names = elementwise_names();
  for (auto n : shape_op_names()) names.push_back(n);
  for (auto n : nn_op_names()) names.push_back(n);
  for (auto n : reference_op_names()) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

bool native_op_known(std::string_view op) {
  return is_elementwise(op) || is_shape_op(op) || is_nn_op(op) || is_reference_table_op(op);
}

Expected<std::vector<GraphTensor>> run_native_node(const Node& node, std::span<const GraphTensor* const> inputs) {
  if (is_elementwise(node.op)) return run_elementwise(node, inputs);
  if (is_shape_op(node.op)) return run_shape_op(node, inputs);
  if (is_nn_op(node.op)) return run_nn_op(node, inputs);
  if (is_reference_table_op(node.op)) return run_reference_op(node, inputs);
  if (is_reference_op(node.op))
    return make_error(ErrorCode::onnx_unsupported_op, node.label() + ": ONNX op '" +
                                                          node.op.substr(kReferenceOpPrefix.size()) +
                                                          "' is not in the reference evaluator's table");
  return make_error(ErrorCode::onnx_unsupported_op, node.label() + ": op '" + node.op + "' has no native kernel");
}

Expected<ValueMap> run_graph_native(const Graph& graph, const ValueMap& inputs) {
  ValueMap values = graph.constants;
  for (const auto& in : graph.inputs) {
    auto it = inputs.find(in.name);
    if (it == inputs.end()) return make_error(ErrorCode::bad_argument, "graph input '" + in.name + "' was not given");
    if (it->second.type != in.type)
      return make_error(ErrorCode::bad_argument, "graph input '" + in.name + "' must be " +
                                                     std::string(elem_type_name(in.type)) + ", got " +
                                                     std::string(elem_type_name(it->second.type)));
    values[in.name] = it->second;
  }
  std::vector<const GraphTensor*> args;
  for (const auto& node : graph.nodes) {
    args.clear();
    for (const auto& name : node.inputs) {
      if (name.empty()) {
        args.push_back(nullptr);
        continue;
      }
      auto it = values.find(name);
      if (it == values.end())
        return make_error(ErrorCode::graph_invalid, node.label() + " reads undefined '" + name + "'");
      args.push_back(&it->second);
    }
    FUSOR_TRY_ASSIGN(std::vector<GraphTensor> outs, run_native_node(node, args));
    for (size_t k = 0; k < node.outputs.size() && k < outs.size(); ++k)
      if (!node.outputs[k].empty()) values[node.outputs[k]] = std::move(outs[k]);
  }
  return values;
}

} // namespace fusor
