// Flash-style attention for the AVX-512 lane: per (batch, head, block of MR queries) the
// scores of 32 keys at a time come from the GEMM micro-kernel (Q block packed [D][MR], K
// packed once per KV head as [key block][D][32]); an online softmax (running max, rescaled
// sum) turns them into probabilities in L1, and a 4-row x 64-column register kernel adds
// P·V into the query block's output rows. No score matrix is ever stored. Steps of the
// softmax come from the op table (accumulate = e^d, factor = 1/s) via the SIMD dialect.
#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

using codegen::c99_simd_dialect;

namespace {

// o[rows][dv] += p[rows][0..nb) · v[0..nb)[dv]: 4 rows x 4 zmm accumulators per pass,
// masked for a ragged dv. p rows past `rows` are read (finite) but never stored.
const char* kPv = R"(static void fusor_pv(int64_t rows, int64_t nb, const float* restrict p, int64_t ldp,
                     const float* restrict v, int64_t ldv, float* restrict o, int64_t ldo, int64_t dv) {
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    const int64_t rr = rows - r0 < 4 ? rows - r0 : 4;
    for (int64_t d0 = 0; d0 < dv; d0 += 64) {
      __mmask16 mk[4];
      for (int c = 0; c < 4; ++c) {
        const int64_t rem = dv - d0 - 16 * c;
        mk[c] = rem >= 16 ? (__mmask16)0xFFFF : (rem > 0 ? (__mmask16)((1u << rem) - 1u) : (__mmask16)0);
      }
      __m512 acc[4][4];
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c)
          acc[r][c] = r < rr ? _mm512_maskz_loadu_ps(mk[c], o + (r0 + r) * ldo + d0 + 16 * c) : _mm512_setzero_ps();
      for (int64_t j = 0; j < nb; ++j) {
        const float* restrict vr = v + j * ldv + d0;
        __m512 vv[4];
        for (int c = 0; c < 4; ++c) vv[c] = _mm512_maskz_loadu_ps(mk[c], vr + 16 * c);
        for (int r = 0; r < 4; ++r) {
          const __m512 pb = _mm512_set1_ps(p[(r0 + r) * ldp + j]);
          for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
        }
      }
      for (int r = 0; r < 4; ++r)
        if (r < rr)
          for (int c = 0; c < 4; ++c) _mm512_mask_storeu_ps(o + (r0 + r) * ldo + d0 + 16 * c, mk[c], acc[r][c]);
    }
  }
}

)";

} // namespace

std::string attention_pv_source() { return kPv; }

