// The one op table (SPEC §2). Reference formulas in double, C-family spellings in float.
#include "fusor/ops.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace fusor {
namespace {

double nan_max(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? a + b : std::max(a, b); }
double nan_min(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? a + b : std::min(a, b); }

double gelu_tanh(double x) {
  const double t = std::clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -30.0, 30.0);
  return 0.5 * x * (1.0 + std::tanh(t));
}

// clang-format off
const std::array<OpInfo, 25> kOps{{
  {Op::bias, "bias", 2, [](double a, double b) { return a + b; }, "($0 + $1)", true, false, true},
  {Op::relu, "relu", 1, [](double a, double) { return a < 0.0 ? 0.0 : a; }, "($0 < 0.0f ? 0.0f : $0)", true, true, true},
  // gelu's float spelling is the logistic form of the same function, 0.5x(1 + tanh u) =
  // x / (1 + e^(-2u)): one exp and a divide (tanh costs both plus selects), and no
  // cancellation in 1 + tanh(u) for negative u. The exponent is held above -80 (x/(1 + e^-80)
  // is x in float): a subnormal e^(-2u) costs a microcode assist per vector on x86.
  // gelu, silu and sigmoid take e^y as 2^(y·log2 e), log2 e folded into the product that forms
  // the argument: e^y only ever feeds 1 + e^y in a divisor, where the product's rounding
  // (relative error |y|·2^-24 in e^y, as rounding y itself would give) costs nothing in
  // absolute terms, and a base-2 exponential skips the Cody-Waite split (x86: 9 vector
  // instructions against 14).
  {Op::gelu, "gelu", 1, [](double a, double) { return gelu_tanh(a); },
   "($0 / (1.0f + exp2f(fmaxf(-2.302208198144325f * ($0 + 0.044715f * $0 * $0 * $0), -115.0f))))", true, true, false},
  {Op::gelu_erf, "gelu_erf", 1, [](double a, double) { return 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0))); },
   "(0.5f * $0 * (1.0f + erff($0 * 0.70710678118654752f)))", true, true, false},
  {Op::silu, "silu", 1, [](double a, double) { return a / (1.0 + std::exp(-a)); }, "($0 / (1.0f + exp2f(-1.44269504088896341f * $0)))", true, true, false},
  {Op::sigmoid, "sigmoid", 1, [](double a, double) { return 1.0 / (1.0 + std::exp(-a)); }, "(1.0f / (1.0f + exp2f(-1.44269504088896341f * $0)))", true, true, false},
  {Op::tanh, "tanh", 1, [](double a, double) { return std::tanh(a); }, "tanhf($0)", true, true, false},
  {Op::add, "add", 2, [](double a, double b) { return a + b; }, "($0 + $1)", false, true, true},
  {Op::sub, "sub", 2, [](double a, double b) { return a - b; }, "($0 - $1)", false, true, true},
  {Op::mul, "mul", 2, [](double a, double b) { return a * b; }, "($0 * $1)", false, true, true},
  {Op::div, "div", 2, [](double a, double b) { return a / b; }, "($0 / $1)", false, true, false},
  {Op::maximum, "maximum", 2, nan_max, "((($0 != $0) || ($1 != $1)) ? ($0 + $1) : fmaxf($0, $1))", false, true, true},
  {Op::minimum, "minimum", 2, nan_min, "((($0 != $0) || ($1 != $1)) ? ($0 + $1) : fminf($0, $1))", false, true, true},
  {Op::neg, "neg", 1, [](double a, double) { return -a; }, "(-$0)", false, true, true},
  {Op::abs, "abs", 1, [](double a, double) { return std::fabs(a); }, "fabsf($0)", false, true, true},
  {Op::exp, "exp", 1, [](double a, double) { return std::exp(a); }, "expf($0)", false, true, false},
  {Op::log, "log", 1, [](double a, double) { return std::log(a); }, "logf($0)", false, true, false},
  {Op::log1p, "log1p", 1, [](double a, double) { return std::log1p(a); }, "log1pf($0)", false, true, false},
  {Op::expm1, "expm1", 1, [](double a, double) { return std::expm1(a); }, "expm1f($0)", false, true, false},
  {Op::sqrt, "sqrt", 1, [](double a, double) { return std::sqrt(a); }, "sqrtf($0)", false, true, false},
  {Op::rsqrt, "rsqrt", 1, [](double a, double) { return 1.0 / std::sqrt(a); }, "(1.0f / sqrtf($0))", false, true, false},
  {Op::reciprocal, "reciprocal", 1, [](double a, double) { return 1.0 / a; }, "(1.0f / $0)", false, true, false},
  {Op::softplus, "softplus", 1, [](double a, double) { return std::max(a, 0.0) + std::log1p(std::exp(-std::fabs(a))); },
   "(fmaxf($0, 0.0f) + log1pf(expf(-fabsf($0))))", false, true, false},
  {Op::sign, "sign", 1, [](double a, double) { return a > 0.0 ? 1.0 : (a < 0.0 ? -1.0 : a); },
   "($0 > 0.0f ? 1.0f : ($0 < 0.0f ? -1.0f : $0))", false, true, true},
  {Op::erf, "erf", 1, [](double a, double) { return std::erf(a); }, "erff($0)", false, true, false},
}};

