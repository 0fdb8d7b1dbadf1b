#include "codegen/c_renderer.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <span>

namespace fusor::codegen {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size()))
    text.replace(pos, from.size(), to);
}

namespace {

// Substitute `$name` placeholders, then the dialect's function renames.
std::string instantiate(const CDialect& dialect, std::string_view pattern,
                        std::initializer_list<std::pair<std::string_view, std::string_view>> args) {
  std::string out(pattern);
  for (const auto& [from, to] : dialect.renames) replace_all(out, std::string(from) + "(", std::string(to) + "(");
  for (const auto& [name, value] : args) replace_all(out, name, value);
  return out;
}

} // namespace

const CDialect& c99_dialect() {
  static const CDialect dialect{"c99", "restrict", "static inline", "", {}};
  return dialect;
}

const CDialect& cuda_dialect() {
  static const CDialect dialect{
      "cuda", "__restrict__", "static __device__ __forceinline__", "extern \"C\" __global__", {}};
  return dialect;
}

const CDialect& c99_simd_dialect() {
  static const CDialect dialect{"c99_simd",
                                "restrict",
                                "static inline",
                                "",
                                {{"expf", "fusor_expf"},
                                 {"exp2f", "fusor_exp2f"},
                                 {"tanhf", "fusor_tanhf"},
                                 {"erff", "fusor_erff"},
                                 {"fmaxf", "fusor_fmaxf"},
                                 {"fminf", "fusor_fminf"}}};
  return dialect;
}

namespace {

// Polynomial coefficients, highest degree first, of the helpers that have a scalar and a
// 16-lane form: one list renders both, so the two cannot drift apart.
// tanh |x| = m/(m + 2), m = e^2|x| - 1 = 2^n·(2^r - 1) + (2^n - 1) with 2|x|·log2(e) = n + r,
// 0 <= r < 1, and 2^r - 1 = r·P(r): P fits (2^r - 1)/r with a relative minimax error of 1.2e-8,
// so m keeps its relative accuracy down to r -> 0 (no cancellation, hence no second branch).
constexpr std::array<std::string_view, 6> kExpm1Horner{"2.0745565416e-04f", "1.2710059527e-03f", "9.6506504342e-03f",
                                                       "5.5496565998e-02f", "2.4022713304e-01f", "6.9314718246e-01f"};
// erf x = x·P(x²) for |x| < 1.
constexpr std::array<std::string_view, 7> kErfSmall{
    "7.853861353153693e-5f", "-8.010193625184903e-4f", "5.188327685732524e-3f", "-2.685381193529856e-2f",
    "1.128358514861418e-1f", "-3.761262582423300e-1f", "1.128379165726710e+0f"};
// Abramowitz & Stegun 7.1.26: erf x = 1 - t·P(t)·e^(-x²), t = 1/(1 + 0.3275911|x|).
constexpr std::array<std::string_view, 5> kErfLarge{"1.061405429f", "-1.453152027f", "1.421413741f", "-0.284496736f",
                                                    "0.254829592f"};

// e^r = 1 + r + ... on |r| <= ln2/2 (relative least-squares fit, 1.7e-8 there): a plain Horner
// chain of FMAs, two fewer vector instructions than Cephes' 1 + r + r²·P(r).
constexpr std::array<std::string_view, 7> kExpHorner{
    "1.384416712e-03f", "8.374152705e-03f", "4.166799411e-02f", "1.666643173e-01f", "4.999999404e-01f", "1.0f", "1.0f"};

// 2^r = 1 + r·ln2 + ... on 0 <= r < 1 (relative minimax fit with the constant term 1, 2.0e-9
// there; 8.3e-8 evaluated in f32 with FMAs, over every float in [-126, 128)).
constexpr std::array<std::string_view, 7> kExp2Horner{"2.1612916316e-04f",
                                                      "1.2467845809e-03f",
                                                      "9.6754515544e-03f",
                                                      "5.5485282093e-02f",
                                                      "2.4022930861e-01f",
                                                      "6.9314706326e-01f",
                                                      "1.0f"};

// `acc` = the polynomial in `x` by Horner's rule: float statements (lanes 1), or 8- or
// 16-lane FMAs.
std::string horner(std::string_view acc, std::string_view x, std::span<const std::string_view> c, int lanes) {
  const std::string a(acc), v(x);
  if (lanes == 1) {
    std::string s = "  float " + a + " = " + std::string(c[0]) + ";\n";
    for (size_t i = 1; i < c.size(); ++i) s += "  " + a + " = " + a + " * " + v + " + " + std::string(c[i]) + ";\n";
    return s;
  }
  const std::string T = lanes == 16 ? "__m512" : "__m256", pre = lanes == 16 ? "_mm512_" : "_mm256_";
  std::string s = "  " + T + " " + a + " = " + pre + "set1_ps(" + std::string(c[0]) + ");\n";
  for (size_t i = 1; i < c.size(); ++i)
    s += "  " + a + " = " + pre + "fmadd_ps(" + a + ", " + v + ", " + pre + "set1_ps(" + std::string(c[i]) + "));\n";
  return s;
}

} // namespace

