// Elementwise graph ops with numpy broadcasting. f32 math comes from the op table
// (op_info(op).reference, in double, rounded to f32); i64/bool cover shape arithmetic,
// comparisons and masks.
#include <algorithm>
#include <cmath>
#include <limits>

#include "fusor/ops.hpp"
#include "graph/kernels.hpp"

namespace fusor::graph_kernels {
namespace {

constexpr std::string_view kCompare[] = {"equal", "less", "less_equal", "greater", "greater_equal"};
constexpr std::string_view kLogic[] = {"and", "or", "xor"};
constexpr std::string_view kOther[] = {"not", "where", "pow", "mod", "cast", "cast_like", "identity"};

bool in_list(std::span<const std::string_view> list, std::string_view op) {
  return std::find(list.begin(), list.end(), op) != list.end();
}

std::optional<Op> table_op(std::string_view name) {
  auto op = op_from_name(name);
  if (op && op_info(*op).in_pointwise_vocabulary) return op;
  return std::nullopt;
}

std::int64_t to_i64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2e18) return std::numeric_limits<std::int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v); // truncation toward zero, as ONNX Cast does
}

GraphTensor cast_to(const GraphTensor& x, ElemType to) {
  if (x.type == to) return x;
  GraphTensor y = GraphTensor::zeros(to, x.shape);
  const std::int64_t n = x.numel();
  for (std::int64_t k = 0; k < n; ++k) {
    const auto u = static_cast<size_t>(k);
    const double v = x.at(k);
    if (to == ElemType::f32)
      y.f[u] = static_cast<float>(v);
    else if (to == ElemType::boolean)
      y.i[u] = v != 0.0 ? 1 : 0; // NaN is true, as in numpy
    else
      y.i[u] = to_i64(v);
  }
  return y;
}

// Integer arithmetic of the binary table ops (shape math); the f32 path uses the table.
std::optional<std::int64_t> int_binary(Op op, std::int64_t a, std::int64_t b) {
  switch (op) {
  case Op::add: return a + b;
  case Op::sub: return a - b;
  case Op::mul: return a * b;
  case Op::div:
    if (b == 0) return std::nullopt;
    return a / b;
  case Op::maximum: return std::max(a, b);
  case Op::minimum: return std::min(a, b);
  default: return std::nullopt;
  }
}

std::optional<std::int64_t> int_unary(Op op, std::int64_t a) {
  switch (op) {
  case Op::neg: return -a;
  case Op::abs: return a < 0 ? -a : a;
  case Op::sign: return a > 0 ? 1 : (a < 0 ? -1 : 0);
  case Op::relu: return a < 0 ? 0 : a;
  default: return std::nullopt;
  }
}

Outs table_unary(const Node& node, Op op, const GraphTensor& x) {
  const OpInfo& info = op_info(op);
  if (x.type == ElemType::f32) {
    GraphTensor y = GraphTensor::zeros(ElemType::f32, x.shape);
    for (size_t k = 0; k < x.f.size(); ++k) y.f[k] = static_cast<float>(info.reference(x.f[k], 0.0));
    return outs(std::move(y));
  }
  if (x.type == ElemType::boolean || !int_unary(op, 0)) return bad(node, "'" + node.op + "' needs an f32 input");
  GraphTensor y = GraphTensor::zeros(ElemType::i64, x.shape);
  for (size_t k = 0; k < x.i.size(); ++k) y.i[k] = *int_unary(op, x.i[k]);
  return outs(std::move(y));
}

