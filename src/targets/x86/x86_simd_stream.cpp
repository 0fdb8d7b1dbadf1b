// Streaming kinds for the AVX-512 and AVX2 lanes: norm chains, pointwise DAGs and pointwise
// reductions as `omp simd` loops over the op table's expressions in the SIMD dialect.
// Norm rows are software-pipelined or staged (norm_chain_body says which and why) so memory
// sees one read of each input and one write of the output; reductions keep 16 lane accumulators
// so NaN-propagating combines (amax/amin) vectorise without changing their semantics.
#include <algorithm>
#include <functional>

#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_broadcast.hpp"
#include "targets/x86/x86_emitter.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

using codegen::c99_simd_dialect;

namespace {

// Statements adding `term(idx, k)` (statements that add one element into accumulator `a<k>_`)
// for idx over [0, n) into float `acc`: four accumulators over the row's quarters, so the sum
// runs four independent vector add chains instead of one latency-bound chain.
std::string split_sum(const std::string& acc, const std::string& n, const std::string& in,
                      const std::function<std::string(const std::string&, int)>& term) {
  std::string s = in + "{\n" + in + "  const int64_t q_ = " + n + " / 4;\n";
  s += in + "  float a0_ = 0.0f, a1_ = 0.0f, a2_ = 0.0f, a3_ = 0.0f;\n";
  s += in + "  #pragma omp simd reduction(+:a0_, a1_, a2_, a3_)\n";
  s += in + "  for (int64_t j_ = 0; j_ < q_; ++j_) {\n";
  for (int k = 0; k < 4; ++k) s += in + "    " + term(k == 0 ? "j_" : "j_ + " + std::to_string(k) + " * q_", k) + "\n";
  s += in + "  }\n";
  s += in + "  for (int64_t j_ = 4 * q_; j_ < " + n + "; ++j_) " + term("j_", 0) + "\n";
  s += in + "  " + acc + " = (a0_ + a1_) + (a2_ + a3_);\n" + in + "}\n";
  return s;
}

// A row's element idx: `row` with every '@' replaced by idx ("t[@]": an array's; a residual
// row re-read: its two inputs' sum).
std::string element(std::string row, const std::string& idx) {
  codegen::replace_all(row, "@", idx);
  return row;
}

// `accumulate(row[idx] - c_)` added into a<k>_, from the op table (`row`: element's pattern).
std::string accumulate_term(RowNorm norm, const std::string& row, const std::string& idx, int k) {
  const std::string K = std::to_string(k);
  return "{ const float d" + K + "_ = " + element(row, idx) + " - c_; a" + K +
         "_ += " + codegen::render_row_norm_accumulate(c99_simd_dialect(), norm, "d" + K + "_") + "; }";
}

// Per-lane maximum of src[0..n) into c_, as the scalar renderer's comparison: a NaN never
// becomes the maximum and an all -inf row keeps -inf (an OpenMP max reduction would start at
// -FLT_MAX).
std::string max_centre(const std::string& src, const std::string& n, const std::string& in) {
  std::string s =
      in + "{\n" + in + "  float m_[16];\n" + in + "  for (int l_ = 0; l_ < 16; ++l_) m_[l_] = -INFINITY;\n";
  s += in + "  int64_t j_ = 0;\n";
  s += in + "  for (; j_ + 16 <= " + n + "; j_ += 16) {\n";
  s += in + "    #pragma omp simd\n";
  s += in + "    for (int l_ = 0; l_ < 16; ++l_) m_[l_] = " + src + "[j_ + l_] > m_[l_] ? " + src +
       "[j_ + l_] : m_[l_];\n";
  s += in + "  }\n";
  s += in + "  for (; j_ < " + n + "; ++j_) m_[0] = " + src + "[j_] > m_[0] ? " + src + "[j_] : m_[0];\n";
  s += in + "  c_ = -INFINITY;\n";
  s += in + "  for (int l_ = 0; l_ < 16; ++l_) c_ = m_[l_] > c_ ? m_[l_] : c_;\n" + in + "}\n";
  return s;
}

// The output step of the op table, then the optional per-feature gamma/beta, for element j_
// of the row (`row`: element's pattern) into `v_` (statements, no store).
std::string output_value(RowNorm norm, const std::string& row, const std::string& gamma, const std::string& beta,
                         const std::string& in) {
  const auto& d = c99_simd_dialect();
  std::string s = in + "const float d_ = " + element(row, "j_") + " - c_;\n";
  s += in + "float v_ = " + codegen::render_row_norm_output(d, norm, "d_", "r_") + ";\n";
  if (!gamma.empty())
    s += in + "const float g_ = " + gamma + "[j_];\n" + in + "v_ = " + codegen::render_op(d, Op::mul, "v_", "g_") +
         ";\n";
  if (!beta.empty())
    s +=
        in + "const float b_ = " + beta + "[j_];\n" + in + "v_ = " + codegen::render_op(d, Op::add, "v_", "b_") + ";\n";
  return s;
}

} // namespace

// The output size past which stream = 2 streams: the process's share of the last-level cache
// (Tuning::llc, host_llc_share_bytes: the few-row GEMMs' measure too), at most 12 MiB. Same-run
// A/B of plain (stream=0) against streaming (stream=1) stores, norm chains and pointwise DAGs
// of 512-3072 rows of 4096 floats (8-48 MiB of output): on the two-core VM (12 MiB counted)
// streaming lost at 8 MiB (softmax 0.54-0.57 against 0.63-0.65 ms, the pointwise DAG 0.75-0.76
// against 0.79-0.93) and from 16 MiB was even or ahead (rms norm at 16 MiB 1.16-1.50 against
// 0.93-1.18 ms) but for softmax at 16 MiB in one set of two; on the lent Sapphire Rapids host's
// 16 threads (32 MiB counted) it was ahead from 16 MiB, 2x at 32 MiB (rms norm 0.86-0.92
// against 0.43-0.48 ms), where the former rule (the OS's L3 size, capped at 32 MiB) kept plain
// stores up to 32 MiB; on the lent Emerald Rapids host's 16 threads it was ahead at 8 MiB too
// (norms 0.67-0.92x the time). So the bound sits between 8 and 16 MiB whatever the share.
// Run bj: bench/results/cpu-2026-12-06-bj-*.json.
std::int64_t stream_limit_bytes(const Tuning& tuning) {
  constexpr std::int64_t kMost = std::int64_t{12} << 20;
  const std::int64_t share = std::int64_t{tuning.llc} * 1024;
  return share > 0 && share < kMost ? share : kMost;
}