std::string render_vector_math_helpers(const CDialect& dialect) {
  const std::string p(dialect.helper_prefix);
  // Written as straight-line float/int arithmetic and selects so that, once inlined into a
  // `#pragma omp simd` loop, each call becomes a handful of vector instructions.
  return p + " float fusor_as_float(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }\n" +
         "/* e^x: x = n*ln2 + r (Cody-Waite), Cephes' minimax polynomial for e^r on |r| <= ln2/2, 2^n as two\n"
         "   exponent-field scales so overflow gives inf; NaN stays NaN. Results below 1.2e-38 (x < -87.3)\n"
         "   are 0, never denormal: each instruction touching a denormal takes a microcode assist. */\n" +
         p +
         " float fusor_expf(float x) {\n"
         "  float xc = x < -87.3f ? -87.3f : x;\n"
         "  xc = xc > 89.0f ? 89.0f : xc;\n"
         "  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;\n"
         "  float r = xc - n * 0.693359375f;\n"
         "  r = r + n * 2.12194440e-4f;\n"
         "  float q = 1.9875691500e-4f;\n"
         "  q = q * r + 1.3981999507e-3f;\n"
         "  q = q * r + 8.3334519073e-3f;\n"
         "  q = q * r + 4.1665795894e-2f;\n"
         "  q = q * r + 1.6666665459e-1f;\n"
         "  q = q * r + 5.0000001201e-1f;\n"
         "  q = q * r * r + r + 1.0f;\n"
         "  n = n == n ? n : 0.0f;\n"
         "  const int32_t j = (int32_t)n, h = j / 2;\n"
         "  const float y = q * fusor_as_float((uint32_t)(h + 127) << 23) * fusor_as_float((uint32_t)(j - h + 127) << "
         "23);\n"
         "  return x < -87.3f ? 0.0f : y;\n"
         "}\n"
         "/* 2^x = 2^n * 2^r, n = floor(x), r in [0, 1) exact; as q = 2^r is in [1, 2), 2^n fits one\n"
         "   exponent field (n = 128 makes it 255, inf, as 2^128 must be); NaN stays NaN; below FLT_MIN\n"
         "   (x < -126) 0, never denormal. */\n" +
         p +
         " float fusor_exp2f(float x) {\n"
         "  float xc = x < -126.0f ? -126.0f : x;\n"
         "  xc = xc > 128.0f ? 128.0f : xc;\n"
         "  const float n = floorf(xc), r = xc - n;\n" +
         horner("q", "r", kExp2Horner, 1) +
         "  const int32_t j = (int32_t)(n == n ? n : 0.0f);\n"
         "  const float y = q * fusor_as_float((uint32_t)(j + 127) << 23);\n"
         "  return x < -126.0f ? 0.0f : y;\n"
         "}\n"
         "/* tanh |x| = m/(m + 2), m = e^2|x| - 1 = 2^n*(2^r - 1) + (2^n - 1) with 2|x|*log2(e) = n + r\n"
         "   (n = its truncation, as it is >= 0; capped at 64, where the quotient is 1 in float), the sign\n"
         "   restored; below 2^-12 tanh x rounds to x, which keeps the sign of zero. NaN stays NaN. */\n" +
         p +
         " float fusor_tanhf(float x) {\n"
         "  const float ax = x < 0.0f ? -x : x;\n"
         "  float p = ax * 2.88539008177792681f;\n"
         "  p = p > 64.0f ? 64.0f : p;\n"
         "  const int32_t n = (int32_t)(p == p ? p : 0.0f);\n"
         "  const float r = p - (float)n;\n" +
         horner("q", "r", kExpm1Horner, 1) +
         "  const float s = fusor_as_float((uint32_t)(n + 127) << 23);\n"
         "  const float m = q * r * s + (s - 1.0f);\n"
         "  const float y = m / (m + 2.0f);\n"
         "  return ax < 0x1p-12f ? x : (x < 0.0f ? -y : y);\n"
         "}\n"
         "/* erf: odd polynomial below |x| = 1; above, Abramowitz & Stegun 7.1.26 (|err| <= 1.5e-7). */\n" +
         p +
         " float fusor_erff(float x) {\n"
         "  const float ax = x < 0.0f ? -x : x, z = x * x;\n" +
         horner("q", "z", kErfSmall, 1) +
         "  const float small = x * q;\n"
         "  const float t = 1.0f / (1.0f + 0.3275911f * ax);\n" +
         horner("u", "t", kErfLarge, 1) +
         "  const float big = 1.0f - u * t * fusor_expf(-z);\n"
         "  return ax < 1.0f ? small : (x < 0.0f ? -big : big);\n"
         "}\n"
         "/* C99 fmaxf/fminf semantics (a NaN operand yields the other one) as selects. */\n" +
         p + " float fusor_fmaxf(float a, float b) { return b != b ? a : (a != a ? b : (a > b ? a : b)); }\n" + p +
         " float fusor_fminf(float a, float b) { return b != b ? a : (a != a ? b : (a < b ? a : b)); }\n";
}

