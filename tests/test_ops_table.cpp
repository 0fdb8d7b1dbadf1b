// The one op table: completeness, names, hand-checked reference values, C spellings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "fusor/ops.hpp"

using namespace fusor;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double ref(Op op, double a, double b = 0.0) { return op_info(op).reference(a, b); }

// The `$x` placeholders of a C spelling (the character after each '$'; "eps" counts as 'e').
std::multiset<std::string> placeholders(std::string_view expr) {
  std::multiset<std::string> out;
  for (size_t i = 0; i < expr.size(); ++i)
    if (expr[i] == '$') {
      if (expr.substr(i + 1, 3) == "eps")
        out.insert("eps");
      else
        out.insert(std::string(expr.substr(i + 1, 1)));
    }
  return out;
}

} // namespace

TEST(OpsTable, EveryOpHasExactlyOneRow) {
  const int count = static_cast<int>(Op::erf) + 1;
  EXPECT_EQ(op_table().size(), static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    const Op op = static_cast<Op>(i);
    int rows = 0;
    for (const auto& row : op_table()) rows += row.op == op;
    EXPECT_EQ(rows, 1) << "op #" << i;
    EXPECT_EQ(op_info(op).op, op);
  }
}

TEST(OpsTable, NamesAreUniqueAndRoundTrip) {
  std::set<std::string_view> names;
  for (const auto& row : op_table()) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    ASSERT_TRUE(op_from_name(row.name).has_value()) << row.name;
    EXPECT_EQ(*op_from_name(row.name), row.op);
  }
  EXPECT_FALSE(op_from_name("swish").has_value());
  EXPECT_FALSE(op_from_name("").has_value());
  EXPECT_FALSE(op_from_name("Relu").has_value());
}

TEST(OpsTable, ArityAndVocabularies) {
  // SPEC §2: the epilogue vocabulary is exactly these seven, bias the only binary one.
  const std::set<std::string_view> epilogue{"bias", "relu", "gelu", "gelu_erf", "silu", "sigmoid", "tanh"};
  const std::set<std::string_view> binary{"bias", "add", "sub", "mul", "div", "maximum", "minimum"};
  for (const auto& row : op_table()) {
    EXPECT_EQ(row.in_epilogue_vocabulary, epilogue.count(row.name) == 1) << row.name;
    EXPECT_EQ(row.in_pointwise_vocabulary, row.op != Op::bias) << row.name;
    EXPECT_EQ(row.arity, binary.count(row.name) ? 2 : 1) << row.name;
  }
}

TEST(OpsTable, CExpressionsUsePlaceholdersMatchingArity) {
  for (const auto& row : op_table()) {
    const auto ph = placeholders(row.c_expr);
    ASSERT_FALSE(ph.empty()) << row.name;
    for (const auto& p : ph) EXPECT_TRUE(p == "0" || (p == "1" && row.arity == 2)) << row.name << ": $" << p;
    EXPECT_GE(ph.count("0"), 1u) << row.name;
    if (row.arity == 2) {
      EXPECT_GE(ph.count("1"), 1u) << row.name;
    }
  }
  for (const auto& row : row_norm_table()) {
    for (auto expr : {row.c_accumulate, row.c_factor, row.c_output})
      for (const auto& p : placeholders(expr))
        EXPECT_TRUE(p == "d" || p == "s" || p == "n" || p == "eps" || p == "r") << row.name << ": $" << p;
    EXPECT_EQ(row.output_of_term == nullptr, row.c_output_of_term.empty()) << row.name;
    const auto ph = placeholders(row.c_output_of_term);
    if (row.output_of_term) {
      EXPECT_EQ(ph, (std::multiset<std::string>{"r", "t"})) << row.name;
    }
  }
  for (const auto& row : reduce_table())
    for (auto expr : {row.c_init, row.c_combine, row.c_finish})
      for (const auto& p : placeholders(expr)) EXPECT_TRUE(p == "a" || p == "x" || p == "n") << row.name << ": $" << p;
}