// A plain store reads its line before writing it (read-for-ownership), so an output that
// goes to memory anyway costs twice its bytes; a non-temporal store writes the line without
// the read. Measured on the development VM (AMD EPYC, 4096 x 4096): a copy 1.4x faster, a
// layer norm 1.35x. For an output that stays in the last-level cache the plain store is right:
// the next kernel reads it from there. Outputs past limit_bytes stream (stream_limit_bytes says
// how much that is).
std::string stream_helpers(int mode, std::int64_t limit_bytes, bool avx2) {
  // 64 bytes streamed: one zmm, or two ymm for the x86_avx2 lane.
  const std::string stream64 = avx2 ? "_mm256_stream_ps(dst + j, _mm256_loadu_ps(src + j));\n"
                                      "    _mm256_stream_ps(dst + j + 8, _mm256_loadu_ps(src + j + 8));\n"
                                    : "_mm512_stream_ps(dst + j, _mm512_loadu_ps(src + j));\n";
  return "#define FUSOR_STREAM_MODE " + std::to_string(mode) +
         " /* 0 plain stores, 1 streaming, 2 past the limit */\n" + "#define FUSOR_STREAM_LIMIT " +
         std::to_string(limit_bytes) + ".0 /* bytes of output */\n" + R"(
#define FUSOR_OUT_CHUNK 1024 /* floats of output staged in L1 before they are streamed */
static int fusor_stream_output(double bytes) {
  return FUSOR_STREAM_MODE == 2 ? bytes > FUSOR_STREAM_LIMIT : FUSOR_STREAM_MODE;
}
/* dst[0, n) = src[0, n): streaming stores where dst is 64-byte aligned, plain ones at the
   edges. With each 64 bytes stored, the next line of the read streams at addresses pa and pb
   (0: none) is prefetched into L2, so memory serves the reads while the writes drain. */
static inline void fusor_stream_floats(float* restrict dst, const float* restrict src, int64_t n, uintptr_t pa,
                                       uintptr_t pb) {
  int64_t j = 0;
  for (; j < n && ((uintptr_t)(dst + j) & 63); ++j) dst[j] = src[j];
  for (; j + 16 <= n; j += 16) {
    if (pa) _mm_prefetch((const char*)(pa + 4 * (uintptr_t)j), _MM_HINT_T1);
    if (pb) _mm_prefetch((const char*)(pb + 4 * (uintptr_t)j), _MM_HINT_T1);
    )" + stream64 +
         R"(  }
  for (; j < n; ++j) dst[j] = src[j];
}
/* The prefetches of fusor_stream_floats alone, for plain stores. */
static inline void fusor_prefetch_l2(int64_t n, uintptr_t pa, uintptr_t pb) {
  for (int64_t j = 0; j < n; j += 16) {
    if (pa) _mm_prefetch((const char*)(pa + 4 * (uintptr_t)j), _MM_HINT_T1);
    if (pb) _mm_prefetch((const char*)(pb + 4 * (uintptr_t)j), _MM_HINT_T1);
  }
}

)";
}

std::string row_norm_simd(RowNorm norm, const std::string& src, const std::string& dst, const std::string& n,
                          const std::string& eps, const std::string& gamma, const std::string& beta,
                          const std::string& in) {
  const RowNormInfo& info = row_norm_info(norm);
  std::string s = in + "{\n" + in + "  float c_ = 0.0f, s_ = 0.0f;\n";
  if (info.centre == RowCentre::mean) {
    s += split_sum("c_", n, in + "  ", [&](const std::string& idx, int k) {
      return "a" + std::to_string(k) + "_ += " + src + "[" + idx + "];";
    });
    s += in + "  c_ /= (float)" + n + ";\n";
  } else if (info.centre == RowCentre::max) {
    s += max_centre(src, n, in + "  ");
  }
  s += split_sum("s_", n, in + "  ",
                 [&](const std::string& idx, int k) { return accumulate_term(norm, src + "[@]", idx, k); });
  s += in +
       "  const float r_ = " + codegen::render_row_norm_factor(c99_simd_dialect(), norm, "s_", "(float)" + n, eps) +
       ";\n";
  s += in + "  #pragma omp simd\n";
  s += in + "  for (int64_t j_ = 0; j_ < " + n + "; ++j_) {\n";
  s += output_value(norm, src + "[@]", gamma, beta, in + "    ");
  s += in + "    " + dst + "[j_] = v_;\n" + in + "  }\n" + in + "}\n";
  return s;
}

