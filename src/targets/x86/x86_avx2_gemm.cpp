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

// The register tile as function `name`; `a_at` is A's element of row R (a number) at k; B's
// rows are `ldb` floats apart (32 when packed), `ld_params` the stride parameters after a and b.
std::string avx2_ukr(int mr, const std::string& name, const std::function<std::string(const std::string&)>& a_at,
                     const std::string& ldb = "32", bool ld_params = false) {
  // fusor_ukr's contract (x86_simd_common.hpp): c[MR][32] = cin + a^T b, cin may be c (each
  // half reads its own columns of cin before it writes them) or NULL for zero. As the zmm
  // tile, the accumulators start from zero every FUSOR_KSUB steps and are added to cin (the first
  // time) or to c (after): a three-level sum over K.
  std::string s = "static void " + name + "(int64_t kc, const float* restrict a, " +
                  (ld_params ? "int64_t lda, " : "") + "const float* restrict b, " +
                  (ld_params ? "int64_t ldb, " : "") + "float* c, int64_t ldc, const float* cin, int64_t ldin) {\n";
  const std::string sub = "FUSOR_KSUB";
  s += "  for (int64_t h = 0; h < 32; h += 16) {\n";
  for (int r = 0; r < mr; ++r)
    s += "    __m256 c" + std::to_string(r) + "_0 = _mm256_setzero_ps(), c" + std::to_string(r) +
         "_1 = _mm256_setzero_ps();\n";
  s += "    for (int64_t k0 = 0;; k0 += " + sub + ") {\n";
  s += "      const int64_t k1 = kc - k0 > " + sub + " ? k0 + " + sub + " : kc;\n";
  s += "      #pragma GCC unroll 4\n";
  s += "      for (int64_t k = k0; k < k1; ++k) {\n";
  s += "        const __m256 b0 = _mm256_loadu_ps(b + k * " + ldb + " + h), b1 = _mm256_loadu_ps(b + k * " + ldb +
       " + h + 8);\n";
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

} // namespace

std::string avx2_packed_ukr(int rows, int mr, const std::string& name) {
  const std::string MR = std::to_string(mr);
  return avx2_ukr(rows, name, [&](const std::string& r) { return "a + k * " + MR + " + " + r; });
}

std::string avx2_micro_kernel_source(int mr, int ksub) {
  return "#define FUSOR_MR " + std::to_string(mr) + "\n" + ksub_define(ksub) + avx2_packed_ukr(mr, mr, "fusor_ukr");
}

// fusor_ukr_direct's ymm tile (x86_simd_common.hpp): six rows or fewer keep a pointer each.
std::string avx2_direct_ukr(int rows, const std::string& name) {
  return avx2_ukr(
      rows, name, [](const std::string& r) { return "a + " + r + " * lda + k"; }, "ldb", true);
}

// Attention's P·V reads the probabilities where the softmax left them, rows FUSOR_NB floats
// apart (a constant: the six row streams address by immediates), instead of a transposed copy.
std::string avx2_rows_kernel_source(int mr) {
  return avx2_ukr(mr, "fusor_ukr_rows", [](const std::string& r) { return "a + " + r + " * FUSOR_NB + k"; });
}

} // namespace fusor::x86::simd
