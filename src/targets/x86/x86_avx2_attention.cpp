// The x86_avx2 lane's pieces of flash-style attention (attention_body's loops, as the AVX-512
// lane's): both products run the lane's register tile. Scores are Q·Kᵀ (fusor_ukr) with the
// query block packed [D][MR] and K [32-key panel][D][32], as in the AVX-512 lane; P·V
// (fusor_ukr_rows) reads P's rows where the softmax left them against V packed once per KV
// head as [32-column panel][Nk][32], the block's output rows (LDO, a multiple of 32 columns)
// passed as both `c` and `cin`, so the accumulators stay in registers over all keys of the
// step. The online softmax between them is the op table's steps as float loops the compiler
// vectorises 8 lanes wide (e^d through fusor_expf, the table's spelling).
#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

// Where P·V reads V: f32 V whose rows are whole 32-column panels (Dv a multiple of 32) where it
// lies, rows Dv floats apart (packing it took 1.5 % of a causal S = 512 call); any other V
// packed once per KV head as f32 panels of 32 columns over all keys, rows 32 floats apart, the
// columns past Dv zero, so the padded output columns only ever add zeros. vsrc and ldv give
// the panels; FUSOR_VPANEL(h, p) is KV head h's panel p at key 0.
std::string avx2_attention_v_source(bool f32) {
  std::string s = "  const int64_t ndp = fusor_cdiv(Dv, 32);\n";
  s += std::string("  const int vin = ") + (f32 ? "Dv % 32 == 0" : "0") + ";\n";
  s += "  float* restrict vp = vin ? NULL : (float*)fusor_scratch(2, sizeof(float) * (size_t)(nkv * ndp * Nk * 32));\n";
  s += "  if (!vin && !vp) return 2;\n";
  s += std::string("  const float* restrict vsrc = vin ? ") + (f32 ? "V" : "NULL") + " : vp;\n";
  s += "  const int64_t ldv = vin ? Dv : 32;\n";
  s += "#define FUSOR_VPANEL(h, p) (vsrc + (vin ? (h) * Nk * Dv + (p) * 32 : ((h) * ndp + (p)) * Nk * 32))\n";
  return s;
}

std::string avx2_attention_pack_v(const StorageLoad& ld, bool stream) {
  std::string s;
  s += "    if (!vin) {\n";
  s += std::string("    #pragma omp for schedule(static)") + (stream ? " nowait" : "") + "\n";
  s += "    for (int64_t hp = 0; hp < nkv * ndp; ++hp) {\n";
  s += "      const int64_t head = hp / ndp, c0 = (hp % ndp) * 32, w = Dv - c0 < 32 ? Dv - c0 : 32;\n";
  s += "      float* restrict dst = vp + hp * Nk * 32;\n";
  s += "      for (int64_t j = 0; j < Nk; ++j) {\n        int64_t c = 0;\n";
  // Whole panels 8 columns at a time (16-bit storage widened as it loads), streamed as K's
  // panels are (streams_k_panels says why).
  if (stream)
    s += "        if (w == 32)\n          for (; c < 32; c += 8)\n            _mm256_stream_ps(dst + j * 32 + c, " +
         ld.load8("V + (head * Nk + j) * Dv + c0 + c") + ");\n";
  s += "        for (; c < w; ++c) dst[j * 32 + c] = " + ld.load("V", "(head * Nk + j) * Dv + c0 + c") + ";\n";
  s += "        for (; c < 32; ++c) dst[j * 32 + c] = 0.0f;\n      }\n    }\n";
  if (stream) s += fenced_barrier();
  return s + "    }\n";
}

// `fusor_transpose8(__m256 r[8])`: an 8 x 8 transpose in registers (r[c] ends holding column
// c), for K's f32 panels: 24 shuffles per 64 elements against a load and a store each.
std::string avx2_transpose8_source() {
  return R"(static inline void fusor_transpose8(__m256* r) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}
)";
}

// K's whole 32-key panels, 8 keys x 8 features at a time through fusor_transpose8 (16-bit
// storage widened as it loads; kh, n0, dst and c0 as in attention_body's packing loop; c0 ends
// past the features it packed).
std::string avx2_attention_pack_k(const StorageLoad& ld, bool stream) {
  return "      if (w == 32)\n"
         "        for (; c0 + 8 <= D; c0 += 8)\n"
         "          for (int64_t jh = 0; jh < 32; jh += 8) {\n"
         "            __m256 t_[8];\n"
         "            #pragma GCC unroll 8\n"
         "            for (int r = 0; r < 8; ++r) t_[r] = " +
         ld.load8("kh + (n0 + jh + r) * D + c0") +
         ";\n"
         "            fusor_transpose8(t_);\n"
         "            #pragma GCC unroll 8\n"
         "            for (int c = 0; c < 8; ++c) _mm256_" +
         std::string(stream ? "stream" : "storeu") +
         "_ps(dst + (c0 + c) * 32 + jh, t_[c]);\n"
         "          }\n";
}