namespace {

// The spellings of one vector width for the explicit vector loops below (norm rows, pointwise
// DAGs): 16 lanes (AVX-512) or 8 (AVX2). A vector's mask is `m<k>` for the `left<k>` lanes of
// it inside the data (0..lanes).
struct LaneVector {
  int lanes;
  std::string T, zero, set1, L;
  explicit LaneVector(bool avx2)
      : lanes(avx2 ? 8 : 16), T(avx2 ? "__m256" : "__m512"), zero(avx2 ? "_mm256_setzero_ps()" : "_mm512_setzero_ps()"),
        set1(avx2 ? "_mm256_set1_ps" : "_mm512_set1_ps"), L(avx2 ? "8" : "16") {}
  std::string mask(const std::string& k = "_") const {
    return lanes == 16 ? "const __mmask16 m" + k + " = (__mmask16)((1u << left" + k + ") - 1u);"
                       : "const __m256i m" + k + " = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left" + k +
                             "), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));";
  }
  std::string load(const std::string& p) const {
    return lanes == 16 ? "_mm512_loadu_ps(" + p + ")" : "_mm256_loadu_ps(" + p + ")";
  }
  std::string masked_load(const std::string& p, const std::string& k = "_") const {
    return lanes == 16 ? "_mm512_maskz_loadu_ps(m" + k + ", " + p + ")" : "_mm256_maskload_ps(" + p + ", m" + k + ")";
  }
  // (AVX2's masked store, vmaskmovps, is slow on AMD: only a tail's vector takes it.)
  std::string masked_store(const std::string& p, const std::string& v, const std::string& k = "_") const {
    return lanes == 16 ? "_mm512_mask_storeu_ps(" + p + ", m" + k + ", " + v + ");"
                       : "if (left" + k + " == 8) _mm256_storeu_ps(" + p + ", " + v + "); else _mm256_maskstore_ps(" +
                             p + ", m" + k + ", " + v + ");";
  }
  // The masked load with -inf in the lanes outside m<k> (a maximum's neutral value).
  std::string masked_load_ninf(const std::string& p, const std::string& k = "_") const {
    return lanes == 16 ? "_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m" + k + ", " + p + ")"
                       : "_mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(" + p + ", m" + k +
                             "), _mm256_castsi256_ps(m" + k + "))";
  }
  // x > m ? x : m per lane (vmaxps returns its second operand when either is NaN), so a NaN
  // never becomes the maximum, as in max_centre.
  std::string max(const std::string& x, const std::string& m) const {
    return (lanes == 16 ? "_mm512_max_ps(" : "_mm256_max_ps(") + x + ", " + m + ")";
  }
  // The largest lane of the vector `m` (never NaN) into the float `acc`.
  std::string reduce_max(const std::string& acc, const std::string& m, const std::string& in) const {
    return in + "{\n" + in + "  float l_[" + L + "];\n" + in + "  memcpy(l_, &" + m + ", sizeof l_);\n" + in + "  " +
           acc + " = -INFINITY;\n" + in + "  for (int k_ = 0; k_ < " + L + "; ++k_) " + acc + " = l_[k_] > " + acc +
           " ? l_[k_] : " + acc + ";\n" + in + "}\n";
  }
  // Statements at indent `in`: the float `acc` = the sum of the vector `m`'s lanes, in order.
  std::string reduce_sum(const std::string& acc, const std::string& m, const std::string& in) const {
    return in + "float l_[" + L + "];\n" + in + "memcpy(l_, &" + m + ", sizeof l_);\n" + in + acc + " = 0.0f;\n" + in +
           "for (int k_ = 0; k_ < " + L + "; ++k_) " + acc + " += l_[k_];\n";
  }
  // v with the lanes outside m_ zeroed.
  std::string masked(const std::string& v) const {
    return lanes == 16 ? "_mm512_maskz_mov_ps(m_, " + v + ")" : "_mm256_and_ps(" + v + ", _mm256_castsi256_ps(m_))";
  }
  const codegen::CDialect& dialect() const {
    return lanes == 16 ? codegen::c99_avx512_dialect() : codegen::c99_avx2_dialect();
  }
};

// Whether a norm's row passes evaluate e^x (softmax): those run as explicit vector loops on
// the lane's exponential helper. Through the scalar helper in `omp simd` loops the compiler
// if-converts its branches (about 3x the instructions), and the row is compute-bound: softmax
// 4096 x 4096 took 0.29-0.31 of a copy's bandwidth (Zen 5), rmsnorm and layer_norm 0.96-1.01.
bool vector_rows(RowNorm norm) { return norm == RowNorm::softmax; }

// `acc` = the maximum over src[0, n) (max_centre's rule), four vectors a step, the tail masked.
std::string vector_max(const LaneVector& v, const std::string& acc, const std::string& src, const std::string& n,
                       const std::string& in) {
  const std::string W = std::to_string(4 * v.lanes);
  std::string s = in + "{\n" + in + "  " + v.T + " x0_ = " + v.set1 + "(-INFINITY), x1_ = x0_, x2_ = x0_, x3_ = x0_;\n";
  s += in + "  int64_t j_ = 0;\n" + in + "  for (; j_ + " + W + " <= " + n + "; j_ += " + W + ") {\n";
  for (int k = 0; k < 4; ++k) {
    const std::string K = std::to_string(k);
    s += in + "    x" + K + "_ = " + v.max(v.load(src + " + j_ + " + std::to_string(k * v.lanes)), "x" + K + "_") +
         ";\n";
  }
  s += in + "  }\n" + in + "  for (; j_ < " + n + "; j_ += " + v.L + ") {\n";
  s += in + "    const int64_t left_ = " + n + " - j_ < " + v.L + " ? " + n + " - j_ : " + v.L + ";\n";
  s += in + "    " + v.mask() + "\n";
  s += in + "    x0_ = " + v.max(v.masked_load_ninf(src + " + j_"), "x0_") + ";\n" + in + "  }\n";
  s += in + "  const " + v.T + " x_ = " + v.max(v.max("x0_", "x1_"), v.max("x2_", "x3_")) + ";\n";
  return s + v.reduce_max(acc, "x_", in + "  ") + in + "}\n";
}

// `acc` = the sum over src[0, n) of the table's accumulate of (src[j] - c_), four vectors a
// step (four independent chains), the tail masked. With `terms`, each term is also stored to
// terms[j] for the output pass to finish from. With `ahead`, the pass also prefetches
// ahead[0, n) into L2 a line per 16 floats: this pass reads only the cached row, and softmax's
// e^x keeps it long enough (about a third of a row's time) that memory otherwise idles through
// it; the next row, read by the output pass, then arrives while it runs (Zen 5, 4096 x 4096:
// 0.88x the time in a stand-alone driver).
//
// Softmax's e^(x - c) runs as 2^((x - c)·log2 e) where the table spells it expf
// (softmax_exp_is_expf), as attention's does: the lane's 2^x needs no Cody-Waite reduction nor
// rounding (10 instructions a vector with the product, against 15). The product's rounding adds
// |x - c|·2^-24 to a term's relative error, as x - c's own does: much only where the term is
// tiny. (x·log2 e - c·log2 e in one fmsub would not do: the rounding of c·log2 e shifts every
// exponent of the row alike, by up to 2^-25 |c·log2 e|, which overflows 2^x from |c| near 2^30.)
// 4096 x 4096, stand-alone driver, new / old time: Zen 4 0.92-0.93x (0.91x from L2); the lent
// host's Xeon 0.87x on two threads, 0.94x on 16. (The AVX2 lane on Zen 4: 0.99x.)
std::string vector_sum(RowNorm norm, const LaneVector& v, const std::string& acc, const std::string& src,
                       const std::string& n, const std::string& terms, const std::string& ahead,
                       const std::string& in) {
  const std::string W = std::to_string(4 * v.lanes);
  const bool base2 = norm == RowNorm::softmax && softmax_exp_is_expf();
  auto term = [&](const std::string& d) {
    return base2 ? (v.lanes == 16 ? "fusor_exp2f16(" : "fusor_exp2f8(") + d + ")"
                 : codegen::render_row_norm_accumulate(v.dialect(), norm, d);
  };
  // The exponent of one loaded vector.
  auto exponent = [&](const std::string& x) { return base2 ? "(" + x + " - cv_) * l2e_" : x + " - cv_"; };
  std::string s = in + "{\n";
  s += in + "  const " + v.T + " cv_ = " + v.set1 + "(c_);\n";
  if (base2) s += in + "  const " + v.T + " l2e_ = " + v.set1 + "(1.44269504088896341f);\n";
  s += in + "  " + v.T + " a0_ = " + v.zero + ", a1_ = " + v.zero + ", a2_ = " + v.zero + ", a3_ = " + v.zero + ";\n";
  s += in + "  int64_t j_ = 0;\n";
  s += in + "  for (; j_ + " + W + " <= " + n + "; j_ += " + W + ") {\n";
  for (int k = 0; !ahead.empty() && k < 4; ++k)
    if (k * v.lanes % 16 == 0)
      s += in + "    _mm_prefetch((const char*)(" + ahead + " + j_ + " + std::to_string(k * v.lanes) +
           "), _MM_HINT_T1);\n";
  for (int k = 0; k < 4; ++k) {
    const std::string K = std::to_string(k), at = src + " + j_ + " + std::to_string(k * v.lanes);
    s += in + "    { const " + v.T + " d" + K + "_ = " + exponent(v.load(at)) + "; const " + v.T + " t" + K +
         "_ = " + term("d" + K + "_") + "; a" + K + "_ += t" + K + "_;";
    if (!terms.empty())
      s += std::string(" ") + (v.lanes == 16 ? "_mm512_storeu_ps(" : "_mm256_storeu_ps(") + terms + " + j_ + " +
           std::to_string(k * v.lanes) + ", t" + K + "_);";
    s += " }\n";
  }
  s += in + "  }\n";
  s += in + "  for (; j_ < " + n + "; j_ += " + v.L + ") {\n";
  s += in + "    const int64_t left_ = " + n + " - j_ < " + v.L + " ? " + n + " - j_ : " + v.L + ";\n";
  s += in + "    " + v.mask() + "\n";
  s += in + "    const " + v.T + " d0_ = " + exponent(v.masked_load(src + " + j_")) + ";\n";
  s += in + "    const " + v.T + " t0_ = " + v.masked(term("d0_")) + ";\n"; // (e^(0 - c) past n: dropped)
  s += in + "    a0_ += t0_;\n";
  if (!terms.empty()) s += in + "    " + v.masked_store(terms + " + j_", "t0_") + "\n";
  s += in + "  }\n";
  s += in + "  const " + v.T + " a_ = (a0_ + a1_) + (a2_ + a3_);\n";
  s += v.reduce_sum(acc, "a_", in + "  ");
  return s + in + "}\n";
}

// v_ times gamma[j_], plus beta[j_], where the chain has them (statements); `whole`: a whole
// vector, loaded without the mask.
std::string vector_weight(const LaneVector& v, bool gamma, bool beta, const std::string& in, bool whole = false) {
  const auto load = [&](const std::string& p) { return whole ? v.load(p) : v.masked_load(p); };
  std::string s;
  if (gamma)
    s += in + "{ const " + v.T + " g_ = " + load("gamma + j_") +
         "; v_ = " + codegen::render_op(v.dialect(), Op::mul, "v_", "g_") + "; }\n";
  if (beta)
    s += in + "{ const " + v.T + " b_ = " + load("beta + j_") +
         "; v_ = " + codegen::render_op(v.dialect(), Op::add, "v_", "b_") + "; }\n";
  return s;
}

// Storing v_ at o + j_: streaming where the call streams (nt_out) and the vector is whole and
// aligned, else a plain store; both give the same bits. `whole`: the vector is known whole
// (no left_ to test, the fallback unmasked).
std::string output_store(const LaneVector& v, const std::string& in, bool whole) {
  const std::string line = v.lanes == 16 ? "63" : "31";
  std::string s =
      in + "if (nt_out && " + (whole ? "" : "left_ == " + v.L + " && ") + "!((uintptr_t)(o + j_) & " + line + "))\n";
  s += in + "  " + (v.lanes == 16 ? "_mm512_stream_ps" : "_mm256_stream_ps") + "(o + j_, v_);\n";
  s += in + "else\n" + in + "  " +
       (whole ? std::string(v.lanes == 16 ? "_mm512_storeu_ps" : "_mm256_storeu_ps") + "(o + j_, v_);"
              : v.masked_store("o + j_", "v_")) +
       "\n";
  return s;
}

// One row's output, o[0, row_len) = the table's output of (src[j] - c_) times the optional
// gamma, plus beta, a vector at a time, stored straight out (streaming where whole and
// aligned, so both stores give the same bits), with `asks` (prefetches, at j_) once per 16
// floats. With `terms`, the output is finished from the sum pass's terms[j] (output_of_term)
// instead. With `next`, the vector mx_ also takes the maximum of next[0, row_len) (the next
// row's centre, read while this row is written).
std::string vector_output(RowNorm norm, const LaneVector& v, const std::string& src, bool gamma, bool beta,
                          const std::string& terms, const std::string& next, const std::string& asks,
                          const std::string& in) {
  std::string s = in + "{\n" + in + "  const " + v.T + " cv_ = " + v.set1 + "(c_), rv_ = " + v.set1 + "(r_);\n";
  s += in + "  (void)cv_;\n";
  s += in + "  for (int64_t j_ = 0; j_ < row_len; j_ += " + v.L + ") {\n";
  s += v.lanes == 16 ? asks : in + "    if ((j_ & 15) == 0) {\n" + asks + in + "    }\n";
  s += in + "    const int64_t left_ = row_len - j_ < " + v.L + " ? row_len - j_ : " + v.L + ";\n";
  s += in + "    " + v.mask() + "\n";
  if (!next.empty()) s += in + "    mx_ = " + v.max(v.masked_load_ninf(next + " + j_"), "mx_") + ";\n";
  if (terms.empty()) {
    s += in + "    const " + v.T + " d_ = " + v.masked_load(src + " + j_") + " - cv_;\n";
    s += in + "    " + v.T + " v_ = " + codegen::render_row_norm_output(v.dialect(), norm, "d_", "rv_") + ";\n";
  } else {
    s += in + "    const " + v.T + " t_ = " + v.masked_load(terms + " + j_") + ";\n";
    s += in + "    " + v.T + " v_ = " + codegen::render_row_norm_output_of_term(v.dialect(), norm, "t_", "rv_") + ";\n";
  }
  s += vector_weight(v, gamma, beta, in + "    ");
  s += output_store(v, in + "    ", false);
  return s + in + "  }\n" + in + "}\n";
}

// The next row's x and residual (reread_asks' bases), declared in a re-read row's pass.
std::string next_rows(const std::string& in) {
  return in + "  const float* restrict xn_ = x + rn * row_len;\n" + in +
         "  const float* restrict rn_ = res + rn * row_len;\n";
}

// The asks for `lines` lines of each of the next row's x and residual from `at` on.
std::string reread_asks(const std::string& at, int lines, const std::string& in) {
  std::string s;
  for (int k = 0; k < lines; ++k)
    for (const char* p : {"xn_", "rn_"})
      s += in + "_mm_prefetch((const char*)(" + p + " + " + at + (k ? " + " + std::to_string(16 * k) : "") +
           "), _MM_HINT_T1);\n";
  return s;
}

// A residual row's sum pass when the row is re-read rather than staged (norm_chain_body says
// why): e_ = the sum over j of xs[j] + rs[j] (a mean centre) or of the table's accumulate of
// it (a zero centre). Four vectors a step into four accumulators, asking for the first half of
// the next row; then whole vectors, and the ragged last one masked. The output pass asks for
// the second half (a line of each input per 32 floats in both), so memory is read at an even
// pace. Until run az the output pass asked for the whole row and memory idled through the sum
// pass. 4096 x 4096, Zen 4, stand-alone driver (kernels in rotated order each round), new /
// old time with the threads on two core complexes (one): rmsnorm with residual 0.86-0.90x
// (0.93-0.95x), the AVX2 lane's 0.80x (0.98x), layer norm with residual 0.94-0.96x. (This
// pass a vector a step, its asks behind a branch, gained nothing: 0.95-1.02x.)
std::string reread_sum(RowNorm norm, const LaneVector& v, const std::string& in) {
  const RowNormInfo& info = row_norm_info(norm);
  // Element vector w<k>_ at `at` added into accumulator a<k>_.
  const auto add = [&](int k, const std::string& at, bool tail) {
    const auto load = [&](const std::string& p) { return tail ? v.masked_load(p) : v.load(p); };
    const std::string K = std::to_string(k), w = "w" + K + "_";
    std::string t = in + "    const " + v.T + " " + w + " = " +
                    codegen::render_op(v.dialect(), Op::add, load("xs + " + at), load("rs + " + at)) + ";\n";
    if (info.centre == RowCentre::mean) return t + in + "    a" + K + "_ += " + w + ";\n";
    // Past the row, the masked loads' zeros and the accumulate's value of them are dropped.
    const std::string term = codegen::render_row_norm_accumulate(v.dialect(), norm, w);
    return t + in + "    a" + K + "_ += " + (tail ? v.masked(term) : term) + ";\n";
  };
  const int step = 4 * v.lanes;
  std::string s = in + "{\n" + next_rows(in);
  s += in + "  " + v.T + " a0_ = " + v.zero + ", a1_ = a0_, a2_ = a0_, a3_ = a0_;\n";
  s += in + "  int64_t j_ = 0;\n";
  s += in + "  for (; j_ + " + std::to_string(step) + " <= row_len; j_ += " + std::to_string(step) + ") {\n";
  s += reread_asks("j_ / 2", step / 32, in + "    ");
  for (int k = 0; k < 4; ++k) s += add(k, k ? "j_ + " + std::to_string(k * v.lanes) : "j_", false);
  s += in + "  }\n";
  s += in + "  for (; j_ + " + v.L + " <= row_len; j_ += " + v.L + ") {\n" + add(0, "j_", false) + in + "  }\n";
  s += in + "  if (j_ < row_len) {\n" + in + "    const int64_t left_ = row_len - j_;\n" + in + "    " + v.mask() +
       "\n" + add(0, "j_", true) + in + "  }\n";
  s += in + "  a0_ = (a0_ + a1_) + (a2_ + a3_);\n";
  s += v.reduce_sum("e_", "a0_", in + "  ");
  return s + in + "}\n";
}

// A residual row's output when the row is re-read rather than staged (norm_chain_body says
// why): o[j] = the table's output of (xs[j] + rs[j] - c_), times gamma, plus beta, a vector at
// a time, stored straight to memory (streaming where whole and aligned, so both stores give
// the same bits), asking for the second half of the next row (reread_asks).
std::string reread_output(RowNorm norm, const LaneVector& v, bool gamma, bool beta, const std::string& in) {
  std::string s = in + "{\n" + in + "  const " + v.T + " cv_ = " + v.set1 + "(c_), rv_ = " + v.set1 + "(r_);\n";
  s += next_rows(in);
  s += in + "  for (int64_t j_ = 0; j_ < row_len; j_ += " + v.L + ") {\n";
  s += in + "    if ((j_ & 31) == 0) {\n" + reread_asks("row_len / 2 + j_ / 2", 1, in + "      ") + in + "    }\n";
  s += in + "    const int64_t left_ = row_len - j_ < " + v.L + " ? row_len - j_ : " + v.L + ";\n";
  s += in + "    " + v.mask() + "\n";
  s += in + "    const " + v.T +
       " w_ = " + codegen::render_op(v.dialect(), Op::add, v.masked_load("xs + j_"), v.masked_load("rs + j_")) + ";\n";
  s += in + "    const " + v.T + " d_ = w_ - cv_;\n";
  s += in + "    " + v.T + " v_ = " + codegen::render_row_norm_output(v.dialect(), norm, "d_", "rv_") + ";\n";
  s += vector_weight(v, gamma, beta, in + "    ");
  s += output_store(v, in + "    ", false);
  return s + in + "  }\n" + in + "}\n";
}

// A row read in place (pipelined rows without e^x: layer norm, rmsnorm without residual):
// o[j] = the table's output of (t[j] - c_), times gamma, plus beta, a vector at a time, stored
// straight to memory (streaming where whole and aligned, so both stores give the same bits),
// while the next row xn is read and its statistic accumulated into e_ (the mean's sum; a zero
// centre's accumulate), and memory is asked for the line 8 chunks ahead of it. Until run ax
// the output went through the L1 chunks of `omp simd` loops, streamed out from there: layer
// norm 4096 x 4096 read 0.84 of a streaming copy's bandwidth that way, 0.96 this way (Zen 4,
// stand-alone driver, 0.88x the time).
std::string pipelined_output(const NormChainRegion& r, const LaneVector& v, const std::string& in) {
  const RowNormInfo& info = row_norm_info(r.norm());
  // One vector at j_: whole ones unmasked (AVX2's masked load, vmaskmovps, is slow on AMD), the
  // row's ragged last one masked.
  const auto step = [&](bool tail) {
    const auto load = [&](const std::string& p) { return tail ? v.masked_load(p) : v.load(p); };
    std::string t;
    if (tail) t += in + "    " + v.mask() + "\n";
    t += in + "    const " + v.T + " d_ = " + load("t + j_") + " - cv_;\n";
    t += in + "    " + v.T + " v_ = " + codegen::render_row_norm_output(v.dialect(), r.norm(), "d_", "rv_") + ";\n";
    t += vector_weight(v, r.weight(), r.bias(), in + "    ", !tail);
    t += tail ? in + "    " + v.masked_store("o + j_", "v_") + "\n" : output_store(v, in + "    ", true);
    // The next row's term; past the row, the masked load's zeros and the accumulate's value of
    // them are dropped.
    t += in + "    const " + v.T + " w_ = " + load("xn + j_") + ";\n";
    if (info.centre == RowCentre::mean) {
      t += in + "    ev_ += w_;\n";
    } else {
      const std::string term = codegen::render_row_norm_accumulate(v.dialect(), r.norm(), "dz_");
      t += in + "    { const " + v.T + " dz_ = w_; ev_ += " + (tail ? v.masked(term) : term) + "; }\n";
    }
    return t;
  };
  std::string s = in + "{\n" + in + "  const " + v.T + " cv_ = " + v.set1 + "(c_), rv_ = " + v.set1 + "(r_);\n";
  s += in + "  " + v.T + " ev_ = " + v.zero + ";\n";
  s += in + "  int64_t j_ = 0;\n";
  s += in + "  for (; j_ + " + v.L + " <= row_len; j_ += " + v.L + ") {\n";
  const std::string ask = in + "    _mm_prefetch((const char*)(xn + j_ + 8 * FUSOR_OUT_CHUNK), _MM_HINT_T1);\n";
  s += v.lanes == 16 ? ask : in + "    if ((j_ & 15) == 0) {\n" + ask + in + "    }\n";
  s += step(false) + in + "  }\n";
  s += in + "  if (j_ < row_len) {\n" + in + "    const int64_t left_ = row_len - j_;\n" + step(true) + in + "  }\n";
  s += v.reduce_sum("e_", "ev_", in + "  ");
  return s + in + "}\n";
}

} // namespace

