// The reference evaluator for ONNX ops outside fusor's set: what a model imported with
// --allow-reference runs for them (graph op "ref.<ONNX op type>", attributes as in ONNX).
// Each op is one row of the tables below, evaluated per element in double and rounded to
// f32; where the op table (src/ir/ops.cpp) already defines a piece (tanh, softplus, expm1,
// the softmax row, amax) the row calls it. Semantics and attribute defaults follow the
// ONNX operator docs. Nothing here is ever fused or compiled. HardSigmoid, HardSwish, Pow
// and Mod are in the native set already (onnx_import.cpp), so they have no row here.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "fusor/ops.hpp"
#include "graph/kernels.hpp"

namespace fusor::graph_kernels {
namespace {

double table(Op op, double x) { return op_info(op).reference(x, 0.0); }

// ---- unary: y = f(x, p0, p1), p0/p1 read from attributes --------------------------------
struct Param {
  std::string_view attr; // empty: the row reads no attribute here
  double fallback = 0.0; // the ONNX default
};

struct UnaryRow {
  std::string_view name;
  double (*f)(double x, double p0, double p1);
  Param p0 = {}, p1 = {};
};

constexpr double kSeluAlpha = 1.67326319217681884765625, kSeluGamma = 1.05070102214813232421875;

// clang-format off
const UnaryRow kUnary[] = {
  {"ref.Acos",  [](double x, double, double) { return std::acos(x); }},
  {"ref.Acosh", [](double x, double, double) { return std::acosh(x); }},
  {"ref.Asin",  [](double x, double, double) { return std::asin(x); }},
  {"ref.Asinh", [](double x, double, double) { return std::asinh(x); }},
  {"ref.Atan",  [](double x, double, double) { return std::atan(x); }},
  {"ref.Atanh", [](double x, double, double) { return std::atanh(x); }},
  {"ref.Ceil",  [](double x, double, double) { return std::ceil(x); }},
  {"ref.Cos",   [](double x, double, double) { return std::cos(x); }},
  {"ref.Cosh",  [](double x, double, double) { return std::cosh(x); }},
  {"ref.Floor", [](double x, double, double) { return std::floor(x); }},
  // Half to even: nearbyint under the default rounding mode (ONNX Round).
  {"ref.Round", [](double x, double, double) { return std::nearbyint(x); }},
  {"ref.Sin",   [](double x, double, double) { return std::sin(x); }},
  {"ref.Sinh",  [](double x, double, double) { return std::sinh(x); }},
  {"ref.Tan",   [](double x, double, double) { return std::tan(x); }},
  {"ref.Softsign", [](double x, double, double) { return x / (1.0 + std::fabs(x)); }},
  {"ref.Mish",  [](double x, double, double) { return x * table(Op::tanh, table(Op::softplus, x)); }},
  {"ref.LeakyRelu", [](double x, double a, double) { return x < 0.0 ? a * x : x; }, {"alpha", 0.01}},
  {"ref.Elu",   [](double x, double a, double) { return x < 0.0 ? a * table(Op::expm1, x) : x; }, {"alpha", 1.0}},
  {"ref.Selu",  [](double x, double a, double g) { return x <= 0.0 ? g * a * table(Op::expm1, x) : g * x; },
   {"alpha", kSeluAlpha}, {"gamma", kSeluGamma}},
  // max(0, x) + min(0, α(e^(x/α) − 1)); NaN stays NaN (std::max/min would drop it).
  {"ref.Celu",  [](double x, double a, double) {
     return std::isnan(x) ? x : std::max(0.0, x) + std::min(0.0, a * table(Op::expm1, x / a)); }, {"alpha", 1.0}},
  {"ref.ThresholdedRelu", [](double x, double a, double) { return x > a ? x : 0.0; }, {"alpha", 1.0}},
};
// clang-format on

double param(const Node& node, const Param& p) {
  return p.attr.empty() ? 0.0 : node.attr_float(std::string(p.attr), p.fallback);
}

Outs run_unary(const Node& node, Ins in, const UnaryRow& row) {
  FUSOR_TRY(arity(node, in, 1, 1));
  const GraphTensor& x = *in[0];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "input"));
  const double p0 = param(node, row.p0), p1 = param(node, row.p1);
  GraphTensor y = GraphTensor::zeros(ElemType::f32, x.shape);
  for (size_t k = 0; k < x.f.size(); ++k) y.f[k] = static_cast<float>(row.f(x.f[k], p0, p1));
  return one(std::move(y));
}

