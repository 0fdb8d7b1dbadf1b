// Shape and data-movement graph ops: they move or index elements and never compute on
// them, so one implementation serves f32, i64 and bool values alike.
#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/kernels.hpp"

namespace fusor::graph_kernels {
namespace {

constexpr std::string_view kNames[] = {
    "shape",  "size",   "reshape", "flatten", "transpose", "unsqueeze",         "squeeze",
    "concat", "gather", "expand",  "slice",   "range",     "constant_of_shape", "pad"};

void put(GraphTensor& dst, std::int64_t dk, const GraphTensor& src, std::int64_t sk) {
  if (dst.type == ElemType::f32)
    dst.f[static_cast<size_t>(dk)] = src.f[static_cast<size_t>(sk)];
  else
    dst.i[static_cast<size_t>(dk)] = src.i[static_cast<size_t>(sk)];
}

GraphTensor with_shape(GraphTensor t, Shape s) {
  t.shape = std::move(s);
  return t;
}

Outs run_shape(const Node& node, const GraphTensor& x) {
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  auto clampi = [&](std::int64_t v) { return std::clamp(v < 0 ? v + rank : v, std::int64_t{0}, rank); };
  const std::int64_t start = clampi(node.attr_int("start", 0)), end = clampi(node.attr_int("end", rank));
  std::vector<std::int64_t> dims;
  for (std::int64_t d = start; d < end; ++d) dims.push_back(x.shape[static_cast<size_t>(d)]);
  const auto n = static_cast<std::int64_t>(dims.size());
  return one(GraphTensor::i64({n}, std::move(dims)));
}

Outs run_reshape(const Node& node, const GraphTensor& x, const GraphTensor& spec) {
  FUSOR_TRY_ASSIGN(std::vector<std::int64_t> dims, ints_of(node, spec, "shape"));
  const bool allowzero = node.attr_int("allowzero", 0) != 0;
  Shape out;
  std::int64_t known = 1, infer = -1;
  for (size_t d = 0; d < dims.size(); ++d) {
    std::int64_t v = dims[d];
    if (v == 0 && !allowzero) {
      if (d >= x.shape.size()) return shape(node, "shape entry 0 copies a dimension the input does not have");
      v = x.shape[d];
    }
    if (v == -1) {
      if (infer >= 0) return shape(node, "more than one -1 in the target shape");
      infer = static_cast<std::int64_t>(d);
      out.push_back(1);
      continue;
    }
    if (v < 0) return shape(node, "negative dimension " + std::to_string(v) + " in the target shape");
    known *= v;
    out.push_back(v);
  }
  const std::int64_t n = x.numel();
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      return shape(node, "cannot infer -1: " + std::to_string(n) + " elements into " + shape_str(out));
    out[static_cast<size_t>(infer)] = n / known;
  }
  if (shape_numel(out) != n)
    return shape(node,
                 "cannot reshape " + shape_str(x.shape) + " (" + std::to_string(n) + " elements) to " + shape_str(out));
  return one(with_shape(x, out));
}

Outs run_transpose(const Node& node, const GraphTensor& x) {
  const size_t rank = x.shape.size();
  std::vector<std::int64_t> perm;
  if (auto p = node.attr_ints("perm")) {
    perm = *p;
  } else {
    for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<std::int64_t>(d));
  }
  if (perm.size() != rank)
    return bad(node, "perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(rank));
  std::vector<bool> seen(rank, false);
  Broadcast b;
  const auto st = strides_of(x.shape);
  std::vector<std::int64_t> strides;
  for (auto p : perm) {
    if (p < 0) p += static_cast<std::int64_t>(rank);
    if (p < 0 || p >= static_cast<std::int64_t>(rank) || seen[static_cast<size_t>(p)])
      return bad(node, "perm is not a permutation of 0.." + std::to_string(rank - 1));
    seen[static_cast<size_t>(p)] = true;
    b.out.push_back(x.shape[static_cast<size_t>(p)]);
    strides.push_back(st[static_cast<size_t>(p)]);
  }
  b.strides.push_back(std::move(strides));
  GraphTensor y = GraphTensor::zeros(x.type, b.out);
  const std::int64_t step = b.out.empty() ? 0 : b.strides[0].back();
  // A row of the output is one strided run of the input (contiguous when the last axis stays).
  auto rows = [&](const auto& src, auto& dst) {
    b.for_each_row([&](std::int64_t k, const std::int64_t* off, std::int64_t n) {
      auto* d = dst.data() + k;
      const auto* s = src.data() + off[0];
      if (step == 1)
        std::copy_n(s, n, d);
      else
        for (std::int64_t j = 0; j < n; ++j) d[j] = s[j * step];
    });
  };
  if (x.type == ElemType::f32)
    rows(x.f, y.f);
  else
    rows(x.i, y.i);
  return one(std::move(y));
}

Expected<std::vector<std::int64_t>> axes_input(const Node& node, Ins in, size_t k) {
  if (const GraphTensor* a = opt(in, k)) return ints_of(node, *a, "axes");
  if (auto attr = node.attr_ints("axes")) return *attr;
  return std::vector<std::int64_t>{};
}

Outs run_unsqueeze(const Node& node, Ins in) {
  const GraphTensor& x = *in[0];
  FUSOR_TRY_ASSIGN(std::vector<std::int64_t> axes, axes_input(node, in, 1));
  const auto rank = static_cast<std::int64_t>(x.shape.size() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (auto a : axes) {
    FUSOR_TRY_ASSIGN(std::int64_t ax, norm_axis(node, a, rank));
    if (inserted[static_cast<size_t>(ax)]) return bad(node, "axis " + std::to_string(a) + " repeated");
    inserted[static_cast<size_t>(ax)] = true;
  }
  Shape out;
  size_t src = 0;
  for (std::int64_t d = 0; d < rank; ++d) out.push_back(inserted[static_cast<size_t>(d)] ? 1 : x.shape[src++]);
  return one(with_shape(x, out));
}

Outs run_squeeze(const Node& node, Ins in) {
  const GraphTensor& x = *in[0];
  FUSOR_TRY_ASSIGN(std::vector<std::int64_t> axes, axes_input(node, in, 1));
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  std::vector<bool> drop(x.shape.size(), false);
  for (auto a : axes) {
    FUSOR_TRY_ASSIGN(std::int64_t ax, norm_axis(node, a, rank));
    if (x.shape[static_cast<size_t>(ax)] != 1)
      return shape(node, "cannot squeeze axis " + std::to_string(a) + " of shape " + shape_str(x.shape));
    drop[static_cast<size_t>(ax)] = true;
  }
  Shape out;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (!(axes.empty() ? x.shape[d] == 1 : drop[d])) out.push_back(x.shape[d]);
  return one(with_shape(x, out));
}

Outs run_concat(const Node& node, Ins in) {
  std::vector<const GraphTensor*> parts;
  for (auto* t : in)
    if (t) parts.push_back(t);
  if (parts.empty()) return bad(node, "needs at least one input");
  const GraphTensor& first = *parts[0];
  const auto rank = static_cast<std::int64_t>(first.shape.size());
  FUSOR_TRY_ASSIGN(std::int64_t axis, norm_axis(node, node.attr_int("axis", 0), rank));
  Shape out = first.shape;
  out[static_cast<size_t>(axis)] = 0;
  for (auto* t : parts) {
    if (t->type != first.type) return bad(node, "inputs have different dtypes");
    bool ok = static_cast<std::int64_t>(t->shape.size()) == rank;
    for (std::int64_t d = 0; ok && d < rank; ++d)
      ok = d == axis || t->shape[static_cast<size_t>(d)] == first.shape[static_cast<size_t>(d)];
    if (!ok)
      return shape(node, "cannot concatenate " + shape_str(t->shape) + " with " + shape_str(first.shape) +
                             " along axis " + std::to_string(axis));
    out[static_cast<size_t>(axis)] += t->shape[static_cast<size_t>(axis)];
  }
  GraphTensor y = GraphTensor::zeros(first.type, out);
  const std::int64_t outer = shape_numel(Shape(out.begin(), out.begin() + axis));
  const std::int64_t inner = shape_numel(Shape(out.begin() + axis + 1, out.end()));
  const std::int64_t out_row = out[static_cast<size_t>(axis)] * inner;
  std::int64_t col = 0;
  for (auto* t : parts) {
    const std::int64_t row = t->shape[static_cast<size_t>(axis)] * inner;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < row; ++j) put(y, o * out_row + col + j, *t, o * row + j);
    col += row;
  }
  return one(std::move(y));
}

Outs run_gather(const Node& node, const GraphTensor& x, const GraphTensor& idx_t) {
  FUSOR_TRY_ASSIGN(std::vector<std::int64_t> idx, ints_of(node, idx_t, "indices"));
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  FUSOR_TRY_ASSIGN(std::int64_t axis, norm_axis(node, node.attr_int("axis", 0), rank));
  const std::int64_t dim = x.shape[static_cast<size_t>(axis)];
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), idx_t.shape.begin(), idx_t.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  const std::int64_t outer = shape_numel(Shape(x.shape.begin(), x.shape.begin() + axis));
  const std::int64_t inner = shape_numel(Shape(x.shape.begin() + axis + 1, x.shape.end()));
  GraphTensor y = GraphTensor::zeros(x.type, out);
  const auto n_idx = static_cast<std::int64_t>(idx.size());
  for (std::int64_t j = 0; j < n_idx; ++j) {
    std::int64_t v = idx[static_cast<size_t>(j)];
    if (v < 0) v += dim;
    if (v < 0 || v >= dim)
      return shape(node, "index " + std::to_string(idx[static_cast<size_t>(j)]) + " is out of range for axis size " +
                             std::to_string(dim));
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t c = 0; c < inner; ++c) put(y, (o * n_idx + j) * inner + c, x, (o * dim + v) * inner + c);
  }
  return one(std::move(y));
}

