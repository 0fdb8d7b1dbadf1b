// What the vector-math tests of the x86 lanes share: dense input grids, the maximum error of
// a helper's outputs against a double function, and a kernel of its own that applies one
// expression of the 16-lane (AVX-512) or 8-lane (AVX2) helpers to every input.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "codegen/c_renderer.hpp"
#include "fusor/operand_gen.hpp"
#include "fusor/reference.hpp"
#include "fusor/toolchain.hpp"
#include "support/x86_lanes.hpp"

namespace fusor::testing {

struct ErrorStats {
  double max_abs = 0, max_rel = 0;
};

template <class Values> ErrorStats measure(const std::vector<float>& xs, const Values& got, double (*ref)(double)) {
  ErrorStats e;
  for (size_t i = 0; i < xs.size() && i < got.size(); ++i) {
    const double r = ref(xs[i]);
    const double err = std::fabs(got[i] - r);
    e.max_abs = std::max(e.max_abs, err);
    if (std::fabs(r) > 1e-30) e.max_rel = std::max(e.max_rel, err / std::fabs(r));
  }
  return e;
}

// n + 1 evenly spaced floats from lo to hi.
inline std::vector<float> grid(double lo, double hi, int n) {
  std::vector<float> xs;
  for (int i = 0; i <= n; ++i) xs.push_back(static_cast<float>(lo + (hi - lo) * i / n));
  return xs;
}

// `expr` over `v` (a vector of `lanes` floats: 16 or 8, or one float: the scalar helpers)
// with that width's helpers, applied to every input by a kernel of its own (masked at the
// tail); the outputs.
inline std::vector<float> run_vector_expr(int lanes, const std::string& expr, const std::vector<float>& xs) {
  const bool wide = lanes == 16, scalar = lanes == 1;
  KernelSource src;
  src.source =
      "#include <immintrin.h>\n#include <math.h>\n#include <stdint.h>\n#include <string.h>\n" +
      (scalar ? codegen::render_vector_math_helpers(codegen::c99_simd_dialect())
       : wide ? codegen::render_avx512_math_helpers(codegen::c99_avx512_dialect())
              : codegen::render_avx2_math_helpers(codegen::c99_avx2_dialect())) +
      "int fusor_kernel(const void* const* operands, float* restrict out, const int64_t* dims) {\n"
      "  const float* x = (const float*)operands[0];\n"
      "  for (int64_t i = 0; i < dims[0]; i += " +
      std::to_string(lanes) + ") {\n" +
      (scalar ? "    const float v = x[i];\n    out[i] = " + expr + ";\n"
       : wide ? "    const __mmask16 k = dims[0] - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (dims[0] - "
                "i)) - 1u);\n"
                "    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);\n"
                "    _mm512_mask_storeu_ps(out + i, k, " +
                    expr + ");\n"
              : "    const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(dims[0] - i < 8 ? dims[0] - "
                "i : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));\n"
                "    const __m256 v = _mm256_maskload_ps(x + i, k);\n"
                "    _mm256_maskstore_ps(out + i, k, " +
                    expr + ");\n") +
      "  }\n  return 0;\n}\n";
  src.entry = "fusor_kernel";
  src.lang = "c";
  src.target = "x86";
  src.lane = scalar ? "x86_c" : wide ? "x86_avx512" : "x86_avx2";
  src.region_text = src.lane + " helper test: " + expr;
  auto art = x86().compile(src);
  EXPECT_TRUE(art.ok()) << (art.ok() ? "" : art.error().str());
  if (!art.ok()) return {};
  auto lib = SharedLibrary::load(art->path);
  EXPECT_TRUE(lib.ok());
  auto sym = lib->symbol("fusor_kernel");
  EXPECT_TRUE(sym.ok());
  using Fn = int (*)(const void* const*, float*, const std::int64_t*);
  std::vector<float> out(xs.size());
  const void* ops[] = {xs.data()};
  const std::int64_t dims[] = {static_cast<std::int64_t>(xs.size())};
  EXPECT_EQ(reinterpret_cast<Fn>(*sym)(ops, out.data(), dims), 0);
  return out;
}

// `fusor_expf<lanes>`: within 1.5e-7 relative of e^x on [-87, 88.7] (a grid that is not a
// multiple of the width, so the masked tail runs too), and C99's special values, with results
// below FLT_MIN flushed to 0 (never a slow denormal).
inline void expect_vector_exp(int lanes) {
  const std::string fn = "fusor_expf" + std::to_string(lanes) + "(v)";
  const auto ex = grid(-87.0, 88.7, 400001);
  const auto e = measure(ex, run_vector_expr(lanes, fn, ex), [](double x) { return std::exp(x); });
  std::printf("%s: max rel err %.3g\n", fn.c_str(), e.max_rel);
  EXPECT_LT(e.max_rel, 1.5e-7); // about 2.5 ulp
  const float inf = INFINITY, nan = NAN;
  const auto sv =
      run_vector_expr(lanes, fn, {nan, inf, -inf, 0.0f, -0.0f, 100.0f, -200.0f, 89.0f, -104.5f, -87.5f, -87.2f, 88.7f});
  ASSERT_EQ(sv.size(), 12u);
  EXPECT_TRUE(std::isnan(sv[0]));
  EXPECT_EQ(sv[1], inf);
  EXPECT_EQ(sv[2], 0.0f);
  EXPECT_EQ(sv[3], 1.0f);
  EXPECT_EQ(sv[4], 1.0f);
  EXPECT_EQ(sv[5], inf);
  EXPECT_EQ(sv[6], 0.0f);
  EXPECT_EQ(sv[7], inf); // e^89 > FLT_MAX
  EXPECT_EQ(sv[8], 0.0f);
  EXPECT_EQ(sv[9], 0.0f); // below FLT_MIN: 0, never a (slow) denormal
  EXPECT_GE(sv[10], FLT_MIN);
  EXPECT_NEAR(sv[11] / std::exp(static_cast<double>(88.7f)), 1.0, 1.5e-7); // the largest scale that stays finite
}

// `fusor_exp2f<lanes>` (`fusor_exp2f` for lanes 1): 2^x without the Cody-Waite split
// (attention's softmax, sigmoid, silu and GELU, log2 e folded into their products): about 1 ulp,
// 0 below FLT_MIN (never a denormal), inf from 2^128, NaN kept.
inline void expect_vector_exp2(int lanes) {
  const std::string fn = "fusor_exp2f" + (lanes == 1 ? std::string() : std::to_string(lanes)) + "(v)";
  const auto ex = grid(-125.0, 127.9, 400001);
  const auto e = measure(ex, run_vector_expr(lanes, fn, ex), [](double x) { return std::exp2(x); });
  std::printf("%s: max rel err %.3g\n", fn.c_str(), e.max_rel);
  EXPECT_LT(e.max_rel, 1.5e-7);
  const float inf = INFINITY, nan = NAN;
  const auto sv = run_vector_expr(lanes, fn,
                                  {nan, inf, -inf, 0.0f, -0.0f, 128.0f, -1000.0f, 1e30f, -126.5f, -126.0f, -125.6f,
                                   3.0f, -0.5f, -3.0f, -1e-7f, 127.0f, -1e30f});
  ASSERT_EQ(sv.size(), 17u);
  EXPECT_TRUE(std::isnan(sv[0]));
  EXPECT_EQ(sv[1], inf);
  EXPECT_EQ(sv[2], 0.0f);
  EXPECT_EQ(sv[3], 1.0f);
  EXPECT_EQ(sv[4], 1.0f);
  EXPECT_EQ(sv[5], inf); // 2^128 > FLT_MAX
  EXPECT_EQ(sv[6], 0.0f);
  EXPECT_EQ(sv[7], inf);
  EXPECT_EQ(sv[8], 0.0f); // below FLT_MIN: 0, never a (slow) denormal
  EXPECT_EQ(sv[9], FLT_MIN);
  EXPECT_GE(sv[10], FLT_MIN);
  EXPECT_EQ(sv[11], 8.0f); // integers are exact: r = 0
  EXPECT_NEAR(sv[12], std::sqrt(0.5), 1e-7);
  EXPECT_EQ(sv[13], 0.125f);        // floor(x) = x: r = 0 whatever the sign
  EXPECT_NEAR(sv[14], 1.0, 1.5e-7); // r just below 1, floor(x) = -1
  EXPECT_EQ(sv[15], 0x1p127f);      // the largest power that stays finite
  EXPECT_EQ(sv[16], 0.0f);
}

// `fusor_tanhf<lanes>` and `fusor_erff<lanes>`: the scalar helpers' bounds (the same
// polynomials), +-1 at +-inf, NaN kept, the sign of zero kept.
inline void expect_vector_tanh_erf(int lanes) {
  const std::string w = std::to_string(lanes), tanh_fn = "fusor_tanhf" + w + "(v)", erf_fn = "fusor_erff" + w + "(v)";
  const auto tx = grid(-12.0, 12.0, 400001);
  const auto t = measure(tx, run_vector_expr(lanes, tanh_fn, tx), [](double x) { return std::tanh(x); });
  const auto rx = grid(-6.0, 6.0, 400001);
  const auto r = measure(rx, run_vector_expr(lanes, erf_fn, rx), [](double x) { return std::erf(x); });
  std::printf("%s: max abs err %.3g, max rel err %.3g\n%s: max abs err %.3g\n", tanh_fn.c_str(), t.max_abs, t.max_rel,
              erf_fn.c_str(), r.max_abs);
  EXPECT_LT(t.max_abs, 3e-7);
  EXPECT_LT(t.max_rel, 1e-6);
  EXPECT_LT(r.max_abs, 5e-7);
  const float inf = INFINITY, nan = NAN;
  const std::vector<float> xs{nan, inf, -inf, 0.0f, -0.0f, 100.0f, -100.0f, 1e-30f, -0.7f};
  for (const std::string& fn : {tanh_fn, erf_fn}) {
    const auto y = run_vector_expr(lanes, fn, xs);
    ASSERT_EQ(y.size(), xs.size());
    EXPECT_TRUE(std::isnan(y[0])) << fn;
    EXPECT_EQ(y[1], 1.0f) << fn;
    EXPECT_EQ(y[2], -1.0f) << fn;
    EXPECT_EQ(y[3], 0.0f) << fn;
    EXPECT_TRUE(std::signbit(y[4])) << fn << ": f(-0) = -0";
    EXPECT_EQ(y[5], 1.0f) << fn;
    EXPECT_EQ(y[6], -1.0f) << fn;
    EXPECT_LT(y[8], 0.0f) << fn;
  }
  EXPECT_EQ(run_vector_expr(lanes, tanh_fn, xs)[7], 1e-30f);
}

// `fusor_fmaxf<lanes>`/`fusor_fminf<lanes>` keep C99's rule (a NaN operand yields the other
// operand) with either operand a vector or an op-table float literal.
inline void expect_vector_minmax_nan_rule(int lanes) {
  const std::string w = std::to_string(lanes), mx_fn = "fusor_fmaxf" + w, mn_fn = "fusor_fminf" + w;
  const float inf = INFINITY, nan = NAN;
  const std::vector<float> xs{nan, -inf, -100.0f, -80.0f, 0.0f, 3.0f, inf};
  const auto mx = run_vector_expr(lanes, mx_fn + "(v, -80.0f)", xs);
  const auto mxr = run_vector_expr(lanes, mx_fn + "(-80.0f, v)", xs);
  const auto mn = run_vector_expr(lanes, mn_fn + "(v, 2.0f)", xs);
  const auto nn = run_vector_expr(lanes, mx_fn + "(v, v * 0.0f + NAN)", xs);
  ASSERT_EQ(mx.size(), xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i];
    EXPECT_EQ(mx[i], std::fmax(x, -80.0f)) << x;
    EXPECT_EQ(mxr[i], std::fmax(-80.0f, x)) << x;
    EXPECT_EQ(mn[i], std::fmin(x, 2.0f)) << x;
    if (std::isnan(x))
      EXPECT_TRUE(std::isnan(nn[i]));
    else
      EXPECT_EQ(nn[i], x);
  }
}

// A two-input pointwise DAG on `lane` with special values (NaN, +-inf, +-0, +-1e30) spread
// over both inputs matches the reference.
inline void expect_dag_specials_match_reference(const Region& region, const Candidate* lane) {
  auto operands = make_operands(region, elementwise({37}), 37, 1.0);
  const float inf = INFINITY, nan = NAN;
  const float specials[] = {nan, inf, -inf, 0.0f, -0.0f, 1e30f, -1e30f};
  for (size_t i = 0; i < std::size(specials); ++i) operands[i % 2].data[i * 5] = specials[i];
  auto ref = evaluate_reference(region, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  ExecuteOptions o;
  o.candidate = lane;
  o.reference_fallback = false;
  auto out = execute_on_target(x86(), region, operands, o);
  ASSERT_TRUE(out.ok()) << out.error().str();
  EXPECT_EQ(out->tag, lane->name);
  EXPECT_TRUE(all_close(out->output, *ref));
}

} // namespace fusor::testing