// IsNaN, IsInf(detect_positive, detect_negative): f32 in, bool out.
Outs run_is(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 1, 1));
  const GraphTensor& x = *in[0];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "input"));
  const bool nan = node.op == "ref.IsNaN";
  const bool pos = node.attr_int("detect_positive", 1) != 0, neg = node.attr_int("detect_negative", 1) != 0;
  GraphTensor y = GraphTensor::zeros(ElemType::boolean, x.shape);
  for (size_t k = 0; k < x.f.size(); ++k) {
    const float v = x.f[k];
    y.i[k] = nan ? std::isnan(v) : std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
  }
  return one(std::move(y));
}

// Clip(input, min, max) = min(max, max(input, min)); absent bounds are ONNX's defaults,
// the float's lowest() and max() (so ±inf clip to ±FLT_MAX). The importer turns the
// attributes of Clip before opset 11 into these inputs.
Outs run_clip(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 1, 3));
  const GraphTensor& x = *in[0];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "input"));
  double bound[2] = {-FLT_MAX, FLT_MAX};
  for (size_t k = 1; k < 3; ++k) {
    const GraphTensor* b = opt(in, k);
    if (!b) continue;
    const char* what = k == 1 ? "min" : "max";
    FUSOR_TRY(want_type(node, *b, ElemType::f32, what));
    if (b->numel() != 1) return shape(node, std::string(what) + " must be a scalar, got " + shape_str(b->shape));
    bound[k - 1] = b->f[0];
  }
  GraphTensor y = GraphTensor::zeros(ElemType::f32, x.shape);
  for (size_t k = 0; k < x.f.size(); ++k) {
    const double v = x.f[k];
    y.f[k] = static_cast<float>(std::isnan(v) ? v : std::min(bound[1], std::max(v, bound[0])));
  }
  return one(std::move(y));
}

// PRelu(X, slope): slope broadcasts to X's shape (ONNX's unidirectional broadcasting).
Outs run_prelu(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 2, 2));
  const GraphTensor &x = *in[0], &slope = *in[1];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "X"));
  FUSOR_TRY(want_type(node, slope, ElemType::f32, "slope"));
  FUSOR_TRY_ASSIGN(Broadcast bc, broadcast(node, {x.shape, slope.shape}));
  if (bc.out != x.shape)
    return shape(node, "slope " + shape_str(slope.shape) + " does not broadcast to X's shape " + shape_str(x.shape));
  GraphTensor y = GraphTensor::zeros(ElemType::f32, x.shape);
  bc.for_each([&](std::int64_t k, const std::int64_t* off) {
    const double v = x.f[static_cast<size_t>(off[0])];
    y.f[static_cast<size_t>(k)] = static_cast<float>(v < 0.0 ? slope.f[static_cast<size_t>(off[1])] * v : v);
  });
  return one(std::move(y));
}

// ---- reductions over any set of axes ------------------------------------------------------
struct ReduceRow {
  std::string_view name;
  double init;
  double (*combine)(double acc, double x);
  double (*finish)(double acc);
};

// clang-format off
const ReduceRow kReduce[] = {
  {"ref.ReduceProd",      1.0, [](double a, double x) { return a * x; },            [](double a) { return a; }},
  {"ref.ReduceL1",        0.0, [](double a, double x) { return a + std::fabs(x); }, [](double a) { return a; }},
  {"ref.ReduceL2",        0.0, [](double a, double x) { return a + x * x; },        [](double a) { return std::sqrt(a); }},
  {"ref.ReduceSumSquare", 0.0, [](double a, double x) { return a + x * x; },        [](double a) { return a; }},
  {"ref.ReduceLogSum",    0.0, [](double a, double x) { return a + x; },            [](double a) { return std::log(a); }},
};
// clang-format on

