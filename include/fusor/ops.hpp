// The op vocabularies of SPEC §2. Every op is defined ONCE here, in one table row:
// name, arity, reference formula (double) and C-family expression. Every lane renders
// from these rows; nothing else in fusor spells an op's formula.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace fusor {

// Elementwise ops (epilogue/prologue/gate ops and pointwise-DAG ops share one table).
enum class Op {
  bias,
  relu,
  gelu,
  gelu_erf,
  silu,
  sigmoid,
  tanh,
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,
  neg,
  abs,
  exp,
  log,
  log1p,
  expm1,
  sqrt,
  rsqrt,
  reciprocal,
  softplus,
  sign,
  erf,
};

struct OpInfo {
  Op op;
  std::string_view name;
  int arity; // 1 or 2 (bias is binary: x and bias[n])
  // Reference formula in double; the second argument is ignored for unary ops.
  double (*reference)(double a, double b);
  // C-family expression over float operands spelled `$0` and `$1`, using only C99
  // <math.h> float functions (expf, tanhf, erff, ...) so every C dialect can render it
  // as is or map the function names. NaN semantics follow the reference formula.
  std::string_view c_expr;
  bool in_epilogue_vocabulary;  // usable as prologue/epilogue/gate op (SPEC §2, first table)
  bool in_pointwise_vocabulary; // usable in pointwise DAGs (SPEC §2, pointwise list)
  // f32 evaluation of small integers is bit-exact (no rounding): the oracle's exact-integer
  // probes then expect bit-identical results, so any difference is a logic bug.
  bool exact_on_small_integers;
};

std::span<const OpInfo> op_table();
const OpInfo& op_info(Op op);
std::optional<Op> op_from_name(std::string_view name);

// Row reductions of FusedRegion.reduction and NormChainRegion.norm. Each is written as
// the same four steps so one renderer loop and one reference loop cover all of them:
//   c = centre(row)            (none: 0, mean, or max)
//   s = Σ accumulate(x - c)
//   r = factor(s, n, eps)
//   y = output(x - c, r)
enum class RowNorm { rmsnorm, softmax, layer_norm };
enum class RowCentre { zero, mean, max };

struct RowNormInfo {
  RowNorm norm;
  std::string_view name;
  RowCentre centre;
  double (*accumulate)(double d);
  double (*factor)(double s, double n, double eps);
  double (*output)(double d, double r);
  // C-family spellings of the same steps: `$d` (x - c), `$s`, `$n`, `$eps`, `$r`.
  std::string_view c_accumulate;
  std::string_view c_factor;
  std::string_view c_output;
  // Where the output is a function of the accumulated term t = accumulate(d) and r (softmax:
  // e^d · r), that function and its spelling (`$t`, `$r`): a kernel may keep the terms of its
  // sum and finish from them instead of evaluating e^d twice. Null and empty otherwise.
  double (*output_of_term)(double t, double r);
  std::string_view c_output_of_term;
};

std::span<const RowNormInfo> row_norm_table();
const RowNormInfo& row_norm_info(RowNorm norm);
std::optional<RowNorm> row_norm_from_name(std::string_view name);

// Last-axis reductions of PointwiseReduceRegion.
enum class ReduceOp { sum, mean, amax, amin };

struct ReduceInfo {
  ReduceOp op;
  std::string_view name;
  double init;
  double (*combine)(double acc, double x);
  double (*finish)(double acc, double n);
  // `$a` accumulator, `$x` element, `$n` row length (float).
  std::string_view c_init;
  std::string_view c_combine;
  std::string_view c_finish;
};

std::span<const ReduceInfo> reduce_table();
const ReduceInfo& reduce_info(ReduceOp op);
std::optional<ReduceOp> reduce_from_name(std::string_view name);

} // namespace fusor
