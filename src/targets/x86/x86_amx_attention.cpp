// The x86_amx lane's attention: the AVX-512 lane's flash loop (x86_simd_attention.cpp) with
// both products on AMX tiles, exact f32 products as in x86_amx_gemm.cpp. Query blocks are
// 32 rows (the tile's). Scores Q·Kᵀ: K of every KV head is packed once as bf16 parts in
// 32-key panels ([part][feature / 2][key][feature % 2]: features are the contraction), each
// query block as [part][feature / 32][row][32]. The online softmax stays on zmm. P·V: the
// block's probabilities are split into parts ([part][key / 32][row][32]) and multiplied
// with V packed once per KV head ([part][key / 2][column][key % 2], 32-column panels),
// accumulating into output rows padded to whole 32-column tiles.
// A query row or key holding a NaN or an infinity is flagged while packing, and its scores
// are recomputed as f32 dot products (a zero part times an infinity would make NaN); a head
// whose V is not all finite keeps the AVX-512 P·V, which never multiplies a masked key.
#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

namespace {

std::string k_element(const AttentionRegion& r, const std::string& key, const std::string& feature) {
  return r.k_transposed() ? "(" + feature + ") * Nk + " + key : "(" + key + ") * D + " + feature;
}

std::string q_element(const AttentionRegion& r, const std::string& row, const std::string& feature) {
  return r.q_transposed() ? "(" + feature + ") * M + " + row : "(" + row + ") * D + " + feature;
}

} // namespace

std::string amx_attention_pack_k(const AttentionRegion& r, const StorageLoad& ld) {
  std::string s;
  s += "      uint16_t* restrict dst = kp + hb * FUSOR_NSB * Dp * 32;\n";
  s += "      unsigned char* restrict kfl = kf + hb * 32;\n";
  s += "      memset(kfl, 0, 32);\n";
  s += "      int64_t c0 = 0;\n";
  if (ld.type == "float" && !r.k_transposed()) {
    // 16 keys x 16 features through the register transpose; feature pairs (c, c + 1) of a
    // key interleave into one 32-bit lane, 16 keys per store.
    s += "      if (w == 32)\n        for (; c0 + 16 <= D; c0 += 16)\n";
    s += "          for (int64_t jh = 0; jh < 32; jh += 16) {\n";
    s += "            __m512 t_[16];\n";
    s += "            for (int r = 0; r < 16; ++r) t_[r] = _mm512_loadu_ps(kh + (n0 + jh + r) * D + c0);\n";
    s += "            fusor_transpose16(t_);\n";
    s += "            __mmask16 bad = 0;\n";
    s += "            for (int c = 0; c < 16; c += 2)\n";
    s += "              bad |= fusor_store_pairs(t_[c], t_[c + 1], dst + ((c0 + c) / 2) * 64 + jh * 2, Dp * 32, "
         "FUSOR_NSB);\n";
    s += "            for (int j = 0; j < 16; ++j) kfl[jh + j] |= (bad >> j) & 1;\n";
    s += "          }\n";
  }
  s += "      for (int64_t j = 0; j < 32; ++j)\n";
  s += "        for (int64_t c = c0; c < Dp; ++c) {\n";
  s += "          const float v = j < w && c < D ? (float)(" + ld.load("kh", k_element(r, "n0 + j", "c")) +
       ") : 0.0f;\n";
  s += "          if (!isfinite(v)) kfl[j] = 1;\n";
  s += "          fusor_store_parts(v, dst + (c / 2) * 64 + j * 2 + (c & 1), Dp * 32, FUSOR_NSB);\n";
  s += "        }\n";
  return s;
}

std::string amx_attention_pack_q(const AttentionRegion& r, const StorageLoad& ld) {
  std::string s;
  s += "        uint16_t* restrict base = qp + sb * FUSOR_NSA * Dp * 32;\n";
  s += "        for (int64_t rr = 0; rr < FUSOR_MR; ++rr) {\n";
  s += "          const int64_t i = i0 + rr;\n";
  s += "          qfl[sb * FUSOR_MR + rr] = 0;\n";
  s += "          for (int64_t k0 = 0; k0 < Dp; k0 += 32) {\n";
  s += "            uint16_t* restrict dst = base + k0 * 32 + rr * 32;\n";
  s += "            if (i >= M) {\n";
  s += "              for (int s = 0; s < FUSOR_NSA; ++s) memset(dst + s * Dp * 32, 0, 64);\n";
  s += "              continue;\n            }\n";
  AmxRowChunk c;
  c.source = "qh";
  c.element = q_element(r, "i", "k0 + t");
  if (!r.q_transposed()) c.contiguous = "qh + i * D + k0";
  c.valid = "D - k0";
  c.dst = "dst";
  c.part_stride = "Dp * 32";
  c.parts = "FUSOR_NSA";
  c.flag = "qfl[sb * FUSOR_MR + rr]";
  s += amx_pack_row_chunk(c, ld, "            ");
  s += "          }\n        }\n";
  return s;
}