Outs binary(const Node& node, const GraphTensor& a, const GraphTensor& b) {
  FUSOR_TRY_ASSIGN(Broadcast bc, broadcast(node, {a.shape, b.shape}));
  const std::string& op = node.op;
  if (in_list(kCompare, op)) {
    GraphTensor y = GraphTensor::zeros(ElemType::boolean, bc.out);
    const bool ints = a.type != ElemType::f32 && b.type != ElemType::f32;
    bc.for_each([&](std::int64_t k, const std::int64_t* off) {
      bool r;
      if (ints) {
        const auto x = a.i[static_cast<size_t>(off[0])], z = b.i[static_cast<size_t>(off[1])];
        r = op == "equal"        ? x == z
            : op == "less"       ? x < z
            : op == "less_equal" ? x <= z
            : op == "greater"    ? x > z
                                 : x >= z;
      } else {
        const double x = a.at(off[0]), z = b.at(off[1]);
        r = op == "equal"        ? x == z
            : op == "less"       ? x < z
            : op == "less_equal" ? x <= z
            : op == "greater"    ? x > z
                                 : x >= z;
      }
      y.i[static_cast<size_t>(k)] = r ? 1 : 0;
    });
    return outs(std::move(y));
  }
  if (in_list(kLogic, op)) {
    FUSOR_TRY(want_type(node, a, ElemType::boolean, "input 0"));
    FUSOR_TRY(want_type(node, b, ElemType::boolean, "input 1"));
    GraphTensor y = GraphTensor::zeros(ElemType::boolean, bc.out);
    bc.for_each([&](std::int64_t k, const std::int64_t* off) {
      const bool x = a.i[static_cast<size_t>(off[0])] != 0, z = b.i[static_cast<size_t>(off[1])] != 0;
      y.i[static_cast<size_t>(k)] = (op == "and" ? (x && z) : op == "or" ? (x || z) : (x != z)) ? 1 : 0;
    });
    return outs(std::move(y));
  }
  if (op == "pow") {
    if (a.type == ElemType::f32) {
      GraphTensor y = GraphTensor::zeros(ElemType::f32, bc.out);
      bc.for_each([&](std::int64_t k, const std::int64_t* off) {
        y.f[static_cast<size_t>(k)] = static_cast<float>(std::pow(a.at(off[0]), b.at(off[1])));
      });
      return outs(std::move(y));
    }
    GraphTensor y = GraphTensor::zeros(ElemType::i64, bc.out);
    bc.for_each([&](std::int64_t k, const std::int64_t* off) {
      y.i[static_cast<size_t>(k)] = to_i64(std::pow(a.at(off[0]), b.at(off[1])));
    });
    return outs(std::move(y));
  }
  if (a.type != b.type)
    return bad(node, "inputs have different dtypes (" + std::string(elem_type_name(a.type)) + ", " +
                         std::string(elem_type_name(b.type)) + ")");
  if (op == "mod") {
    const bool fmod = node.attr_int("fmod", 0) != 0;
    GraphTensor y = GraphTensor::zeros(a.type, bc.out);
    bool div_zero = false;
    bc.for_each([&](std::int64_t k, const std::int64_t* off) {
      const auto u = static_cast<size_t>(k);
      if (a.type == ElemType::f32) {
        const double x = a.at(off[0]), z = b.at(off[1]);
        double r = std::fmod(x, z);
        if (!fmod && r != 0 && ((r < 0) != (z < 0))) r += z; // sign of the divisor, as numpy
        y.f[u] = static_cast<float>(r);
        return;
      }
      const auto x = a.i[static_cast<size_t>(off[0])], z = b.i[static_cast<size_t>(off[1])];
      if (z == 0) {
        div_zero = true;
        return;
      }
      std::int64_t r = x % z;
      if (!fmod && r != 0 && ((r < 0) != (z < 0))) r += z;
      y.i[u] = r;
    });
    if (div_zero) return bad(node, "integer modulo by zero");
    return outs(std::move(y));
  }
  auto top = table_op(op);
  if (!top || op_info(*top).arity != 2) return bad(node, "not a binary op");
  if (a.type == ElemType::f32) {
    const OpInfo& info = op_info(*top);
    GraphTensor y = GraphTensor::zeros(ElemType::f32, bc.out);
    // Same-shape operands are the common case: a straight loop, no index bookkeeping.
    if (a.shape == b.shape) {
      for (size_t k = 0; k < y.f.size(); ++k) y.f[k] = static_cast<float>(info.reference(a.f[k], b.f[k]));
    } else {
      bc.for_each([&](std::int64_t k, const std::int64_t* off) {
        y.f[static_cast<size_t>(k)] =
            static_cast<float>(info.reference(a.f[static_cast<size_t>(off[0])], b.f[static_cast<size_t>(off[1])]));
      });
    }
    return outs(std::move(y));
  }
  if (a.type == ElemType::boolean) return bad(node, "'" + op + "' needs f32 or i64 inputs, got bool");
  GraphTensor y = GraphTensor::zeros(ElemType::i64, bc.out);
  bool failed = false;
  bc.for_each([&](std::int64_t k, const std::int64_t* off) {
    auto r = int_binary(*top, a.i[static_cast<size_t>(off[0])], b.i[static_cast<size_t>(off[1])]);
    if (!r) failed = true;
    y.i[static_cast<size_t>(k)] = r.value_or(0);
  });
  if (failed) return bad(node, "integer '" + op + "' failed (division by zero, or no integer form)");
  return outs(std::move(y));
}