const CDialect& c99_avx512_dialect() {
  static const CDialect dialect{"c99_avx512",
                                "restrict",
                                "static inline",
                                "",
                                {{"expf", "fusor_expf16"},
                                 {"exp2f", "fusor_exp2f16"},
                                 {"tanhf", "fusor_tanhf16"},
                                 {"erff", "fusor_erff16"},
                                 {"fmaxf", "fusor_fmaxf16"},
                                 {"fminf", "fusor_fminf16"}},
                                "__m512",
                                "_mm512_set1_ps"};
  return dialect;
}

std::string render_avx512_math_helpers(const CDialect& dialect) {
  const std::string p(dialect.helper_prefix);
  // e^x as fusor_expf (Cody-Waite, 2^n by vscalefps) with kExpHorner's polynomial.
  // vminps returns its second operand when one is NaN, so the clamp keeps NaN (and exp(NaN) =
  // NaN); +inf clamps to 89 (-> inf); below -87.3 (-inf too) the mask makes the result 0, as
  // fusor_expf's, whatever the arithmetic made of x there: a denormal from vscalefps cost a
  // microcode assist in every instruction that touched it (60 % of a GEMM + GELU epilogue on
  // large activations).
  return p +
         " __m512 fusor_expf16(__m512 x) {\n"
         "  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), x);\n"
         "  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),\n"
         "                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);\n"
         "  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);\n"
         "  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);\n" +
         horner("q", "r", kExpHorner, 16) +
         "  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_NLT_UQ), q, n);\n"
         "}\n" +
         "/* 2^x as 2^r * 2^floor(x), r = x - floor(x) in [0, 1): vreduceps gives r exactly and\n"
         "   vscalefps applies floor(x) itself, so neither the rounding (two uops of vrndscaleps) nor\n"
         "   n is needed: 9 instructions against fusor_expf16's 14, for callers that fold log2(e)\n"
         "   into a scale they multiply by anyway (attention's softmax). NaN stays NaN (r is NaN),\n"
         "   -inf gives 0 and +inf gives inf (vreduceps makes r = 0 for both), overflow gives inf,\n"
         "   results below FLT_MIN (x < -126) are 0 (a denormal costs microcode assists). */\n" +
         p +
         " __m512 fusor_exp2f16(__m512 x) {\n"
         "  const __m512 r = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);\n" +
         horner("q", "r", kExp2Horner, 16) +
         "  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ), q, x);\n"
         "}\n" +
         "/* tanh as fusor_tanhf: one branch, no selects but the one below 2^-12 (x itself, so the sign\n"
         "   of zero too); vreduceps gives r, vscalefps 2^n from p itself (both floor p). The cap at 64\n"
         "   keeps NaN (vminps returns its second operand) and makes +-inf +-1. Against the two-branch\n"
         "   form it replaced (Cephes' odd polynomial below 0.625 blended with 1 - 2/(e^2|x| + 1)):\n"
         "   19 vector instructions instead of 27: the sigmoid/tanh DAG took 0.86x the time from L2.\n"
         "   erf as fusor_erff, both branches computed and blended; the sign of the large-|x| branch\n"
         "   is x's, so erf(-0) = -0 and (+-inf) = +-1; NaN stays NaN. Its e^-x^2 runs base 2 with\n"
         "   log2(e) folded into the product that forms the argument (9 instructions instead of 14):\n"
         "   the product's rounding costs relative accuracy of e only where the term it feeds is\n"
         "   small in absolute terms. */\n" +
         p + " __m512 fusor_tanhf16(__m512 x) {\n" +
         "  const __m512 ax = _mm512_abs_ps(x), one = _mm512_set1_ps(1.0f);\n"
         "  const __m512 p = _mm512_min_ps(_mm512_set1_ps(64.0f), _mm512_mul_ps(ax, "
         "_mm512_set1_ps(2.88539008177792681f)));\n"
         "  const __m512 r = _mm512_reduce_ps(p, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);\n" +
         horner("q", "r", kExpm1Horner, 16) +
         "  const __m512 s = _mm512_scalef_ps(one, p);\n"
         "  const __m512 m = _mm512_fmadd_ps(_mm512_mul_ps(q, r), s, _mm512_sub_ps(s, one));\n"
         "  const __m512 y = _mm512_div_ps(m, _mm512_add_ps(m, _mm512_set1_ps(2.0f)));\n"
         "  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0x1p-12f), _CMP_LT_OQ),\n"
         "                              _mm512_or_ps(y, _mm512_and_ps(x, _mm512_set1_ps(-0.0f))), x);\n"
         "}\n" +
         p + " __m512 fusor_erff16(__m512 x) {\n" + "  const __m512 ax = _mm512_abs_ps(x), z = _mm512_mul_ps(x, x);\n" +
         horner("q", "z", kErfSmall, 16) +
         "  const __m512 small = _mm512_mul_ps(x, q);\n"
         "  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), ax, "
         "_mm512_set1_ps(1.0f)));\n" +
         horner("u", "t", kErfLarge, 16) +
         "  const __m512 big = _mm512_fnmadd_ps(_mm512_mul_ps(u, t), fusor_exp2f16(_mm512_mul_ps(z, "
         "_mm512_set1_ps(-1.44269504088896341f))), _mm512_set1_ps(1.0f));\n"
         "  const __m512 sbig = _mm512_or_ps(big, _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));\n"
         "  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(1.0f), _CMP_LT_OQ), sbig, small);\n"
         "}\n" +
         "/* C99 fmaxf/fminf: a NaN operand yields the other one; vmaxps/vminps return b when either is.\n"
         "   The macros broadcast a float operand (an op-table literal) to 16 lanes. */\n" +
         p + " __m512 fusor_v16(__m512 x) { return x; }\n" +
         "#define fusor_lanes16(x) _Generic((x), float: _mm512_set1_ps, default: fusor_v16)(x)\n" + p +
         " __m512 fusor_fmaxf16_(__m512 a, __m512 b) {\n"
         "  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), _mm512_max_ps(a, b), a);\n"
         "}\n" +
         p +
         " __m512 fusor_fminf16_(__m512 a, __m512 b) {\n"
         "  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), _mm512_min_ps(a, b), a);\n"
         "}\n"
         "#define fusor_fmaxf16(a, b) fusor_fmaxf16_(fusor_lanes16(a), fusor_lanes16(b))\n"
         "#define fusor_fminf16(a, b) fusor_fminf16_(fusor_lanes16(a), fusor_lanes16(b))\n";
}

