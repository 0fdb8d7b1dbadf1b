// Pointwise DAGs, evaluated element by element over the numpy-broadcast output shape,
// and the pointwise-then-last-axis-reduction kind.
#include "ref/ref_kernels.hpp"

namespace fusor::ref_detail {
namespace {

// The DAG's value at every element of `shape` (row-major), inputs broadcast to it.
std::vector<double> eval_dag(const PointwiseGraph& graph, const Shape& shape, Operands ops) {
  const auto rank = shape.size();
  // Per input and output axis: the input's stride, 0 where it broadcasts (missing or 1).
  std::vector<std::vector<std::int64_t>> strides(ops.size(), std::vector<std::int64_t>(rank, 0));
  for (size_t i = 0; i < ops.size(); ++i) {
    const Shape& s = ops[i].shape;
    std::int64_t stride = 1;
    for (size_t j = s.size(); j-- > 0;) {
      if (s[j] != 1) strides[i][rank - s.size() + j] = stride;
      stride *= s[j];
    }
  }
  struct Node {
    double (*f)(double, double);
    ValueRef a, b;
  };
  std::vector<Node> nodes;
  for (const auto& n : graph.nodes())
    nodes.push_back({op_info(n.op).reference, n.args[0],
                     n.args.size() > 1 ? n.args[1] : ValueRef{ValueRef::Kind::constant, 0, 0.0}});

  const std::int64_t numel = shape_numel(shape);
  std::vector<double> out(static_cast<size_t>(numel));
  std::vector<double> values(nodes.size());
  std::vector<std::int64_t> index(rank, 0), offset(ops.size(), 0);
  const auto value = [&](const ValueRef& v) {
    switch (v.kind) {
    case ValueRef::Kind::input: return ops[v.index].data[offset[v.index]];
    case ValueRef::Kind::node: return values[v.index];
    case ValueRef::Kind::constant: return v.constant;
    }
    return v.constant;
  };
  for (std::int64_t e = 0; e < numel; ++e) {
    for (size_t k = 0; k < nodes.size(); ++k) values[k] = nodes[k].f(value(nodes[k].a), value(nodes[k].b));
    out[e] = value(graph.output());
    // Advance the multi-index (odometer), moving each input's offset along with it.
    for (size_t ax = rank; ax-- > 0;) {
      if (++index[ax] < shape[ax]) {
        for (size_t i = 0; i < ops.size(); ++i) offset[i] += strides[i][ax];
        break;
      }
      for (size_t i = 0; i < ops.size(); ++i) offset[i] -= strides[i][ax] * (shape[ax] - 1);
      index[ax] = 0;
    }
  }
  return out;
}

} // namespace

TensorF64 eval_pointwise(const PointwiseGraphRegion& region, const ProblemShape& p, Operands ops) {
  return TensorF64{p.output, eval_dag(region.graph(), p.output, ops)};
}

TensorF64 eval_pointwise_reduce(const PointwiseReduceRegion& region, const ProblemShape& p, Operands ops) {
  Shape full = p.output;
  full.push_back(p.row_len);
  const std::vector<double> values = eval_dag(region.graph(), full, ops);
  const ReduceInfo& info = reduce_info(region.reduce());
  TensorF64 out{p.output, std::vector<double>(static_cast<size_t>(p.rows))};
  for (std::int64_t r = 0; r < p.rows; ++r) {
    double acc = info.init;
    for (std::int64_t i = 0; i < p.row_len; ++i) acc = info.combine(acc, values[r * p.row_len + i]);
    out.data[r] = info.finish(acc, static_cast<double>(p.row_len));
  }
  return out;
}

} // namespace fusor::ref_detail
