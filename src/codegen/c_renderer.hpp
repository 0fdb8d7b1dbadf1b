// The one C-family renderer: turns op-table rows into C statements. Each target's
// dialect (x86 C, CUDA, HIP) is a small table of overrides, never a second copy of an
// op's formula (the tinygrad cstyle idea).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fusor/ops.hpp"
#include "fusor/region.hpp"

namespace fusor::codegen {

// Every occurrence of `from` in text replaced by `to`, left to right (what a replacement
// inserts is not searched again). The emitters' placeholder substitution.
void replace_all(std::string& text, std::string_view from, std::string_view to);

struct CDialect {
  std::string_view name;          // "c99", "cuda"
  std::string_view restrict_kw;   // "restrict" / "__restrict__"
  std::string_view helper_prefix; // qualifiers of helper functions: "static inline" / "__device__ static inline"
  std::string_view kernel_prefix; // qualifiers of the entry: "" / "extern \"C\" __global__"
  // Math function renames applied to op-table expressions (e.g. expf → __expf).
  std::vector<std::pair<std::string_view, std::string_view>> renames;
  // Type of the values expressions compute on ("float", or "__m512" for 16 lanes at once).
  std::string_view value_type = "float";
  // Function that turns a float literal into a value_type ("" where they are the same type).
  std::string_view splat = "";
};

const CDialect& c99_dialect();

// C99 for loops the host compiler vectorises (`#pragma omp simd`): the libm functions the
// op table uses for transcendental ops (expf, tanhf, erff) and fmaxf/fminf are renamed to
// the branch-free helpers of render_vector_math_helpers, which inline into SIMD code. The
// op table's expressions are rendered unchanged otherwise (same NaN semantics).
const CDialect& c99_simd_dialect();

// Definitions of the helpers c99_simd_dialect renames to (fusor_expf, fusor_tanhf,
// fusor_erff, fusor_fmaxf, fusor_fminf). Their measured maximum errors are in
// docs/performance.md (tests/test_x86_simd.cpp measures them against double).
std::string render_vector_math_helpers(const CDialect& dialect);
// AVX-512 code that holds 16 floats in a __m512: op-table expressions render over __m512
// operands (GCC's vector extensions give + - * / with scalar operands), with expf renamed to
// `fusor_expf16` of render_avx512_math_helpers (the same Cody-Waite split and Cephes
// polynomial as fusor_expf, in fused multiply-adds, 2^n by vscalefps), tanhf/erff to
// fusor_tanhf16/fusor_erff16 (fusor_tanhf/fusor_erff's polynomials, branches blended) and
// fmaxf/fminf to 16-lane versions with C99's NaN rule. Only expressions whose functions have
// such a spelling render with this dialect (renders_in); float literals become vectors
// through `splat` where a value must be one.
const CDialect& c99_avx512_dialect();
std::string render_avx512_math_helpers(const CDialect& dialect);
// The same over __m256 for hosts with AVX2 and FMA but no AVX-512: fusor_expf8 (2^n through
// the exponent field), fusor_exp2f8 (fusor_exp2f16's 2^x: attention's few-query softmax),
// fusor_tanhf8, fusor_erff8 and fusor_fmaxf8/fusor_fminf8, with the scalar helpers'
// polynomials and NaN rules.
const CDialect& c99_avx2_dialect();
std::string render_avx2_math_helpers(const CDialect& dialect);
// CUDA C++ compiled by NVRTC: device helpers, `__restrict__`, an extern "C" __global__
// entry. No math renames: the lanes keep IEEE expf/tanhf so f32 budgets stay exact.
const CDialect& cuda_dialect();

// A float literal that C and CUDA read back exactly (INFINITY/NAN for non-finite).
std::string float_literal(double value);

// Whether `op`'s expression renders in `dialect`: always for scalar dialects; a vector
// dialect needs an expression without selects or comparisons (C has no vector `?:`) whose
// every function has a rename there.
bool renders_in(const CDialect& dialect, Op op);

// `op` applied to operand expressions `a` (and `b` for binary ops). Operands should be
// plain variables: the op table may mention an operand several times.
std::string render_op(const CDialect& dialect, Op op, std::string_view a, std::string_view b = {});

// Statements applying `ops` in order to float variable `var` in place; `bias` is the
// expression for the bias operand (only used if `ops` contains Op::bias).
std::string render_unary_chain(const CDialect& dialect, std::span<const Op> ops, std::string_view var,
                               std::string_view bias, std::string_view indent);

// What a GEMM-rooted kernel applies to its accumulator `v` before the store, one statement a
// line at `indent`: the gate (v = act(v) · u, `u` declared by the caller), the bias loaded
// into `bv` by `bias_load` when the epilogue holds one, the epilogue chain, then the residual
// loaded into `rv` by `residual_load` and added. An empty load expression: none.
std::string render_gemm_epilogue(const CDialect& dialect, std::optional<Op> gate, std::span<const Op> epilogue,
                                 std::string_view bias_load, std::string_view residual_load, std::string_view indent);

// Statements normalising `row[0..n)` in place (float* row, int64 n), as RowNormInfo's
// four steps. `eps` is an expression.
std::string render_row_norm(const CDialect& dialect, RowNorm norm, std::string_view row, std::string_view n,
                            std::string_view eps, std::string_view indent);

// Single steps of a row norm, for kernels that stream a row instead of holding it
// (flash-style attention uses softmax's accumulate and factor steps).
std::string render_row_norm_accumulate(const CDialect& dialect, RowNorm norm, std::string_view d);
std::string render_row_norm_factor(const CDialect& dialect, RowNorm norm, std::string_view s, std::string_view n,
                                   std::string_view eps);
// The output step `y = output(d, r)` alone, for kernels that normalise a row in parallel.
std::string render_row_norm_output(const CDialect& dialect, RowNorm norm, std::string_view d, std::string_view r);
// The output from the accumulated term t (RowNormInfo::c_output_of_term; the norm must have one).
std::string render_row_norm_output_of_term(const CDialect& dialect, RowNorm norm, std::string_view t,
                                           std::string_view r);

// The pieces of a last-axis reduction for accumulator `acc`, element `x`, length `n`.
std::string render_reduce_init(const CDialect& dialect, ReduceOp op);
std::string render_reduce_combine(const CDialect& dialect, ReduceOp op, std::string_view acc, std::string_view x);
std::string render_reduce_finish(const CDialect& dialect, ReduceOp op, std::string_view acc, std::string_view n);

// Statements evaluating a pointwise DAG into `float <out_var>`: `load_input(i)` gives
// the expression reading external input i at the current element.
std::string render_dag(const CDialect& dialect, const PointwiseGraph& graph,
                       const std::function<std::string(int)>& load_input, std::string_view out_var,
                       std::string_view indent);

// The same for `copies` independent elements (vectors) at once, one statement at a time for
// every copy before the next statement; names take the copy's number as a suffix
// (`<out_var>0`, `<out_var>1`, ...) and `load_input(i, copy)` reads input i for that copy.
// Interleaved, the copies' dependency chains overlap even where one chain (an exponential, a
// divide, a tanh) is longer than the out-of-order window can look ahead.
std::string render_dag_copies(const CDialect& dialect, const PointwiseGraph& graph,
                              const std::function<std::string(int, int)>& load_input, std::string_view out_var,
                              std::string_view indent, int copies);

// Helper functions that convert stored f16/bf16 bits to float (portable bit math).
std::string render_storage_helpers(const CDialect& dialect);

} // namespace fusor::codegen