const CDialect& c99_avx2_dialect() {
  static const CDialect dialect{"c99_avx2",
                                "restrict",
                                "static inline",
                                "",
                                {{"expf", "fusor_expf8"},
                                 {"exp2f", "fusor_exp2f8"},
                                 {"tanhf", "fusor_tanhf8"},
                                 {"erff", "fusor_erff8"},
                                 {"fmaxf", "fusor_fmaxf8"},
                                 {"fminf", "fusor_fminf8"}},
                                "__m256",
                                "_mm256_set1_ps"};
  return dialect;
}

std::string render_avx2_math_helpers(const CDialect& dialect) {
  const std::string p(dialect.helper_prefix);
  // fusor_expf16 in AVX2: no vscalefps, so 2^n goes into the exponent field in two halves
  // (fusor_scale2n8: n up to 128, e^89 must overflow to inf, not wrap), and below -87.3 an
  // and-mask makes the result 0. NaN: vminps passes it through, q is NaN and so is the product.
  return "/* q * 2^n for integral n in two exponent-field halves (n = 128 gives inf, not a wrap); what\n"
         "   falls outside a caller's range is masked by the caller. */\n" +
         p +
         " __m256 fusor_scale2n8(__m256 q, __m256 n) {\n"
         "  const __m256i j = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(j, 1), bias = _mm256_set1_epi32(127);\n"
         "  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));\n"
         "  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(j, h), bias), "
         "23));\n"
         "  return _mm256_mul_ps(_mm256_mul_ps(q, s1), s2);\n"
         "}\n" +
         p +
         " __m256 fusor_expf8(__m256 x) {\n"
         "  const __m256 xc = _mm256_min_ps(_mm256_set1_ps(89.0f), x);\n"
         "  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),\n"
         "                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);\n"
         "  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);\n"
         "  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);\n" +
         horner("q", "r", kExpHorner, 8) +
         "  return _mm256_and_ps(fusor_scale2n8(q, n), _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_NLT_UQ));\n"
         "}\n"
         "/* fusor_exp2f16 in AVX2: r = x - floor(x) (exact) and the same polynomial; x clamped to\n"
         "   [-126, 128] first, so no product is denormal (below -126 the and-mask makes the result 0).\n"
         "   As q = 2^r is in [1, 2), 2^floor(x) fits one exponent field (fusor_expf8's q can be below 1\n"
         "   at n = 128, hence its two): n = 128 makes the field 255, inf, as 2^128 must be. NaN: the\n"
         "   clamps pass it through (vminps/vmaxps return their second operand), r and q are NaN. */\n" +
         p +
         " __m256 fusor_exp2f8(__m256 x) {\n"
         "  const __m256 xc = _mm256_max_ps(_mm256_set1_ps(-126.0f), _mm256_min_ps(_mm256_set1_ps(128.0f), x));\n"
         "  const __m256 n = _mm256_floor_ps(xc), r = _mm256_sub_ps(xc, n);\n" +
         horner("q", "r", kExp2Horner, 8) +
         "  const __m256 s = _mm256_castsi256_ps(\n"
         "      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23));\n"
         "  return _mm256_and_ps(_mm256_mul_ps(q, s), _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NLT_UQ));\n"
         "}\n"
         "/* tanh as fusor_tanhf (n by truncation, 2^n through the exponent field: n is 0..64 after the\n"
         "   cap, which keeps NaN); erf as fusor_erff (the same polynomials and exponential), both\n"
         "   branches computed and blended, the large-|x| branch taking x's sign. Both: f(-0) = -0,\n"
         "   f(+-inf) = +-1, NaN stays NaN. */\n" +
         p + " __m256 fusor_tanhf8(__m256 x) {\n" +
         "  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);\n"
         "  const __m256 ax = _mm256_andnot_ps(sign, x);\n"
         "  const __m256 p = _mm256_min_ps(_mm256_set1_ps(64.0f), _mm256_mul_ps(ax, "
         "_mm256_set1_ps(2.88539008177792681f)));\n"
         "  const __m256i n = _mm256_cvttps_epi32(p);\n"
         "  const __m256 r = _mm256_sub_ps(p, _mm256_cvtepi32_ps(n));\n" +
         horner("q", "r", kExpm1Horner, 8) +
         "  const __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));\n"
         "  const __m256 m = _mm256_fmadd_ps(_mm256_mul_ps(q, r), s, _mm256_sub_ps(s, one));\n"
         "  const __m256 y = _mm256_div_ps(m, _mm256_add_ps(m, _mm256_set1_ps(2.0f)));\n"
         "  return _mm256_blendv_ps(_mm256_or_ps(y, _mm256_and_ps(x, sign)), x,\n"
         "                          _mm256_cmp_ps(ax, _mm256_set1_ps(0x1p-12f), _CMP_LT_OQ));\n"
         "}\n" +
         p + " __m256 fusor_erff8(__m256 x) {\n" +
         "  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);\n"
         "  const __m256 ax = _mm256_andnot_ps(sign, x), z = _mm256_mul_ps(x, x);\n" +
         horner("q", "z", kErfSmall, 8) +
         "  const __m256 small = _mm256_mul_ps(x, q);\n"
         "  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, one));\n" +
         horner("u", "t", kErfLarge, 8) +
         "  const __m256 e = fusor_expf8(_mm256_sub_ps(_mm256_setzero_ps(), z));\n"
         "  const __m256 big = _mm256_fnmadd_ps(_mm256_mul_ps(u, t), e, one);\n"
         "  const __m256 sbig = _mm256_or_ps(big, _mm256_and_ps(x, sign));\n"
         "  return _mm256_blendv_ps(sbig, small, _mm256_cmp_ps(ax, one, _CMP_LT_OQ));\n"
         "}\n"
         "/* C99 fmaxf/fminf: a NaN operand yields the other one; vmaxps/vminps return b when either is.\n"
         "   The macros broadcast a float operand (an op-table literal) to 8 lanes. */\n" +
         p + " __m256 fusor_v8(__m256 x) { return x; }\n" +
         "#define fusor_lanes8(x) _Generic((x), float: _mm256_set1_ps, default: fusor_v8)(x)\n" + p +
         " __m256 fusor_fmaxf8_(__m256 a, __m256 b) {\n"
         "  return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));\n"
         "}\n" +
         p +
         " __m256 fusor_fminf8_(__m256 a, __m256 b) {\n"
         "  return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));\n"
         "}\n"
         "#define fusor_fmaxf8(a, b) fusor_fmaxf8_(fusor_lanes8(a), fusor_lanes8(b))\n"
         "#define fusor_fminf8(a, b) fusor_fminf8_(fusor_lanes8(a), fusor_lanes8(b))\n";
}