Outs run_expand(const Node& node, const GraphTensor& x, const GraphTensor& s) {
  FUSOR_TRY_ASSIGN(std::vector<std::int64_t> dims, ints_of(node, s, "shape"));
  FUSOR_TRY_ASSIGN(Broadcast b, broadcast(node, {x.shape, Shape(dims.begin(), dims.end())}));
  GraphTensor y = GraphTensor::zeros(x.type, b.out);
  b.for_each([&](std::int64_t k, const std::int64_t* off) { put(y, k, x, off[0]); });
  return one(std::move(y));
}

Outs run_slice(const Node& node, Ins in) {
  const GraphTensor& x = *in[0];
  FUSOR_TRY(arity(node, in, 3, 5));
  FUSOR_TRY_ASSIGN(std::vector<std::int64_t> starts, ints_of(node, *in[1], "starts"));
  FUSOR_TRY_ASSIGN(std::vector<std::int64_t> ends, ints_of(node, *in[2], "ends"));
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  std::vector<std::int64_t> axes, steps(starts.size(), 1);
  if (const GraphTensor* a = opt(in, 3)) {
    FUSOR_TRY_ASSIGN(axes, ints_of(node, *a, "axes"));
  } else {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  }
  if (const GraphTensor* s = opt(in, 4)) {
    FUSOR_TRY_ASSIGN(steps, ints_of(node, *s, "steps"));
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return bad(node, "starts, ends, axes and steps must have the same length");
  std::vector<std::int64_t> begin(x.shape.size(), 0), step(x.shape.size(), 1);
  Shape out = x.shape;
  for (size_t k = 0; k < starts.size(); ++k) {
    FUSOR_TRY_ASSIGN(std::int64_t ax, norm_axis(node, axes[k], rank));
    const std::int64_t dim = x.shape[static_cast<size_t>(ax)], st = steps[k];
    if (st == 0) return bad(node, "a slice step of 0");
    auto fix = [&](std::int64_t v, std::int64_t lo, std::int64_t hi) {
      if (v < 0) v += dim;
      return std::clamp(v, lo, hi);
    };
    std::int64_t b, e;
    if (st > 0) {
      b = fix(starts[k], 0, dim);
      e = fix(ends[k], 0, dim);
    } else {
      b = fix(starts[k], -1, dim - 1);
      e = fix(ends[k], -1, dim - 1);
    }
    // Ends like INT64_MAX/INT64_MIN: fix() already clamped them after the +dim.
    const std::int64_t n = st > 0 ? std::max<std::int64_t>(0, (e - b + st - 1) / st)
                                  : std::max<std::int64_t>(0, (b - e + (-st) - 1) / (-st));
    begin[static_cast<size_t>(ax)] = b;
    step[static_cast<size_t>(ax)] = st;
    out[static_cast<size_t>(ax)] = n;
  }
  Broadcast bc;
  bc.out = out;
  const auto st = strides_of(x.shape);
  std::vector<std::int64_t> strides(x.shape.size());
  std::int64_t base = 0;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    strides[d] = st[d] * step[d];
    base += begin[d] * st[d];
  }
  bc.strides.push_back(strides);
  GraphTensor y = GraphTensor::zeros(x.type, out);
  bc.for_each([&](std::int64_t k, const std::int64_t* off) { put(y, k, x, base + off[0]); });
  return one(std::move(y));
}