Outs where(const Node& node, const GraphTensor& c, const GraphTensor& x, const GraphTensor& y) {
  FUSOR_TRY(want_type(node, c, ElemType::boolean, "condition"));
  if (x.type != y.type) return bad(node, "the two branches have different dtypes");
  FUSOR_TRY_ASSIGN(Broadcast bc, broadcast(node, {c.shape, x.shape, y.shape}));
  GraphTensor out = GraphTensor::zeros(x.type, bc.out);
  bc.for_each([&](std::int64_t k, const std::int64_t* off) {
    const bool take_x = c.i[static_cast<size_t>(off[0])] != 0;
    const auto& src = take_x ? x : y;
    const auto o = static_cast<size_t>(take_x ? off[1] : off[2]);
    if (x.type == ElemType::f32)
      out.f[static_cast<size_t>(k)] = src.f[o];
    else
      out.i[static_cast<size_t>(k)] = src.i[o];
  });
  return outs(std::move(out));
}

} // namespace

std::vector<std::string_view> elementwise_names() {
  std::vector<std::string_view> names;
  for (const auto& info : op_table())
    if (info.in_pointwise_vocabulary) names.push_back(info.name);
  for (auto list : {std::span<const std::string_view>(kCompare), std::span<const std::string_view>(kLogic),
                    std::span<const std::string_view>(kOther)})
    names.insert(names.end(), list.begin(), list.end());
  return names;
}

bool is_elementwise(std::string_view op) {
  return table_op(op).has_value() || in_list(kCompare, op) || in_list(kLogic, op) || in_list(kOther, op);
}

Outs run_elementwise(const Node& node, Ins in) {
  const std::string& op = node.op;
  if (op == "identity") {
    FUSOR_TRY(arity(node, in, 1, 1));
    return outs(*in[0]);
  }
  if (op == "cast") {
    FUSOR_TRY(arity(node, in, 1, 1));
    auto to = elem_type_from_name(node.attr_string("to", ""));
    if (!to) return bad(node, "attribute 'to' must be f32, i64 or bool");
    return outs(cast_to(*in[0], *to));
  }
  if (op == "cast_like") {
    FUSOR_TRY(arity(node, in, 2, 2));
    return outs(cast_to(*in[0], in[1]->type));
  }
  if (op == "not") {
    FUSOR_TRY(arity(node, in, 1, 1));
    FUSOR_TRY(want_type(node, *in[0], ElemType::boolean, "input 0"));
    GraphTensor y = *in[0];
    for (auto& v : y.i) v = v ? 0 : 1;
    return outs(std::move(y));
  }
  if (op == "where") {
    FUSOR_TRY(arity(node, in, 3, 3));
    return where(node, *in[0], *in[1], *in[2]);
  }
  auto top = table_op(op);
  if (top && op_info(*top).arity == 1) {
    FUSOR_TRY(arity(node, in, 1, 1));
    return table_unary(node, *top, *in[0]);
  }
  FUSOR_TRY(arity(node, in, 2, 2));
  return binary(node, *in[0], *in[1]);
}

} // namespace fusor::graph_kernels