std::string float_literal(double value) {
  if (std::isnan(value)) return "NAN";
  if (std::isinf(value)) return value > 0 ? "INFINITY" : "(-INFINITY)";
  const auto f = static_cast<float>(value);
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f); // shortest form that reads back as the same float
  std::string text(buf, res.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return "(" + text + "f)";
}

bool renders_in(const CDialect& dialect, Op op) {
  if (dialect.value_type == "float") return true;
  const std::string_view e = op_info(op).c_expr;
  if (e.find_first_of("?<>=!") != std::string_view::npos) return false;
  for (std::size_t i = 0; i < e.size(); ++i) {
    if (e[i] != '(' || i == 0 || !(std::isalnum(static_cast<unsigned char>(e[i - 1])) || e[i - 1] == '_')) continue;
    std::size_t start = i;
    while (start > 0 && (std::isalnum(static_cast<unsigned char>(e[start - 1])) || e[start - 1] == '_')) --start;
    const std::string_view name = e.substr(start, i - start);
    const bool renamed = std::any_of(dialect.renames.begin(), dialect.renames.end(),
                                     [&](const auto& rename) { return rename.first == name; });
    if (!renamed) return false;
  }
  return true;
}

std::string render_op(const CDialect& dialect, Op op, std::string_view a, std::string_view b) {
  return instantiate(dialect, op_info(op).c_expr, {{"$0", a}, {"$1", b}});
}