std::string amx_attention_scores(const AttentionRegion& r, const StorageLoad& ld) {
  std::string s;
  s += "        for (int64_t pb = 0; pb < fusor_cdiv(nbk, 32); ++pb)\n";
  s +=
      "          fusor_amx_ukr(Dp, qp + sb * FUSOR_NSA * Dp * 32, Dp * 32, kp + (kvh * nkb + n0 / 32 + pb) * FUSOR_NSB "
      "* Dp * 32, Dp * 32, sp + pb * 32, NB, NULL, 0);\n";
  s += "        {\n";
  s += "          const unsigned char* restrict kfl = kf + (kvh * nkb + n0 / 32) * 32;\n";
  s += "          int any = 0;\n";
  s += "          for (int64_t rr = 0; rr < rows; ++rr) any |= qfl[sb * FUSOR_MR + rr];\n";
  s += "          for (int64_t j = 0; j < nbk; ++j) any |= kfl[j];\n";
  s += "          if (any)\n";
  s += "            for (int64_t rr = 0; rr < rows; ++rr)\n";
  s += "              for (int64_t j = 0; j < nbk; ++j) {\n";
  s += "                if (!qfl[sb * FUSOR_MR + rr] && !kfl[j]) continue;\n";
  s += "                float sum = 0.0f;\n";
  s += "                for (int64_t c = 0; c < D; ++c)\n";
  s += "                  sum = fmaf(" + ld.load("qh", q_element(r, "i0 + rr", "c")) + ", " +
       ld.load("kh", k_element(r, "n0 + j", "c")) + ", sum);\n";
  s += "                sp[rr * NB + j] = sum;\n";
  s += "              }\n";
  s += "        }\n";
  return s;
}

std::string amx_attention_pack_v() {
  // Keys k and k + 1, 16 columns at a time, interleave into one 32-bit lane per column (the
  // pair TDPBF16PS multiplies); keys past Nk and columns past Dv are zero. V is f32 here
  // (16-bit storage was converted into vf).
  std::string s;
  s += "    #pragma omp for schedule(static)\n";
  s += "    for (int64_t hp = 0; hp < nkv * ndp; ++hp) {\n";
  s += "      const int64_t c0 = (hp % ndp) * 32, w = Dv - c0 < 32 ? Dv - c0 : 32;\n";
  s += "      const float* restrict vh = vall + (hp / ndp) * Nk * Dv;\n";
  s += "      uint16_t* restrict dst = vp + hp * FUSOR_NSB * Nkp * 32;\n";
  s += "      __mmask16 bad = 0;\n";
  s += "      for (int64_t k = 0; k < Nkp; k += 2)\n";
  s += "        for (int h = 0; h < 2; ++h) {\n";
  s += "          const int64_t left = w - h * 16;\n";
  s += "          const __mmask16 cm = fusor_mask16(left);\n";
  s += "          const __m512 x0 = _mm512_maskz_loadu_ps(k < Nk ? cm : 0, vh + k * Dv + c0 + h * 16);\n";
  s += "          const __m512 x1 = _mm512_maskz_loadu_ps(k + 1 < Nk ? cm : 0, vh + (k + 1) * Dv + c0 + h * 16);\n";
  s += "          bad |= fusor_store_pairs(x0, x1, dst + k * 32 + h * 32, Nkp * 32, FUSOR_NSB);\n";
  s += "        }\n";
  s += "      vfl[hp] = bad != 0;\n";
  s += "    }\n";
  return s;
}

std::string amx_attention_pv(const AttentionRegion&) {
  // The block's 32 x nbkp probabilities (0 past each row's keys, rows past M zero scores)
  // as bf16 parts, then one tile product per 32 output columns, accumulated in place.
  std::string s;
  s += "          int pbad = 0; /* probabilities are finite or NaN; a NaN stays one */\n";
  s += "          for (int64_t rr = 0; rr < FUSOR_MR; ++rr)\n";
  s += "            for (int64_t k0 = 0; k0 < nbkp; k0 += 32) {\n";
  AmxRowChunk c;
  c.source = "sp";
  c.element = "rr * NB + k0 + t";
  c.contiguous = "sp + rr * NB + k0";
  c.valid = "nbkp - k0";
  c.dst = "pp + k0 * 32 + rr * 32";
  c.part_stride = "nbkp * 32";
  c.parts = "FUSOR_NSA";
  c.flag = "pbad";
  s += amx_pack_row_chunk(c, StorageLoad{"float", "", ""}, "              ");
  s += "            }\n";
  s += "          for (int64_t p = 0; p < ndp; ++p)\n";
  s += "            fusor_amx_ukr(nbkp, pp, nbkp * 32, vp + ((kvh * ndp + p) * FUSOR_NSB * Nkp + n0) * 32, Nkp * 32, "
       "obs + p * 32, LDO, obs + p * 32, LDO);\n";
  return s;
}

} // namespace fusor::x86::simd