std::string attention_body(const AttentionRegion& r, const StorageLoad& ld, const Tuning&) {
  const auto& d = c99_simd_dialect();
  const std::string T = ld.type;
  const bool f32 = T == "float";
  std::string s;
  s += "  const " + T + "* restrict Q = (const " + T + "*)operands[0];\n";
  s += "  const " + T + "* restrict Kt = (const " + T + "*)operands[1];\n";
  s += "  const " + T + "* restrict V = (const " + T + "*)operands[2];\n";
  s += "  const int64_t group = heads / kv_heads;\n";
  s += "  const int64_t nbh = batch * heads, nkv = batch * kv_heads;\n";
  s += "  const float scale = " + codegen::float_literal(r.scale()) + ";\n";
  s += "  if (nbh == 0 || M == 0 || Dv == 0) return 0;\n";
  s += "  if (Nk == 0) { memset(out, 0, sizeof(float) * (size_t)(nbh * M * Dv)); return 0; }\n";
  s += "  const int64_t nkb = fusor_cdiv(Nk, 32);\n";
  s += "  float* restrict kp = (float*)fusor_alloc(sizeof(float) * (size_t)(nkv * nkb * (D > 0 ? D : 1) * 32));\n";
  s += "  if (!kp) return 2;\n";
  if (!f32) {
    s += "  float* restrict vf = (float*)fusor_alloc(sizeof(float) * (size_t)(nkv * Nk * Dv));\n";
    s += "  if (!vf) { free(kp); return 2; }\n";
  }
  s += "  int failed = 0;\n";
  s += "  #pragma omp parallel\n  {\n";
  // K of every KV head, packed once: [head][key block][D][32], keys past Nk zero.
  s += "    #pragma omp for schedule(static)\n";
  s += "    for (int64_t hb = 0; hb < nkv * nkb; ++hb) {\n";
  s += "      const int64_t head = hb / nkb, n0 = (hb % nkb) * 32;\n";
  s += "      const int64_t w = Nk - n0 < 32 ? Nk - n0 : 32;\n";
  s += "      float* restrict dst = kp + hb * D * 32;\n";
  s += "      const " + T + "* restrict kh = Kt + head * Nk * D;\n";
  if (r.k_transposed()) {
    s += "      for (int64_t c = 0; c < D; ++c) {\n";
    s += "        for (int64_t j = 0; j < w; ++j) dst[c * 32 + j] = " + ld.load("kh", "c * Nk + n0 + j") + ";\n";
    s += "        for (int64_t j = w; j < 32; ++j) dst[c * 32 + j] = 0.0f;\n      }\n";
  } else {
    s += "      for (int64_t j = 0; j < w; ++j)\n";
    s += "        for (int64_t c = 0; c < D; ++c) dst[c * 32 + j] = " + ld.load("kh", "(n0 + j) * D + c") + ";\n";
    s += "      for (int64_t c = 0; c < D; ++c)\n        for (int64_t j = w; j < 32; ++j) dst[c * 32 + j] = 0.0f;\n";
  }
  s += "    }\n";
  if (!f32) {
    s += "    #pragma omp for schedule(static)\n";
    s += "    for (int64_t e = 0; e < nkv * Nk * Dv; ++e) vf[e] = " + ld.load("V", "e") + ";\n";
  }
  s += "    const float* restrict vall = " + std::string(f32 ? "V" : "vf") + ";\n";
  s += "    float* qp = (float*)fusor_alloc(sizeof(float) * (size_t)((D > 0 ? D : 1) * FUSOR_MR));\n";
  s += "    float* ob = (float*)fusor_alloc(sizeof(float) * (size_t)(FUSOR_MR * Dv));\n";
  s += "    float sc[FUSOR_MR * 32] __attribute__((aligned(64)));\n";
  s += "    float pr[(FUSOR_MR + 4) * 32] __attribute__((aligned(64)));\n";
  s += "    float mrow[FUSOR_MR], lrow[FUSOR_MR];\n";
  s += "    memset(pr, 0, sizeof pr);\n";
  s += "    if (!qp || !ob) {\n      #pragma omp atomic write\n      failed = 1;\n    }\n";
  s += "    const int64_t nqb = fusor_cdiv(M, FUSOR_MR);\n";
  s += "    #pragma omp for schedule(dynamic, 1)\n";
  s += "    for (int64_t item = 0; item < nbh * nqb; ++item) {\n";
  s += "      if (!qp || !ob) continue;\n";
  s += "      const int64_t bh = item / nqb, i0 = (item % nqb) * FUSOR_MR;\n";
  s += "      const int64_t b = bh / heads, h = bh % heads, kvh = b * kv_heads + h / group;\n";
  s += "      const int64_t rows = M - i0 < FUSOR_MR ? M - i0 : FUSOR_MR;\n";
  s += "      const " + T + "* restrict qh = Q + bh * M * D;\n";
  s += "      for (int64_t r = 0; r < FUSOR_MR; ++r)\n";
  s += "        for (int64_t c = 0; c < D; ++c)\n";
  s += "          qp[c * FUSOR_MR + r] = r < rows ? " +
       ld.load("qh", r.q_transposed() ? "c * M + i0 + r" : "(i0 + r) * D + c") + " : 0.0f;\n";
  s += "      for (int64_t r = 0; r < FUSOR_MR; ++r) { mrow[r] = -INFINITY; lrow[r] = 0.0f; }\n";
  s += "      memset(ob, 0, sizeof(float) * (size_t)(FUSOR_MR * Dv));\n";
  // Top-left causal: query i sees keys 0..i.
  s += std::string("      const int64_t n_end = ") + (r.causal() ? "(i0 + rows < Nk ? i0 + rows : Nk)" : "Nk") + ";\n";
  s += "      const float* restrict vh = vall + kvh * Nk * Dv;\n";
  s += "      for (int64_t n0 = 0; n0 < n_end; n0 += 32) {\n";
  s += "        const int64_t nb = Nk - n0 < 32 ? Nk - n0 : 32;\n";
  s += "        fusor_ukr(D, qp, kp + (kvh * nkb + n0 / 32) * D * 32, sc);\n";
  s += std::string("        const int diag = ") + (r.causal() ? "n0 + nb > i0 + 1" : "0") + ";\n";
  s += "        for (int64_t rr = 0; rr < rows; ++rr) {\n";
  s += std::string("          int64_t lim = ") + (r.causal() ? "i0 + rr + 1 - n0" : "nb") + ";\n";
  s += "          lim = lim < nb ? lim : nb;\n";
  s += "          float* restrict srow = sc + rr * 32;\n          float* restrict prow = pr + rr * 32;\n";
  s += "          if (lim <= 0) { for (int j = 0; j < 32; ++j) prow[j] = 0.0f; continue; }\n";
  // Scores and their max over visible keys; vmaxps returns its second operand when either is
  // NaN, so a NaN score never becomes the max (as the scalar renderer's comparison).
  s += "          const __mmask16 k0 = lim >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << lim) - 1u);\n";
  s +=
      "          const __mmask16 k1 = lim >= 32 ? (__mmask16)0xFFFF : (lim > 16 ? (__mmask16)((1u << (lim - 16)) - 1u) "
      ": (__mmask16)0);\n";
  s += "          const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);\n";
  s += "          const __m512 s0 = _mm512_mul_ps(vs, _mm512_load_ps(srow)), s1 = _mm512_mul_ps(vs, "
       "_mm512_load_ps(srow + 16));\n";
  s += "          _mm512_store_ps(srow, s0);\n          _mm512_store_ps(srow + 16, s1);\n";
  s += "          __m512 mx = _mm512_max_ps(_mm512_mask_blend_ps(k0, ninf, s0), ninf);\n";
  s += "          mx = _mm512_max_ps(_mm512_mask_blend_ps(k1, ninf, s1), mx);\n";
  s += "          const float bm = _mm512_reduce_max_ps(mx);\n";
  s += "          const float mo = mrow[rr], mn = mo > bm ? mo : bm;\n";
  s += "          const float dm = mo - mn;\n";
  s += "          const float alpha = mo == mn ? 1.0f : " +
       codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dm") + ";\n";
  s += "          float ls = 0.0f;\n";
  s += "          #pragma omp simd reduction(+:ls)\n";
  s += "          for (int j = 0; j < 32; ++j) {\n";
  s += "            const float dd = srow[j] - mn;\n";
  s += "            const float e = " + codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dd") + ";\n";
  s += "            prow[j] = j < lim ? e : 0.0f;\n            ls += prow[j];\n          }\n";
  s += "          lrow[rr] = lrow[rr] * alpha + ls;\n          mrow[rr] = mn;\n";
  s += "          if (alpha != 1.0f) {\n            float* restrict orow = ob + rr * Dv;\n";
  s += "            #pragma omp simd\n            for (int64_t c = 0; c < Dv; ++c) orow[c] *= alpha;\n          }\n";
  // On the causal diagonal each row sees its own prefix of keys: masked keys never touch V.
  s += "          if (diag) fusor_pv(1, lim, prow, 32, vh + n0 * Dv, Dv, ob + rr * Dv, Dv, Dv);\n";
  s += "        }\n";
  s += "        if (!diag) fusor_pv(rows, nb, pr, 32, vh + n0 * Dv, Dv, ob, Dv, Dv);\n";
  s += "      }\n";
  s += "      for (int64_t rr = 0; rr < rows; ++rr) {\n";
  s += "        const float rf = " +
       codegen::render_row_norm_factor(d, RowNorm::softmax, "lrow[rr]", "(float)n_end", "0.0f") + ";\n";
  s += "        float* restrict o = out + (bh * M + i0 + rr) * Dv;\n";
  s += "        const float* restrict orow = ob + rr * Dv;\n";
  s += "        #pragma omp simd\n        for (int64_t c = 0; c < Dv; ++c) o[c] = orow[c] * rf;\n";
  s += "      }\n    }\n";
  s += "    free(qp);\n    free(ob);\n  }\n  free(kp);\n";
  if (!f32) s += "  free(vf);\n";
  s += "  return failed ? 2 : 0;\n";
  return s;
}

} // namespace fusor::x86::simd