std::string render_unary_chain(const CDialect& dialect, std::span<const Op> ops, std::string_view var,
                               std::string_view bias, std::string_view indent) {
  std::string out;
  for (Op op : ops) out += std::string(indent) + std::string(var) + " = " + render_op(dialect, op, var, bias) + ";\n";
  return out;
}

std::string render_gemm_epilogue(const CDialect& dialect, std::optional<Op> gate, std::span<const Op> epilogue,
                                 std::string_view bias_load, std::string_view residual_load, std::string_view indent) {
  const std::string in(indent);
  std::string out;
  if (gate) {
    out += render_unary_chain(dialect, std::vector<Op>{*gate}, "v", "", indent);
    out += in + "v = " + render_op(dialect, Op::mul, "v", "u") + ";\n";
  }
  const std::string type(dialect.value_type);
  if (!bias_load.empty()) out += in + "const " + type + " bv = " + std::string(bias_load) + ";\n";
  out += render_unary_chain(dialect, epilogue, "v", "bv", indent);
  if (!residual_load.empty()) {
    out += in + "const " + type + " rv = " + std::string(residual_load) + ";\n";
    out += in + "v = " + render_op(dialect, Op::add, "v", "rv") + ";\n";
  }
  return out;
}

std::string render_row_norm(const CDialect& dialect, RowNorm norm, std::string_view row, std::string_view n,
                            std::string_view eps, std::string_view indent) {
  const RowNormInfo& info = row_norm_info(norm);
  const std::string in(indent), r(row), nn(n);
  std::string out = in + "{\n";
  out += in + "  float c_ = 0.0f;\n";
  if (info.centre == RowCentre::mean) {
    out += in + "  for (int64_t j_ = 0; j_ < " + nn + "; ++j_) c_ += " + r + "[j_];\n";
    out += in + "  c_ /= (float)" + nn + ";\n";
  } else if (info.centre == RowCentre::max) {
    out += in + "  c_ = -INFINITY;\n";
    out += in + "  for (int64_t j_ = 0; j_ < " + nn + "; ++j_) c_ = " + r + "[j_] > c_ ? " + r + "[j_] : c_;\n";
  }
  out += in + "  float s_ = 0.0f;\n";
  out += in + "  for (int64_t j_ = 0; j_ < " + nn + "; ++j_) { float d_ = " + r +
         "[j_] - c_; s_ += " + instantiate(dialect, info.c_accumulate, {{"$d", "d_"}}) + "; }\n";
  out += in + "  const float r_ = " +
         instantiate(dialect, info.c_factor, {{"$s", "s_"}, {"$n", "(float)" + nn}, {"$eps", eps}}) + ";\n";
  out += in + "  for (int64_t j_ = 0; j_ < " + nn + "; ++j_) { float d_ = " + r + "[j_] - c_; " + r +
         "[j_] = " + instantiate(dialect, info.c_output, {{"$d", "d_"}, {"$r", "r_"}}) + "; }\n";
  out += in + "}\n";
  return out;
}