// Rows read in place are software-pipelined per thread: the pass that writes row i's output
// also reads row i+1 and accumulates the statistic that needs no centre yet (the mean's sum;
// rmsnorm's whole sum of squares, its centre being zero). Memory then sees one read and one
// write stream at all times, as a copy does, and only L1-resident passes remain between.
// Rows with a residual are not pipelined: that measured 0.6x copy bandwidth, as two staging
// rows, gamma and three streams overflow L1. Their passes re-read x and the residual, which
// the previous row's output pass asked of L2, and add them again (reread_output); softmax's
// rows, whose passes are vector loops over one row, are staged (x + residual) into a one-row
// buffer instead. Until run av every residual row was staged and its output went through the
// L1 chunks that the other rows stream from. 4096 x 4096, stand-alone driver, new / old time:
// rmsnorm with residual 0.84-0.86x on Zen 4 (0.93-0.97x re-read with the chunks kept; the
// AVX2 lane 0.86-0.92x), layer norm with residual 0.88-0.93x; the lent host's Xeon on two
// threads 0.80-0.85x and 0.81-0.86x, on 16 0.88-0.89x and 0.86x.
std::string norm_chain_body(const NormChainRegion& r, bool avx2) {
  const auto& d = c99_simd_dialect();
  const LaneVector vec(avx2);
  const bool vrows = vector_rows(r.norm());
  const RowNormInfo& info = row_norm_info(r.norm());
  const bool staged = r.add_residual(); // x + residual: re-read or staged; otherwise rows are read in place
  const bool pipelined = !staged;
  const bool reread = staged && !vrows;    // each pass adds x and the residual again
  const bool staging = staged && !reread;  // x + residual is staged in a row buffer (tb)
  const bool direct = pipelined && !vrows; // the output stored straight out (pipelined_output)
  // Element @ of the row the passes read.
  const std::string row = reread ? codegen::render_op(d, Op::add, "xs[@]", "rs[@]") : std::string("t[@]");
  // Softmax keeps its terms e^(x - max) from the sum's pass in a row buffer and finishes from
  // them (output_of_term), so e^x is evaluated once per element, not twice; rows read in place
  // take the next row's maximum in the pass that writes this one, as layer_norm takes its sum.
  const bool keep_terms = vrows && info.output_of_term != nullptr;
  const bool max_ahead = pipelined && vrows && info.centre == RowCentre::max;
  const std::string eps = codegen::float_literal(r.eps());
  std::string s = norm_chain_operand_decls(r);
  s += "  if (rows == 0 || row_len == 0) return 0;\n";
  s += "  int failed = 0;\n";
  s += "  const int nt_out = fusor_stream_output(4.0 * (double)rows * (double)row_len);\n";
  s += "  " + omp_parallel("rows * row_len * 16") + "\n  {\n";
  s += "    int nt_ = 1, id_ = 0;\n#ifdef _OPENMP\n    nt_ = omp_get_num_threads();\n    id_ = omp_get_thread_num();\n"
       "#endif\n";
  s += "    const int64_t r_lo = rows / nt_ * id_ + (id_ < rows % nt_ ? id_ : rows % nt_);\n";
  s += "    const int64_t r_hi = r_lo + rows / nt_ + (id_ < rows % nt_ ? 1 : 0);\n";
  std::string buffers_ok;
  // (Per-thread scratch kept between calls: a row of a long-row call is not allocated again.)
  int slot = 0;
  for (const auto& [want, name] : {std::pair{staging, "tb"}, std::pair{keep_terms, "eb_"}})
    if (want) {
      s += std::string("    float* restrict ") + name + " = (float*)fusor_scratch(" + std::to_string(slot++) +
           ", sizeof(float) * (size_t)row_len);\n";
      s += std::string("    if (!") + name + ") {\n      #pragma omp atomic write\n      failed = 1;\n    }\n";
      buffers_ok += std::string(name) + " && ";
    }
  s += "    if (" + buffers_ok + "r_lo < r_hi) {\n";
  // What the staging pass accumulates: the sum for a mean centre, the table's accumulate
  // of (v - 0) for a zero centre, nothing for a max centre (its sum needs the whole row's
  // maximum first; the vector rows take that maximum ahead instead: max_ahead).
  const bool early_sum = info.centre != RowCentre::max;
  auto stage_element = [&](const std::string& xrow, const std::string& rrow, const std::string& trow,
                           const std::string& in) {
    std::string e = in + "float w_ = " + xrow + "[j_];\n";
    if (staged)
      e += in + "const float rw_ = " + rrow + "[j_];\n" + in + "w_ = " + codegen::render_op(d, Op::add, "w_", "rw_") +
           ";\n";
    if (staging) e += in + trow + "[j_] = w_;\n";
    if (info.centre == RowCentre::mean) e += in + "e_ += w_;\n";
    if (info.centre == RowCentre::zero)
      e += in + "{ const float dz_ = w_ - 0.0f; e_ += " + codegen::render_row_norm_accumulate(d, r.norm(), "dz_") +
           "; }\n";
    return e;
  };
  const std::string sum_pragma = early_sum ? "#pragma omp simd reduction(+:e_)\n" : "#pragma omp simd\n";
  // One pass over a row: read (and stage) it, accumulating into e_.
  auto stage_loop = [&](const std::string& rrow, const std::string& trow, const std::string& in) {
    return in + sum_pragma + in + "for (int64_t j_ = 0; j_ < row_len; ++j_) {\n" +
           stage_element("xs", rrow, trow, in + "  ") + in + "}\n";
  };
  s += "      float e_ = 0.0f;\n";
  if (max_ahead)
    s += vector_max(vec, "e_", "(x + r_lo * row_len)", "row_len", "      ");
  else if (pipelined) {
    s += "      {\n        const float* restrict xs = x + r_lo * row_len;\n";
    s += stage_loop("", "", "        ") + "      }\n";
  }
  s += "      for (int64_t row = r_lo; row < r_hi; ++row) {\n";
  // The last row reads itself again: harmless, in L1.
  s += "        const int64_t rn = row + 1 < r_hi ? row + 1 : row;\n";
  // A row read in place with its sum ahead (layer norm, rmsnorm without a residual): the next
  // row, all of it, is asked of memory now. This row's sum pass reads only cache, and with the
  // output loop's prefetches alone memory idled through it. Zen 4, 4096 x 4096, harness, new /
  // old time: layer norm 0.87-0.90x while memory ran fast (a copy at 2 ms), 0.93-1.0x while
  // slow (3.4 ms), the AVX2 lane's 0.86-0.88x; rmsnorm without residual 0.94-0.98x. Softmax's
  // rows (maximum ahead, terms kept) took 1.10-1.17x with it, rmsnorm's staged residual rows
  // 0.90-1.08x: not there.
  if (pipelined && !max_ahead) s += "        fusor_prefetch_l2(row_len, (uintptr_t)(x + rn * row_len), 0);\n";
  if (pipelined) {
    s += "        const float* restrict t = x + row * row_len;\n";
    s += "        const float* restrict xn = x + rn * row_len;\n";
  } else {
    s += "        const float* restrict xs = x + row * row_len;\n";
    s += "        const float* restrict rs = res + row * row_len;\n";
    if (staging) s += "        float* restrict ts = tb;\n";
    s += reread ? reread_sum(r.norm(), vec, "        ")
                : "        e_ = 0.0f;\n" + stage_loop("rs", staging ? "ts" : "", "        ");
    if (staging) s += "        const float* restrict t = tb;\n";
  }
  s += "        float* restrict o = out + row * row_len;\n";
  s += "        float c_ = 0.0f, s_ = 0.0f;\n";
  if (info.centre == RowCentre::mean) {
    s += "        c_ = e_ / (float)row_len;\n";
  } else if (info.centre == RowCentre::max) {
    s += max_ahead ? "        c_ = e_;\n"
         : vrows   ? vector_max(vec, "c_", "t", "row_len", "        ")
                   : max_centre("t", "row_len", "        ");
  }
  if (info.centre == RowCentre::zero)
    s += "        s_ = e_;\n";
  else if (vrows)
    s += vector_sum(r.norm(), vec, "s_", "t", "row_len", keep_terms ? "eb_" : "", max_ahead ? "xn" : "", "        ");
  else
    s += split_sum("s_", "row_len", "        ",
                   [&](const std::string& idx, int k) { return accumulate_term(r.norm(), row, idx, k); });
  s += "        const float r_ = " + codegen::render_row_norm_factor(d, r.norm(), "s_", "(float)row_len", eps) + ";\n";
  // The output, stored straight out: re-read rows (reread_output), rows read in place
  // (pipelined_output), softmax's rows (vector_output).
  if (pipelined) s += "        e_ = 0.0f;\n";
  if (max_ahead) s += "        " + vec.T + " mx_ = " + vec.set1 + "(-INFINITY);\n";
  if (reread) {
    s += reread_output(r.norm(), vec, r.weight(), r.bias(), "        ");
  } else if (direct) {
    s += pipelined_output(r, vec, "        ");
  } else {
    // Softmax's rows. What memory reads next, with each 16 floats stored: 8 chunks ahead on the
    // next row (rows are contiguous, so past its end lies the row after), or the next row's x
    // and residual, which the next staging pass reads. A prefetch never faults, wherever the
    // address points. (Until run ax these rows were written to L1 chunks and streamed out from
    // there: softmax 4096 x 4096 read 0.60 of a streaming copy's bandwidth, now 0.69.)
    const std::string ask = "            _mm_prefetch((const char*)(";
    const std::string asks =
        pipelined ? ask + "xn + j_ + 8 * FUSOR_OUT_CHUNK), _MM_HINT_T1);\n"
                  : ask + "x + rn * row_len + j_), _MM_HINT_T1);\n" + ask + "res + rn * row_len + j_), _MM_HINT_T1);\n";
    s += vector_output(r.norm(), vec, "t", r.weight(), r.bias(), keep_terms ? "eb_" : "", max_ahead ? "xn" : "", asks,
                       "        ");
  }
  if (max_ahead) s += vec.reduce_max("e_", "mx_", "        ");
  s += "      }\n    }\n";
  s += "    if (nt_out) _mm_sfence(); /* streaming stores are weakly ordered: drain before the join */\n";
  s += "  }\n  return failed ? 2 : 0;\n";
  return s;
}

