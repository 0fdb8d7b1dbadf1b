// The x86_avx2 lane's micro-kernel: the AVX-512 lane's GEMM loop nest (gemm_body: packed
// panels, K blocks, the epilogue on the L1 tile before the single store) around an AVX2 + FMA
// register tile, for hosts without AVX-512. Sixteen ymm registers hold an MR x 16 half of
// the MR x 32 tile (2 x MR accumulators, two B vectors and the broadcast A value: MR <= 6),
// so the kernel runs the packed panel's two 16-column halves one after the other, reading
// the MR-row A panel twice (from L1) instead of spilling accumulators. Attention runs the
// same tile for both of its products (x86_avx2_attention.cpp).
#include <functional>

#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

namespace {

// The register tile as function `name(kc, <params>, c, ldc, cin, ldin)`; `a_at` is A's element
// of row R (a number) at k; `half` starts a 16-column half h (0 or 16) and `step` loads its B
// vectors b0 and b1 at k.
// With `halves`, the function takes a last parameter `nc` (16 or 32) and computes only the
// first nc columns of the tile.
std::string avx2_tile(int mr, const std::string& name, const std::string& params, const std::string& half,
                      const std::string& step, const std::function<std::string(const std::string&)>& a_at,
                      bool halves = false) {
  // fusor_ukr's contract (x86_simd_common.hpp): c[MR][32] = cin + a^T b, cin may be c (each
  // half reads its own columns of cin before it writes them) or NULL for zero. As the zmm
  // tile, the accumulators start from zero every FUSOR_KSUB steps and are added to cin (the first
  // time) or to c (after): a three-level sum over K.
  std::string s = "static void " + name + "(int64_t kc, " + params +
                  ", float* c, int64_t ldc, const float* cin, int64_t ldin" + (halves ? ", int64_t nc" : "") + ") {\n";
  const std::string sub = "FUSOR_KSUB";
  s += std::string("  for (int64_t h = 0; h < ") + (halves ? "nc" : "32") + "; h += 16) {\n" + half;
  for (int r = 0; r < mr; ++r)
    s += "    __m256 c" + std::to_string(r) + "_0 = _mm256_setzero_ps(), c" + std::to_string(r) +
         "_1 = _mm256_setzero_ps();\n";
  s += "    for (int64_t k0 = 0;; k0 += " + sub + ") {\n";
  s += "      const int64_t k1 = kc - k0 > " + sub + " ? k0 + " + sub + " : kc;\n";
  s += "      #pragma GCC unroll 4\n";
  s += "      for (int64_t k = k0; k < k1; ++k) {\n" + step;
  for (int r = 0; r < mr; ++r) {
    const std::string R = std::to_string(r);
    s += "        { const __m256 av = _mm256_broadcast_ss(" + a_at(R) + "); c" + R + "_0 = _mm256_fmadd_ps(av, b0, c" +
         R + "_0); c" + R + "_1 = _mm256_fmadd_ps(av, b1, c" + R + "_1); }\n";
  }
  s += "      }\n";
  s += "      const float* from = k0 == 0 ? cin : c;\n      const int64_t ldf = k0 == 0 ? ldin : ldc;\n";
  s += "      if (from) {\n";
  for (int r = 0; r < mr; ++r) {
    const std::string R = std::to_string(r);
    s += "        c" + R + "_0 = _mm256_add_ps(c" + R + "_0, _mm256_loadu_ps(from + " + R + " * ldf + h)); c" + R +
         "_1 = _mm256_add_ps(c" + R + "_1, _mm256_loadu_ps(from + " + R + " * ldf + h + 8));\n";
  }
  s += "      }\n";
  for (int r = 0; r < mr; ++r) {
    const std::string R = std::to_string(r);
    s += "      _mm256_storeu_ps(c + " + R + " * ldc + h, c" + R + "_0); _mm256_storeu_ps(c + " + R +
         " * ldc + h + 8, c" + R + "_1);\n";
  }
  s += "      if (k1 == kc) break;\n";
  for (int r = 0; r < mr; ++r)
    s += "      c" + std::to_string(r) + "_0 = c" + std::to_string(r) + "_1 = _mm256_setzero_ps();\n";
  s += "    }\n  }\n}\n\n";
  return s;
}

// B's half at k from rows `ldb` floats apart (32 when packed).
std::string strided_b_step(const std::string& ldb) {
  return "        const __m256 b0 = _mm256_loadu_ps(b + k * " + ldb + " + h), b1 = _mm256_loadu_ps(b + k * " + ldb +
         " + h + 8);\n";
}

// A's tile with A packed [kc][mr] (row R at a + k * mr + R).
std::function<std::string(const std::string&)> packed_a(int mr) {
  const std::string MR = std::to_string(mr);
  return [MR](const std::string& r) { return "a + k * " + MR + " + " + r; };
}

} // namespace