Outs run_range(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 3, 3));
  for (size_t k = 0; k < 3; ++k)
    if (in[k]->numel() != 1) return shape(node, "start, limit and delta must be scalars");
  const double start = in[0]->at(0), limit = in[1]->at(0), delta = in[2]->at(0);
  if (delta == 0) return bad(node, "delta is 0");
  const auto n = static_cast<std::int64_t>(std::max(0.0, std::ceil((limit - start) / delta)));
  GraphTensor y = GraphTensor::zeros(in[0]->type, {n});
  for (std::int64_t k = 0; k < n; ++k) {
    if (y.type == ElemType::f32)
      y.f[static_cast<size_t>(k)] = static_cast<float>(start + static_cast<double>(k) * delta);
    else
      y.i[static_cast<size_t>(k)] = in[0]->i[0] + k * in[2]->i[0];
  }
  return one(std::move(y));
}

Outs run_pad(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 2, 4));
  const GraphTensor& x = *in[0];
  if (node.attr_string("mode", "constant") != "constant") return bad(node, "only mode \"constant\" is supported");
  FUSOR_TRY_ASSIGN(std::vector<std::int64_t> pads, ints_of(node, *in[1], "pads"));
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  std::vector<std::int64_t> axes;
  if (const GraphTensor* a = opt(in, 3)) {
    FUSOR_TRY_ASSIGN(axes, ints_of(node, *a, "axes"));
  } else {
    for (std::int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size()) return bad(node, "pads must hold 2 entries per padded axis");
  std::vector<std::int64_t> lo(x.shape.size(), 0);
  Shape out = x.shape;
  for (size_t k = 0; k < axes.size(); ++k) {
    FUSOR_TRY_ASSIGN(std::int64_t ax, norm_axis(node, axes[k], rank));
    lo[static_cast<size_t>(ax)] = pads[k];
    out[static_cast<size_t>(ax)] += pads[k] + pads[k + axes.size()];
    if (out[static_cast<size_t>(ax)] < 0) return shape(node, "pads crop axis " + std::to_string(ax) + " below 0");
  }
  const GraphTensor* cv = opt(in, 2);
  GraphTensor y = GraphTensor::zeros(x.type, out);
  if (cv && cv->numel() > 0) {
    for (auto& v : y.f) v = cv->f.empty() ? 0.0f : cv->f[0];
    for (auto& v : y.i) v = cv->i.empty() ? 0 : cv->i[0];
  }
  const auto st = strides_of(x.shape);
  Broadcast bc;
  bc.out = out;
  bc.strides.push_back(std::vector<std::int64_t>(out.size(), 0));
  std::vector<std::int64_t> idx(out.size(), 0);
  const std::int64_t total = shape_numel(out);
  for (std::int64_t k = 0; k < total; ++k) {
    std::int64_t src = 0;
    bool inside = true;
    for (size_t d = 0; d < out.size() && inside; ++d) {
      const std::int64_t s = idx[d] - lo[d];
      inside = s >= 0 && s < x.shape[d];
      src += s * st[d];
    }
    if (inside) put(y, k, x, src);
    for (size_t d = out.size(); d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return one(std::move(y));
}

} // namespace

std::vector<std::string_view> shape_op_names() { return {std::begin(kNames), std::end(kNames)}; }

bool is_shape_op(std::string_view op) {
  return std::find(std::begin(kNames), std::end(kNames), op) != std::end(kNames);
}

Outs run_shape_op(const Node& node, Ins in) {
  const std::string& op = node.op;
  if (op == "range") return run_range(node, in);
  if (op == "concat") return run_concat(node, in);
  if (op == "constant_of_shape") {
    FUSOR_TRY(arity(node, in, 1, 1));
    FUSOR_TRY_ASSIGN(std::vector<std::int64_t> dims, ints_of(node, *in[0], "shape"));
    for (auto d : dims)
      if (d < 0) return shape(node, "negative dimension in " + shape_str(Shape(dims.begin(), dims.end())));
    auto type = elem_type_from_name(node.attr_string("dtype", "f32"));
    if (!type) return bad(node, "attribute 'dtype' must be f32, i64 or bool");
    GraphTensor y = GraphTensor::zeros(*type, Shape(dims.begin(), dims.end()));
    const double v = node.attr_float("value", 0.0);
    for (auto& e : y.f) e = static_cast<float>(v);
    for (auto& e : y.i) e = static_cast<std::int64_t>(v);
    return one(std::move(y));
  }
  if (in.empty() || in[0] == nullptr) return bad(node, "input 0 is required");
  const GraphTensor& x = *in[0];
  if (op == "shape") return run_shape(node, x);
  if (op == "size") return one(GraphTensor::i64({}, {x.numel()}));
  if (op == "transpose") return run_transpose(node, x);
  if (op == "unsqueeze") return run_unsqueeze(node, in);
  if (op == "squeeze") return run_squeeze(node, in);
  if (op == "slice") return run_slice(node, in);
  if (op == "pad") return run_pad(node, in);
  if (op == "flatten") {
    const auto rank = static_cast<std::int64_t>(x.shape.size());
    std::int64_t axis = node.attr_int("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) return bad(node, "axis out of range for rank " + std::to_string(rank));
    return one(with_shape(x, {shape_numel(Shape(x.shape.begin(), x.shape.begin() + axis)),
                              shape_numel(Shape(x.shape.begin() + axis, x.shape.end()))}));
  }
  FUSOR_TRY(arity(node, in, 2, 2));
  if (op == "reshape") return run_reshape(node, x, *in[1]);
  if (op == "gather") return run_gather(node, x, *in[1]);
  if (op == "expand") return run_expand(node, x, *in[1]);
  return bad(node, "unknown shape op");
}

} // namespace fusor::graph_kernels