const std::array<RowNormInfo, 3> kRowNorms{{
  {RowNorm::rmsnorm, "rmsnorm", RowCentre::zero,
   [](double d) { return d * d; },
   [](double s, double n, double eps) { return 1.0 / std::sqrt(s / n + eps); },
   [](double d, double r) { return d * r; },
   "($d * $d)", "(1.0f / sqrtf($s / $n + $eps))", "($d * $r)", nullptr, ""},
  {RowNorm::softmax, "softmax", RowCentre::max,
   [](double d) { return std::exp(d); },
   [](double s, double, double) { return 1.0 / s; },
   [](double d, double r) { return std::exp(d) * r; },
   "expf($d)", "(1.0f / $s)", "(expf($d) * $r)",
   [](double t, double r) { return t * r; }, "($t * $r)"},
  {RowNorm::layer_norm, "layer_norm", RowCentre::mean,
   [](double d) { return d * d; },
   [](double s, double n, double eps) { return 1.0 / std::sqrt(s / n + eps); },
   [](double d, double r) { return d * r; },
   "($d * $d)", "(1.0f / sqrtf($s / $n + $eps))", "($d * $r)", nullptr, ""},
}};

const std::array<ReduceInfo, 4> kReduces{{
  {ReduceOp::sum, "sum", 0.0, [](double a, double x) { return a + x; }, [](double a, double) { return a; },
   "0.0f", "($a + $x)", "$a"},
  {ReduceOp::mean, "mean", 0.0, [](double a, double x) { return a + x; }, [](double a, double n) { return a / n; },
   "0.0f", "($a + $x)", "($a / $n)"},
  // amax/amin propagate NaN: once the accumulator is NaN no comparison replaces it.
  {ReduceOp::amax, "amax", -std::numeric_limits<double>::infinity(),
   [](double a, double x) { return (x > a || std::isnan(x)) ? x : a; }, [](double a, double) { return a; },
   "(-INFINITY)", "((($x) > ($a) || ($x) != ($x)) ? ($x) : ($a))", "$a"},
  {ReduceOp::amin, "amin", std::numeric_limits<double>::infinity(),
   [](double a, double x) { return (x < a || std::isnan(x)) ? x : a; }, [](double a, double) { return a; },
   "INFINITY", "((($x) < ($a) || ($x) != ($x)) ? ($x) : ($a))", "$a"},
}};
// clang-format on

template <class Table, class Key> auto& find_row(const Table& table, Key key) {
  for (const auto& row : table)
    if constexpr (requires { row.op; }) {
      if (row.op == key) return row;
    } else {
      if (row.norm == key) return row;
    }
  return table.front(); // unreachable: every enumerator has a row (checked by tests)
}

template <class Table> auto find_name(const Table& table, std::string_view name) {
  using Row = typename Table::value_type;
  for (const Row& row : table)
    if (row.name == name) {
      if constexpr (requires { row.op; })
        return std::optional{row.op};
      else
        return std::optional{row.norm};
    }
  if constexpr (requires(Row r) { r.op; })
    return std::optional<decltype(Row::op)>{};
  else
    return std::optional<decltype(Row::norm)>{};
}

} // namespace

std::span<const OpInfo> op_table() { return kOps; }
const OpInfo& op_info(Op op) { return find_row(kOps, op); }
std::optional<Op> op_from_name(std::string_view name) { return find_name(kOps, name); }

std::span<const RowNormInfo> row_norm_table() { return kRowNorms; }
const RowNormInfo& row_norm_info(RowNorm norm) { return find_row(kRowNorms, norm); }
std::optional<RowNorm> row_norm_from_name(std::string_view name) { return find_name(kRowNorms, name); }

std::span<const ReduceInfo> reduce_table() { return kReduces; }
const ReduceInfo& reduce_info(ReduceOp op) { return find_row(kReduces, op); }
std::optional<ReduceOp> reduce_from_name(std::string_view name) { return find_name(kReduces, name); }

} // namespace fusor