namespace {

std::string load_contiguous(int i, const std::string& index) { return "x" + std::to_string(i) + "[" + index + "]"; }

} // namespace

std::string pointwise_helpers() {
  return broadcast_helpers() +
         "/* Whether an input repeats one contiguous last-axis row (a bias-like [n] operand). */\n"
         "static int fusor_row_bcast(int64_t rank, const int64_t* shape, const int64_t* st) {\n"
         "  if (rank == 0 || st[rank - 1] != 1) return 0;\n"
         "  for (int64_t d = 0; d + 1 < rank; ++d)\n    if (shape[d] != 1 && st[d] != 0) return 0;\n"
         "  return 1;\n}\n\n";
}

namespace {

// The unit-stride loop over whole vectors of `lanes` floats (16: AVX-512, 8: AVX2) with the
// vector dialect's helpers, masked at the tail. Four vectors per step, their statements
// interleaved (render_dag_copies): one vector's chain through a sigmoid and a tanh (two
// exponentials, two divides) is longer than the out-of-order window sees ahead, and four
// overlap (Zen 5 VM, 16 lanes, in L2: 11.3 -> 7.7 ns per vector; 8 copies 6.7 ns in L2 but
// slower from memory). Each input is prefetched 4 KiB ahead: at this loop's pace the hardware
// prefetcher fell behind and the loads waited on memory (swish-gate DAG, 4096 x 4096, two
// threads: 13.1 -> 6.9 ms with the prefetch alone, 5.1 ms with both; copy 3.6-4.0 ms).
std::string pointwise_vector_loop(const PointwiseGraphRegion& r, const LaneVector& v) {
  const int copies = 4, lanes = v.lanes;
  auto at = [&](const std::string& base, int c) { return base + " + i + " + std::to_string(lanes * c); };
  std::string s = "  if (contiguous) {\n";
  s += "    const int nt_out = fusor_stream_output(4.0 * (double)total);\n";
  s += "    " + omp_parallel("total * 16") + "\n    {\n";
  s += "    #pragma omp for schedule(static)\n";
  s += "    for (int64_t i = 0; i < total; i += " + std::to_string(lanes * copies) + ") {\n";
  for (size_t in = 0; in < r.graph().input_names().size(); ++in)
    for (int c = 0; c < copies; c += 16 / lanes) // one per 64-byte line
      s += "      _mm_prefetch((const char*)(" + at("x" + std::to_string(in), c) + ") + 4096, _MM_HINT_T0);\n";
  // Lanes of each vector inside the output: all, some (the tail) or none (past it).
  for (int c = 0; c < copies; ++c) {
    const std::string k = std::to_string(c), left = "(total - i - " + std::to_string(lanes * c) + ")";
    s += "      const int64_t left" + k + " = " + left + " >= " + v.L + " ? " + v.L + " : " + left +
         " <= 0 ? 0 : " + left + ";\n";
    s += "      " + v.mask(k) + "\n";
  }
  s += codegen::render_dag_copies(
      v.dialect(), r.graph(),
      [&](int in, int c) { return v.masked_load(at("x" + std::to_string(in), c), std::to_string(c)); }, "v", "      ",
      copies);
  // Streaming stores need the vector's alignment (a whole line for 16 lanes).
  for (int c = 0; c < copies; ++c) {
    const std::string k = std::to_string(c), o = at("out", c);
    s += "      if (nt_out && left" + k + " == " + v.L + " && !((uintptr_t)(" + o + ") & " +
         (lanes == 16 ? "63" : "31") + "))\n";
    s += std::string("        ") + (lanes == 16 ? "_mm512_stream_ps(" : "_mm256_stream_ps(") + o + ", v" + k + ");\n";
    s += "      else\n        " + v.masked_store(o, "v" + k, k) + "\n";
  }
  s += "    }\n";
  s += "    if (nt_out) _mm_sfence(); /* streaming stores are weakly ordered: drain before the join */\n";
  s += "    }\n    return 0;\n  }\n";
  return s;
}

} // namespace