Outs run_reduce(const Node& node, Ins in, const ReduceRow& row) {
  FUSOR_TRY_ASSIGN(ReducePlan plan, reduce_plan(node, in));
  const GraphTensor& x = *in[0];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "data"));
  std::vector<double> acc(static_cast<size_t>(shape_numel(plan.kept)), row.init);
  plan.to_out.for_each([&](std::int64_t k, const std::int64_t* off) {
    auto& a = acc[static_cast<size_t>(off[0])];
    a = row.combine(a, x.f[static_cast<size_t>(k)]);
  });
  GraphTensor y = GraphTensor::zeros(ElemType::f32, plan.out);
  for (size_t k = 0; k < acc.size(); ++k) y.f[k] = static_cast<float>(row.finish(acc[k]));
  return one(std::move(y));
}

// log Σ e^x = c + log Σ e^(x − c) with c the max (amax of the reduce table, NaN-propagating),
// i.e. the log of the softmax row's denominator; an infinite max is the answer itself
// (-inf for an empty or all -inf set).
Outs run_reduce_log_sum_exp(const Node& node, Ins in) {
  FUSOR_TRY_ASSIGN(ReducePlan plan, reduce_plan(node, in));
  const GraphTensor& x = *in[0];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "data"));
  const ReduceInfo& amax = reduce_info(ReduceOp::amax);
  const RowNormInfo& softmax = row_norm_info(RowNorm::softmax);
  const auto n_out = static_cast<size_t>(shape_numel(plan.kept));
  std::vector<double> c(n_out, amax.init), s(n_out, 0.0);
  plan.to_out.for_each([&](std::int64_t k, const std::int64_t* off) {
    auto& m = c[static_cast<size_t>(off[0])];
    m = amax.combine(m, x.f[static_cast<size_t>(k)]);
  });
  plan.to_out.for_each([&](std::int64_t k, const std::int64_t* off) {
    const auto o = static_cast<size_t>(off[0]);
    if (std::isfinite(c[o])) s[o] += softmax.accumulate(x.f[static_cast<size_t>(k)] - c[o]);
  });
  GraphTensor y = GraphTensor::zeros(ElemType::f32, plan.out);
  for (size_t k = 0; k < n_out; ++k)
    y.f[k] = static_cast<float>(std::isfinite(c[k]) ? c[k] - std::log(softmax.factor(s[k], 1.0, 0.0)) : c[k]);
  return one(std::move(y));
}

// ---- along one axis: LogSoftmax, Hardmax --------------------------------------------------
// The rows along `axis` (default -1). Before opset 13 these ops flattened the input to 2-D
// at `axis` (default 1); the importer marks such nodes with coerce_2d=1.
struct Rows {
  std::int64_t outer = 1, n = 1, inner = 1; // row r = (o, i): elements o·n·inner + i + j·inner
};

Expected<Rows> rows_along(const Node& node, const GraphTensor& x) {
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  Rows r;
  if (rank == 0) return r; // a scalar is one row of one element
  const bool coerce = node.attr_int("coerce_2d", 0) != 0;
  FUSOR_TRY_ASSIGN(std::int64_t axis, norm_axis(node, node.attr_int("axis", coerce ? 1 : -1), rank));
  const auto a = static_cast<size_t>(axis);
  r.outer = shape_numel(Shape(x.shape.begin(), x.shape.begin() + axis));
  if (coerce) {
    r.n = shape_numel(Shape(x.shape.begin() + axis, x.shape.end()));
  } else {
    r.n = x.shape[a];
    r.inner = shape_numel(Shape(x.shape.begin() + axis + 1, x.shape.end()));
  }
  return r;
}