std::string avx2_packed_ukr(int rows, int mr, const std::string& name) {
  return avx2_tile(rows, name, "const float* restrict a, const float* restrict b", "", strided_b_step("32"),
                   packed_a(mr));
}

// fusor_ukr_pack's ymm tile (x86_simd_common.hpp, avx512_packing_ukr): each half reads its 16
// columns of B where they lie (the first half from b, the second from b2) and stores them to
// the packed panel bp as it uses them, prefetching `ahead` rows early (packing_prefetches).
std::string avx2_packing_ukr(int mr, int ahead) {
  std::string step =
      "        const float* restrict bk = bs + k * ldb;\n"
      "        const __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);\n"
      "        _mm256_storeu_ps(bp + k * 32 + h, b0);\n        _mm256_storeu_ps(bp + k * 32 + h + 8, b1);\n";
  step += packing_prefetches({"bk"}, ahead, "        ");
  return avx2_tile(mr, "fusor_ukr_pack",
                   "const float* restrict a, const float* restrict b, const float* restrict b2, int64_t ldb, "
                   "float* restrict bp",
                   "    const float* restrict bs = h == 0 ? b : b2;\n", step, packed_a(mr));
}

// fusor_ukr_copy's ymm tile (x86_simd_common.hpp): each half copies its 16-column run of the
// rows (the first half from src, the second from src2).
std::string avx2_copying_ukr(int mr, int cw) {
  const std::vector<CopyRun> runs{{"cs", "h"}};
  const std::string CW = std::to_string(cw);
  return avx2_tile(mr, "fusor_ukr_copy", copying_ukr_params(),
                   "    const float* restrict cs = h == 0 ? src : src2;\n" + copy_setup(runs, CW, "    "),
                   strided_b_step("32") + copy_step(runs, CW, true, "        "), packed_a(mr));
}

std::string avx2_micro_kernel_source(int mr, int ksub) {
  return "#define FUSOR_MR " + std::to_string(mr) + "\n" + ksub_define(ksub) + avx2_packed_ukr(mr, mr, "fusor_ukr");
}

// fusor_ukr_direct's ymm tile (x86_simd_common.hpp): six rows or fewer keep a pointer each.
// With `halves` (attention's scores, fusor_ukr_q) it takes the columns to compute, 16 or 32: a
// panel holding at most 16 keys the block sees (the causal diagonal's, a ragged last one)
// computes only their half (causal S = 512 on Ice Lake: 0.97x the time at D = 128, 1.00x at 64).
std::string avx2_direct_ukr(int rows, const std::string& name, bool halves) {
  return avx2_tile(
      rows, name, "const float* restrict a, int64_t lda, const float* restrict b, int64_t ldb", "",
      strided_b_step("ldb"), [](const std::string& r) { return "a + " + r + " * lda + k"; }, halves);
}

// Attention's P·V reads the probabilities where the softmax left them, rows FUSOR_NB floats
// apart (a constant: the six row streams address by immediates), instead of a transposed copy;
// V's rows are ldb floats apart (in place or packed).
std::string avx2_rows_kernel_source(int mr) {
  return avx2_tile(mr, "fusor_ukr_rows", "const float* restrict a, const float* restrict b, int64_t ldb", "",
                   strided_b_step("ldb"), [](const std::string& r) { return "a + " + r + " * FUSOR_NB + k"; });
}

} // namespace fusor::x86::simd