std::string pointwise_body(const PointwiseGraphRegion& r, bool avx2) {
  const auto& d = c99_simd_dialect();
  std::string s = pointwise_setup(r.graph().input_names().size(), "1", true);
  // Unit-stride inputs: one vector loop; broadcast inputs: the index arithmetic per element.
  // When every op renders over the lane's vector type the loop is written a vector at a time
  // with the vector helpers: the compiler-vectorised float loop if-converts both branches of
  // each scalar helper, about 2.5x the instructions for a sigmoid or tanh.
  const LaneVector vec(avx2);
  const auto& nodes = r.graph().nodes();
  if (std::all_of(nodes.begin(), nodes.end(), [&](const auto& n) { return codegen::renders_in(vec.dialect(), n.op); }))
    s += pointwise_vector_loop(r, vec);
  // Otherwise an output past the last-level cache is computed a chunk at a time into an L1
  // buffer, by the compiler-vectorised loop, and streamed out from there (as norm rows are).
  s += "  if (contiguous && fusor_stream_output(4.0 * (double)total)) {\n";
  s += "    " + omp_parallel("total * 16") + "\n    {\n";
  s += "    float ch[FUSOR_OUT_CHUNK] __attribute__((aligned(64)));\n";
  s += "    #pragma omp for schedule(static)\n";
  s += "    for (int64_t c0 = 0; c0 < total; c0 += FUSOR_OUT_CHUNK) {\n";
  s += "      const int64_t n = total - c0 < FUSOR_OUT_CHUNK ? total - c0 : FUSOR_OUT_CHUNK;\n";
  s += "      #pragma omp simd\n";
  s += "      for (int64_t i = 0; i < n; ++i) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_contiguous(in, "c0 + i"); }, "v", "        ");
  s += "        ch[i] = v;\n      }\n";
  s += "      fusor_stream_floats(out + c0, ch, n, 0, 0);\n    }\n";
  s += "    _mm_sfence(); /* streaming stores are weakly ordered: drain before the join */\n";
  s += "    }\n    return 0;\n  }\n";
  s += "  if (contiguous) {\n";
  s += "    " + omp_parallel("total * 16", " for simd schedule(static)") + "\n";
  s += "    for (int64_t i = 0; i < total; ++i) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_contiguous(in, "i"); }, "v", "      ");
  s += "      out[i] = v;\n    }\n    return 0;\n  }\n";
  // Inputs that are contiguous or repeat the last-axis row: rows of unit-stride vector loops.
  s += "  if (rowwise) {\n";
  s += "    const int64_t inner = shape[rank - 1], outer = inner > 0 ? total / inner : 0;\n";
  s += "    " + omp_parallel("total * 16", " for schedule(static)") + "\n";
  s += "    for (int64_t o = 0; o < outer; ++o) {\n";
  for (size_t i = 0; i < r.graph().input_names().size(); ++i) {
    const std::string n = std::to_string(i);
    s += "      const float* restrict r" + n + " = x" + n + " + (mode" + n + " == 0 ? o * inner : 0);\n";
  }
  s += "      float* restrict orow = out + o * inner;\n";
  s += "      #pragma omp simd\n";
  s += "      for (int64_t j = 0; j < inner; ++j) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return "r" + std::to_string(in) + "[j]"; }, "v", "        ");
  s += "        orow[j] = v;\n      }\n    }\n    return 0;\n  }\n";
  s += "  " + omp_parallel("total * 16", " for schedule(static)") + "\n";
  s += "  for (int64_t i = 0; i < total; ++i) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_broadcast(in, "i"); }, "v", "    ");
  s += "    out[i] = v;\n  }\n  return 0;\n";
  return s;
}