// x − c − log Σ e^(x − c): the softmax row's steps with the log taken before the exp, so
// tiny probabilities stay finite.
Outs run_log_softmax(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 1, 1));
  const GraphTensor& x = *in[0];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "input"));
  FUSOR_TRY_ASSIGN(Rows r, rows_along(node, x));
  const ReduceInfo& amax = reduce_info(ReduceOp::amax);
  const RowNormInfo& softmax = row_norm_info(RowNorm::softmax);
  GraphTensor y = x;
  for (std::int64_t o = 0; o < r.outer; ++o)
    for (std::int64_t i = 0; i < r.inner; ++i) {
      const float* row = x.f.data() + o * r.n * r.inner + i;
      float* out = y.f.data() + o * r.n * r.inner + i;
      double c = amax.init, s = 0.0;
      for (std::int64_t j = 0; j < r.n; ++j) c = amax.combine(c, row[j * r.inner]);
      for (std::int64_t j = 0; j < r.n; ++j) s += softmax.accumulate(row[j * r.inner] - c);
      const double log_r = std::log(softmax.factor(s, static_cast<double>(r.n), 0.0));
      for (std::int64_t j = 0; j < r.n; ++j) out[j * r.inner] = static_cast<float>(row[j * r.inner] - c + log_r);
    }
  return one(std::move(y));
}

// 1 at the first maximum of each row, 0 elsewhere; a NaN counts as the maximum (numpy's
// argmax, which the ONNX reference uses).
Outs run_hardmax(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 1, 1));
  const GraphTensor& x = *in[0];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "input"));
  FUSOR_TRY_ASSIGN(Rows r, rows_along(node, x));
  GraphTensor y = GraphTensor::zeros(ElemType::f32, x.shape);
  if (r.n == 0) return one(std::move(y));
  for (std::int64_t o = 0; o < r.outer; ++o)
    for (std::int64_t i = 0; i < r.inner; ++i) {
      const std::int64_t base = o * r.n * r.inner + i;
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < r.n && !std::isnan(x.f[static_cast<size_t>(base + best * r.inner)]); ++j) {
        const float v = x.f[static_cast<size_t>(base + j * r.inner)];
        if (std::isnan(v) || v > x.f[static_cast<size_t>(base + best * r.inner)]) best = j;
      }
      y.f[static_cast<size_t>(base + best * r.inner)] = 1.0f;
    }
  return one(std::move(y));
}

// ---- the ops with a kernel of their own ----------------------------------------------------
struct SpecialRow {
  std::string_view name;
  Outs (*run)(const Node& node, Ins in);
};

const SpecialRow kSpecial[] = {
    {"ref.Clip", run_clip},
    {"ref.Hardmax", run_hardmax},
    {"ref.IsInf", run_is},
    {"ref.IsNaN", run_is},
    {"ref.LogSoftmax", run_log_softmax},
    {"ref.PRelu", run_prelu},
    {"ref.ReduceLogSumExp", run_reduce_log_sum_exp},
};

template <class Table> auto find(const Table& rows, std::string_view op) -> decltype(&rows[0]) {
  for (const auto& row : rows)
    if (row.name == op) return &row;
  return nullptr;
}

} // namespace

std::vector<std::string_view> reference_op_names() {
  std::vector<std::string_view> names;
  for (const auto& r : kUnary) names.push_back(r.name);
  for (const auto& r : kReduce) names.push_back(r.name);
  for (const auto& r : kSpecial) names.push_back(r.name);
  std::sort(names.begin(), names.end());
  return names;
}

bool is_reference_table_op(std::string_view op) { return find(kUnary, op) || find(kReduce, op) || find(kSpecial, op); }

Outs run_reference_op(const Node& node, Ins in) {
  if (const auto* row = find(kUnary, node.op)) return run_unary(node, in, *row);
  if (const auto* row = find(kReduce, node.op)) return run_reduce(node, in, *row);
  if (const auto* row = find(kSpecial, node.op)) return row->run(node, in);
  return bad(node, "not an op of the reference evaluator's table");
}

} // namespace fusor::graph_kernels
