// Shared plumbing of the native graph kernels (src/graph/kernels_*.cpp).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fusor/graph.hpp"

namespace fusor::graph_kernels {

using Ins = std::span<const GraphTensor* const>;
using Outs = Expected<std::vector<GraphTensor>>;

Error bad(const Node& node, const std::string& what);   // E_GRAPH_INVALID naming the node
Error shape(const Node& node, const std::string& what); // E_SHAPE_MISMATCH naming the node
Status arity(const Node& node, Ins in, size_t min, size_t max);
const GraphTensor* opt(Ins in, size_t k); // nullptr when absent
Status want_type(const Node& node, const GraphTensor& t, ElemType type, const char* operand);
// An i64 tensor's values (shapes, axes, indices).
Expected<std::vector<std::int64_t>> ints_of(const Node& node, const GraphTensor& t, const char* operand);
// `axis` in [-rank, rank) → [0, rank).
Expected<std::int64_t> norm_axis(const Node& node, std::int64_t axis, std::int64_t rank);
std::vector<std::int64_t> strides_of(const Shape& shape);

// A node's outputs. Built by moving: a braced std::vector<GraphTensor>{...} copies every
// tensor out of its initializer list.
template <class... T> Outs outs(T&&... t) {
  std::vector<GraphTensor> v;
  v.reserve(sizeof...(t));
  (v.push_back(std::forward<T>(t)), ...);
  return Outs(std::move(v));
}
inline Outs one(GraphTensor t) { return outs(std::move(t)); }

// Output shape and, per input, the stride of each output dimension (0 where broadcast).
struct Broadcast {
  Shape out;
  std::vector<std::vector<std::int64_t>> strides;
  // f(k, offsets, n): output elements k..k+n-1, one row of the last axis; input i's element
  // of k + j is offsets[i] + j · strides[i].back(). A call per row lets kernels copy or loop
  // over a run instead of paying the index walk per element.
  template <class F> void for_each_row(F&& f) const {
    const size_t rank = out.size(), n_in = strides.size();
    const std::int64_t total = shape_numel(out);
    std::vector<std::int64_t> idx(rank, 0), off(n_in, 0);
    if (total == 0) return;
    const std::int64_t row = rank == 0 ? 1 : out[rank - 1];
    for (std::int64_t k = 0; k < total; k += row) {
      f(k, off.data(), row);
      for (size_t d = rank == 0 ? 0 : rank - 1; d-- > 0;) {
        for (size_t i = 0; i < n_in; ++i) off[i] += strides[i][d];
        if (++idx[d] < out[d]) break;
        for (size_t i = 0; i < n_in; ++i) off[i] -= strides[i][d] * out[d];
        idx[d] = 0;
      }
    }
  }
  // f(k, offsets): k the output element, offsets[i] the element of input i.
  template <class F> void for_each(F&& f) const {
    std::vector<std::int64_t> step(strides.size(), 0), cur(strides.size(), 0);
    for (size_t i = 0; i < strides.size() && !out.empty(); ++i) step[i] = strides[i].back();
    for_each_row([&](std::int64_t k, const std::int64_t* off, std::int64_t n) {
      for (std::int64_t j = 0; j < n; ++j) {
        for (size_t i = 0; i < cur.size(); ++i) cur[i] = off[i] + j * step[i];
        f(k + j, cur.data());
      }
    });
  }
};
Expected<Broadcast> broadcast(const Node& node, const std::vector<Shape>& shapes);

// What a Reduce* node reduces: axes from input 1 (opset >= 18) or the `axes` attribute;
// none means all of them, or none at all with noop_with_empty_axes (then each output
// element is the reduction of its one input element, as numpy's axis=() reads it).
struct ReducePlan {
  Shape out;        // the output shape (keepdims applied)
  Shape kept;       // the input shape with every reduced axis set to 1
  Broadcast to_out; // over the input shape: offset 0 is the element's output index
};
Expected<ReducePlan> reduce_plan(const Node& node, Ins in);

// Families: each knows its ops and runs them.
bool is_elementwise(std::string_view op);
Outs run_elementwise(const Node& node, Ins in);
bool is_shape_op(std::string_view op);
Outs run_shape_op(const Node& node, Ins in);
bool is_nn_op(std::string_view op);
Outs run_nn_op(const Node& node, Ins in);
std::vector<std::string_view> elementwise_names();
std::vector<std::string_view> shape_op_names();
std::vector<std::string_view> nn_op_names();
// ONNX ops outside the native set, named "ref.<ONNX op type>" (kernels_reference.cpp).
bool is_reference_table_op(std::string_view op);
Outs run_reference_op(const Node& node, Ins in);
std::vector<std::string_view> reference_op_names();

} // namespace fusor::graph_kernels