// One online-softmax step of row rr over its `lim` visible keys of the block (srow holds the
// raw scores; they become probabilities in place): the vector vocabulary's base-2 step
// (fusor_softmax_step, x86_simd_attention_few.cpp: srow's NB floats are whole vectors), or,
// were the op table's e^d not expf, float loops the compiler vectorises over its spelling.
std::string avx2_attention_softmax_row() {
  std::string s;
  s += "          float* restrict srow = sp + rr * NB;\n";
  if (softmax_exp_is_expf()) {
    s += "          const float alpha = fusor_softmax_step(srow, lim, scale * 1.44269504088896341f, mrow + rr, lrow + "
         "rr);\n";
  } else {
    const auto& d = codegen::c99_simd_dialect();
    s += "          float bm = -INFINITY;\n";
    // A NaN score never becomes the max (as the comparison the reference's max makes); the
    // row's probabilities are NaN through it either way.
    s += "          #pragma omp simd reduction(max : bm)\n";
    s += "          for (int64_t j = 0; j < lim; ++j) {\n";
    s += "            const float x = scale * srow[j];\n            srow[j] = x;\n";
    s += "            bm = x > bm ? x : bm;\n          }\n";
    s += online_softmax_rescale(codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dm"));
    s += "          float ls = 0.0f;\n";
    s += "          #pragma omp simd reduction(+ : ls)\n";
    s += "          for (int64_t j = 0; j < lim; ++j) {\n";
    s += "            const float dd = srow[j] - mn;\n";
    s += "            const float e = " + codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dd") + ";\n";
    s += "            srow[j] = e;\n            ls += e;\n          }\n";
    s += "          lrow[rr] = lrow[rr] * alpha + ls;\n          mrow[rr] = mn;\n";
  }
  s += "          if (alpha != 1.0f) {\n            float* restrict orow = obs + rr * LDO;\n";
  s += "            #pragma omp simd\n            for (int64_t c = 0; c < LDO; ++c) orow[c] *= alpha;\n          }\n";
  return s;
}

// P·V of the block's rows: the keys every row sees (all of the block, or on the causal
// diagonal those below the first row's limit) through the micro-kernel, then on the diagonal
// each row's own remaining prefix alone, so a masked key never touches V (a NaN in a masked V
// row cannot leak). The micro-kernel reads P's rows where the softmax left them; rows past
// the block's real rows hold what the score kernel wrote, and their outputs are never stored.
std::string avx2_attention_pv(bool causal) {
  std::string s;
  s += std::string("        int64_t kv = ") + (causal ? "i0 + 1 - n0" : "nbk") + ";\n";
  if (causal) s += "        kv = kv < 0 ? 0 : (kv < nbk ? kv : nbk);\n";
  s += "        if (kv > 0)\n";
  s += "          for (int64_t dp = 0; dp < ndp; ++dp)\n";
  s += "            fusor_ukr_rows(kv, sp, FUSOR_VPANEL(kvh, dp) + n0 * ldv, ldv, obs + dp * 32, LDO, obs + dp * 32, "
       "LDO);\n";
  if (causal) {
    s += "        for (int64_t rr = 0; rr < rows; ++rr) {\n";
    s += "          const int64_t lim = i0 + rr + 1 - n0 < nbk ? i0 + rr + 1 - n0 : nbk;\n";
    s += "          float* restrict orow = obs + rr * LDO;\n";
    s += "          for (int64_t j = kv; j < lim; ++j) {\n";
    s += "            const float p = sp[rr * NB + j];\n";
    s += "            for (int64_t dp = 0; dp < ndp; ++dp) {\n";
    s += "              const float* restrict vr = FUSOR_VPANEL(kvh, dp) + (n0 + j) * ldv;\n";
    s += "              #pragma omp simd\n";
    s += "              for (int64_t c = 0; c < 32; ++c) orow[dp * 32 + c] += p * vr[c];\n";
    s += "            }\n          }\n        }\n";
  }
  return s;
}

} // namespace fusor::x86::simd