// A norm that finishes from its accumulated terms must give its output exactly: softmax's
// kernels keep e^d from the sum's pass and multiply by r instead of evaluating e^d again.
TEST(OpsTable, RowNormOutputOfTermIsTheOutput) {
  int with_term = 0;
  for (const auto& row : row_norm_table()) {
    if (!row.output_of_term) continue;
    ++with_term;
    for (double d : {-80.0, -3.5, -1.0, -0.0, 0.0, 0.25, 2.0})
      for (double r : {1e-3, 0.5, 1.0, 7.0})
        EXPECT_EQ(row.output_of_term(row.accumulate(d), r), row.output(d, r)) << row.name << " d=" << d << " r=" << r;
  }
  EXPECT_EQ(with_term, 1); // softmax
  EXPECT_NE(row_norm_info(RowNorm::softmax).output_of_term, nullptr);
}

TEST(OpsTable, HandCheckedActivations) {
  // Values computed independently (Python math module) from the SPEC §2 formulas.
  EXPECT_DOUBLE_EQ(ref(Op::gelu, 1.0), 0.8411919906082768);
  EXPECT_DOUBLE_EQ(ref(Op::gelu, -1.0), -0.15880800939172324);
  EXPECT_DOUBLE_EQ(ref(Op::gelu, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(ref(Op::gelu, 100.0), 100.0); // tanh argument clamped to 30: tanh = 1
  EXPECT_DOUBLE_EQ(ref(Op::gelu, -100.0), 0.0);
  EXPECT_DOUBLE_EQ(ref(Op::gelu_erf, 1.0), 0.8413447460685429);
  EXPECT_DOUBLE_EQ(ref(Op::gelu_erf, -1.0), -0.15865525393145707);
  EXPECT_DOUBLE_EQ(ref(Op::silu, 1.0), 0.7310585786300049);
  EXPECT_DOUBLE_EQ(ref(Op::silu, -2.0), -0.2384058440442351);
  EXPECT_DOUBLE_EQ(ref(Op::sigmoid, 0.0), 0.5);
  EXPECT_DOUBLE_EQ(ref(Op::sigmoid, 1.0), 0.7310585786300049);
  EXPECT_DOUBLE_EQ(ref(Op::tanh, 0.5), 0.46211715726000974);
  EXPECT_EQ(ref(Op::relu, -2.0), 0.0);
  EXPECT_EQ(ref(Op::relu, 3.5), 3.5);
  EXPECT_EQ(ref(Op::relu, kInf), kInf);
  EXPECT_TRUE(std::isnan(ref(Op::relu, kNaN)));
  EXPECT_EQ(ref(Op::bias, 1.5, 2.25), 3.75);
}

TEST(OpsTable, HandCheckedPointwiseOps) {
  EXPECT_EQ(ref(Op::add, 1.5, 2.0), 3.5);
  EXPECT_EQ(ref(Op::sub, 1.5, 2.0), -0.5);
  EXPECT_EQ(ref(Op::mul, 1.5, 2.0), 3.0);
  EXPECT_EQ(ref(Op::div, 1.0, 4.0), 0.25);
  EXPECT_EQ(ref(Op::div, 1.0, 0.0), kInf);
  EXPECT_EQ(ref(Op::maximum, -1.0, 2.0), 2.0);
  EXPECT_EQ(ref(Op::minimum, -1.0, 2.0), -1.0);
  EXPECT_TRUE(std::isnan(ref(Op::maximum, kNaN, 1.0)));
  EXPECT_TRUE(std::isnan(ref(Op::maximum, 1.0, kNaN)));
  EXPECT_TRUE(std::isnan(ref(Op::minimum, kNaN, 1.0)));
  EXPECT_TRUE(std::isnan(ref(Op::minimum, 1.0, kNaN)));
  EXPECT_EQ(ref(Op::neg, 2.0), -2.0);
  EXPECT_EQ(ref(Op::abs, -2.0), 2.0);
  EXPECT_DOUBLE_EQ(ref(Op::exp, 1.0), 2.718281828459045);
  EXPECT_DOUBLE_EQ(ref(Op::log, 2.718281828459045), 1.0);
  EXPECT_EQ(ref(Op::log, 0.0), -kInf);
  EXPECT_TRUE(std::isnan(ref(Op::log, -1.0)));
  EXPECT_DOUBLE_EQ(ref(Op::log1p, 1.0), 0.6931471805599453);
  EXPECT_DOUBLE_EQ(ref(Op::log1p, 1e-20), 1e-20); // no cancellation near 0
  EXPECT_DOUBLE_EQ(ref(Op::expm1, 1.0), 1.718281828459045);
  EXPECT_DOUBLE_EQ(ref(Op::expm1, 1e-20), 1e-20);
  EXPECT_EQ(ref(Op::sqrt, 9.0), 3.0);
  EXPECT_TRUE(std::isnan(ref(Op::sqrt, -1.0)));
  EXPECT_EQ(ref(Op::rsqrt, 4.0), 0.5);
  EXPECT_EQ(ref(Op::rsqrt, 0.0), kInf);
  EXPECT_EQ(ref(Op::reciprocal, 4.0), 0.25);
  EXPECT_EQ(ref(Op::softplus, -1000.0), 0.0);
  EXPECT_EQ(ref(Op::softplus, 1000.0), 1000.0);
  EXPECT_DOUBLE_EQ(ref(Op::softplus, 0.0), 0.6931471805599453);
  EXPECT_DOUBLE_EQ(ref(Op::softplus, 2.0), 2.1269280110429727);
  EXPECT_EQ(ref(Op::sign, -3.0), -1.0);
  EXPECT_EQ(ref(Op::sign, 0.5), 1.0);
  EXPECT_EQ(ref(Op::sign, 0.0), 0.0);
  EXPECT_TRUE(std::isnan(ref(Op::sign, kNaN)));
  EXPECT_DOUBLE_EQ(ref(Op::erf, 1.0), 0.8427007929497149);
}

TEST(OpsTable, OpsMarkedExactKeepSmallIntegersIntegral) {
  // The oracle's exact-integer probes demand bit-identical results from these ops, which
  // only holds if integers in give integers out (no rounding anywhere).
  int exact = 0;
  for (const auto& row : op_table()) {
    if (!row.exact_on_small_integers) continue;
    ++exact;
    for (int a = -8; a <= 8; ++a)
      for (int b = -8; b <= 8; ++b) {
        const double y = row.reference(a, b);
        EXPECT_EQ(y, std::round(y)) << row.name << "(" << a << ", " << b << ")";
      }
  }
  EXPECT_GE(exact, 5); // add, sub, mul, relu, ... at least
  EXPECT_FALSE(op_info(Op::div).exact_on_small_integers);
  EXPECT_FALSE(op_info(Op::exp).exact_on_small_integers);
  EXPECT_TRUE(op_info(Op::mul).exact_on_small_integers);
}

TEST(OpsTable, RowNormsAndReducesHaveOneRowEach) {
  const int norms = static_cast<int>(RowNorm::layer_norm) + 1;
  EXPECT_EQ(row_norm_table().size(), static_cast<size_t>(norms));
  std::set<std::string_view> names;
  for (int i = 0; i < norms; ++i) {
    const auto n = static_cast<RowNorm>(i);
    EXPECT_EQ(row_norm_info(n).norm, n);
    EXPECT_TRUE(names.insert(row_norm_info(n).name).second);
    EXPECT_EQ(row_norm_from_name(row_norm_info(n).name), n);
  }
  EXPECT_FALSE(row_norm_from_name("none").has_value());

  const int reduces = static_cast<int>(ReduceOp::amin) + 1;
  EXPECT_EQ(reduce_table().size(), static_cast<size_t>(reduces));
  names.clear();
  for (int i = 0; i < reduces; ++i) {
    const auto r = static_cast<ReduceOp>(i);
    EXPECT_EQ(reduce_info(r).op, r);
    EXPECT_TRUE(names.insert(reduce_info(r).name).second);
    EXPECT_EQ(reduce_from_name(reduce_info(r).name), r);
  }
  EXPECT_FALSE(reduce_from_name("max").has_value());
}

namespace {

// Runs a row norm's four table steps on a small row, centring as the row says.
std::vector<double> run_norm(RowNorm norm, std::vector<double> row, double eps) {
  const auto& info = row_norm_info(norm);
  double c = 0.0;
  if (info.centre == RowCentre::mean) c = 2.0; // rows below are chosen with mean 2
  if (info.centre == RowCentre::max) c = *std::max_element(row.begin(), row.end());
  double s = 0.0;
  for (double x : row) s += info.accumulate(x - c);
  const double r = info.factor(s, static_cast<double>(row.size()), eps);
  for (double& x : row) x = info.output(x - c, r);
  return row;
}

} // namespace

TEST(OpsTable, RowNormStepsGiveHandValues) {
  EXPECT_EQ(row_norm_info(RowNorm::rmsnorm).centre, RowCentre::zero);
  EXPECT_EQ(row_norm_info(RowNorm::layer_norm).centre, RowCentre::mean);
  EXPECT_EQ(row_norm_info(RowNorm::softmax).centre, RowCentre::max);
  // rmsnorm [3, 4]: mean square 12.5.
  auto rms = run_norm(RowNorm::rmsnorm, {3.0, 4.0}, 0.0);
  EXPECT_DOUBLE_EQ(rms[0], 0.848528137423857);
  EXPECT_DOUBLE_EQ(rms[1], 1.131370849898476);
  // eps enters under the root: [1, 1] with eps 3 → 1 / sqrt(4).
  auto rms_eps = run_norm(RowNorm::rmsnorm, {1.0, 1.0}, 3.0);
  EXPECT_DOUBLE_EQ(rms_eps[0], 0.5);
  // softmax [0, ln 3] → [1/4, 3/4].
  auto sm = run_norm(RowNorm::softmax, {0.0, std::log(3.0)}, 0.0);
  EXPECT_DOUBLE_EQ(sm[0], 0.25);
  EXPECT_DOUBLE_EQ(sm[1], 0.75);
  // layer_norm [1, 3]: mean 2, biased variance 1.
  auto ln = run_norm(RowNorm::layer_norm, {1.0, 3.0}, 0.0);
  EXPECT_DOUBLE_EQ(ln[0], -1.0);
  EXPECT_DOUBLE_EQ(ln[1], 1.0);
}

TEST(OpsTable, ReduceStepsGiveHandValues) {
  const auto reduce = [](ReduceOp op, std::initializer_list<double> xs) {
    const auto& info = reduce_info(op);
    double acc = info.init;
    for (double x : xs) acc = info.combine(acc, x);
    return info.finish(acc, static_cast<double>(xs.size()));
  };
  EXPECT_EQ(reduce(ReduceOp::sum, {1, 2, 3.5}), 6.5);
  EXPECT_EQ(reduce(ReduceOp::mean, {1, 2, 3}), 2.0);
  EXPECT_EQ(reduce(ReduceOp::amax, {1, -2, 3}), 3.0);
  EXPECT_EQ(reduce(ReduceOp::amin, {1, -2, 3}), -2.0);
  EXPECT_EQ(reduce(ReduceOp::amax, {-kInf}), -kInf);
  // NaN propagates wherever it sits, and an all-NaN row is NaN (never ±inf).
  for (auto op : {ReduceOp::amax, ReduceOp::amin}) {
    EXPECT_TRUE(std::isnan(reduce(op, {kNaN, 1, 2})));
    EXPECT_TRUE(std::isnan(reduce(op, {1, kNaN, 2})));
    EXPECT_TRUE(std::isnan(reduce(op, {1, 2, kNaN})));
    EXPECT_TRUE(std::isnan(reduce(op, {kNaN, kNaN})));
  }
}