std::string pointwise_reduce_body(const PointwiseReduceRegion& r) {
  const auto& d = c99_simd_dialect();
  std::string s = pointwise_setup(r.graph().input_names().size(), "2", true);
  s += "  (void)rowwise;\n";
  const std::string init = codegen::render_reduce_init(d, r.reduce());
  s += "  " + omp_parallel("rows * row_len * 16", " for schedule(static)") + "\n";
  s += "  for (int64_t row = 0; row < rows; ++row) {\n";
  s += "    const int64_t base = row * row_len;\n";
  s += "    float a_[16];\n    for (int l = 0; l < 16; ++l) a_[l] = " + init + ";\n";
  s += "    int64_t j = 0;\n";
  s += "    if (contiguous)\n      for (; j + 16 <= row_len; j += 16) {\n";
  s += "        #pragma omp simd\n        for (int l = 0; l < 16; ++l) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_contiguous(in, "base + j + l"); }, "v", "          ");
  s += "          a_[l] = " + codegen::render_reduce_combine(d, r.reduce(), "a_[l]", "v") + ";\n        }\n      }\n";
  s += "    for (; j < row_len; ++j) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_broadcast(in, "base + j"); }, "v", "      ");
  s += "      a_[0] = " + codegen::render_reduce_combine(d, r.reduce(), "a_[0]", "v") + ";\n    }\n";
  s += "    float acc = a_[0];\n";
  s +=
      "    for (int l = 1; l < 16; ++l) acc = " + codegen::render_reduce_combine(d, r.reduce(), "acc", "a_[l]") + ";\n";
  s += "    out[row] = " + codegen::render_reduce_finish(d, r.reduce(), "acc", "(float)row_len") + ";\n";
  s += "  }\n  return 0;\n";
  return s;
}

} // namespace fusor::x86::simd