std::string render_row_norm_accumulate(const CDialect& dialect, RowNorm norm, std::string_view d) {
  return instantiate(dialect, row_norm_info(norm).c_accumulate, {{"$d", d}});
}

std::string render_row_norm_factor(const CDialect& dialect, RowNorm norm, std::string_view s, std::string_view n,
                                   std::string_view eps) {
  return instantiate(dialect, row_norm_info(norm).c_factor, {{"$s", s}, {"$n", n}, {"$eps", eps}});
}

std::string render_row_norm_output(const CDialect& dialect, RowNorm norm, std::string_view d, std::string_view r) {
  return instantiate(dialect, row_norm_info(norm).c_output, {{"$d", d}, {"$r", r}});
}

std::string render_row_norm_output_of_term(const CDialect& dialect, RowNorm norm, std::string_view t,
                                           std::string_view r) {
  return instantiate(dialect, row_norm_info(norm).c_output_of_term, {{"$t", t}, {"$r", r}});
}

std::string render_reduce_init(const CDialect& dialect, ReduceOp op) {
  return instantiate(dialect, reduce_info(op).c_init, {});
}

std::string render_reduce_combine(const CDialect& dialect, ReduceOp op, std::string_view acc, std::string_view x) {
  return instantiate(dialect, reduce_info(op).c_combine, {{"$a", acc}, {"$x", x}});
}

std::string render_reduce_finish(const CDialect& dialect, ReduceOp op, std::string_view acc, std::string_view n) {
  return instantiate(dialect, reduce_info(op).c_finish, {{"$a", acc}, {"$n", n}});
}

std::string render_dag(const CDialect& dialect, const PointwiseGraph& graph,
                       const std::function<std::string(int)>& load_input, std::string_view out_var,
                       std::string_view indent) {
  return render_dag_copies(
      dialect, graph, [&](int input, int) { return load_input(input); }, out_var, indent, 1);
}

std::string render_dag_copies(const CDialect& dialect, const PointwiseGraph& graph,
                              const std::function<std::string(int, int)>& load_input, std::string_view out_var,
                              std::string_view indent, int copies) {
  const std::string in(indent);
  std::string out;
  const std::string T(dialect.value_type);
  // One copy keeps the plain names (`t3_`); several number theirs (`t3_0`, `t3_1`, ...).
  auto named = [&](const std::string& base, int copy) { return copies == 1 ? base : base + std::to_string(copy); };
  // `statement(copy)` once for every copy.
  auto each = [&](const std::function<std::string(int)>& statement) {
    for (int c = 0; c < copies; ++c) out += in + statement(c) + ";\n";
  };
  for (size_t i = 0; i < graph.input_names().size(); ++i) {
    const std::string name = "in" + std::to_string(i) + "_";
    each([&](int c) { return "const " + T + " " + named(name, c) + " = " + load_input(static_cast<int>(i), c); });
  }
  auto ref = [&](const ValueRef& v, int copy) -> std::string {
    switch (v.kind) {
    case ValueRef::Kind::input: return named("in" + std::to_string(v.index) + "_", copy);
    case ValueRef::Kind::node: return named("t" + std::to_string(v.index) + "_", copy);
    case ValueRef::Kind::constant: return float_literal(v.constant);
    }
    return {};
  };
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const auto& node = graph.nodes()[i];
    // Constants become named temporaries too (one for all copies): the op table may repeat
    // an operand.
    std::string args[2];
    for (size_t a = 0; a < node.args.size(); ++a)
      if (node.args[a].kind == ValueRef::Kind::constant) {
        args[a] = "k" + std::to_string(i) + "_" + std::to_string(a) + "_";
        const std::string literal = ref(node.args[a], 0);
        const std::string value = dialect.splat.empty() ? literal : std::string(dialect.splat) + "(" + literal + ")";
        out += in + "const " + T + " " + args[a] + " = " + value + ";\n";
      }
    each([&](int c) {
      std::string arg[2];
      for (size_t a = 0; a < node.args.size(); ++a)
        arg[a] = node.args[a].kind == ValueRef::Kind::constant ? args[a] : ref(node.args[a], c);
      return "const " + T + " " + named("t" + std::to_string(i) + "_", c) + " = " +
             render_op(dialect, node.op, arg[0], arg[1]);
    });
  }
  const ValueRef& result = graph.output();
  each([&](int c) {
    const std::string value = result.kind == ValueRef::Kind::constant && !dialect.splat.empty()
                                  ? std::string(dialect.splat) + "(" + ref(result, c) + ")"
                                  : ref(result, c);
    return "const " + T + " " + std::string(out_var) + (copies == 1 ? "" : std::to_string(c)) + " = " + value;
  });
  return out;
}

std::string render_storage_helpers(const CDialect& dialect) {
  const std::string p(dialect.helper_prefix);
  return p + " float fusor_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }\n" + p +
         " float fusor_bf16(uint16_t h) { return fusor_bits_to_float((uint32_t)h << 16); }\n" + p +
         " float fusor_f16(uint16_t h) {\n"
         "  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;\n"
         "  if (exp == 0) { float v = (float)mant * 5.9604644775390625e-08f; return sign ? -v : v; }\n"
         "  if (exp == 31) return fusor_bits_to_float(sign | 0x7f800000u | (mant << 13));\n"
         "  return fusor_bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));\n"
         "}\n";
}

} // namespace fusor::codegen
