// GEMM-rooted kinds (fused, matmul, gated) for the AVX-512 lane, BLIS-style:
//   for each K block (kc):   pack B[kc, all N] into 32-wide panels (shared, all threads)
//     for each row block (mc rows, split over threads): pack A (storage -> f32, layout,
//       prologue) into MR-row panels, then for every B panel x A panel run the MR x 32
//       register micro-kernel into an L1 tile and merge it: partial sums for inner K blocks,
//       and at the last K block bias, epilogue, gate and residual from the op table on the
//       L1 tile, then the one store of the final value; row reductions run on the finished
//       rows of the block while they are still in L2.
// Gated regions interleave Wg and Wu per panel ([16 gate columns | 16 up columns]) so one
// micro-kernel call yields both products of the same output columns.
#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

using codegen::c99_simd_dialect;

std::string micro_kernel_source(int mr) {
  const std::string MR = std::to_string(mr);
  std::string s = "#define FUSOR_MR " + MR + "\n";
  s += "static void fusor_ukr(int64_t kc, const float* restrict a, const float* restrict b, float* restrict c, int64_t "
       "ldc) {\n";
  for (int r = 0; r < mr; ++r)
    s += "  __m512 c" + std::to_string(r) + "_0 = _mm512_setzero_ps(), c" + std::to_string(r) +
         "_1 = _mm512_setzero_ps();\n";
  s += "  #pragma GCC unroll 4\n";
  s += "  for (int64_t k = 0; k < kc; ++k) {\n";
  s += "    const __m512 b0 = _mm512_loadu_ps(b + k * 32), b1 = _mm512_loadu_ps(b + k * 32 + 16);\n";
  s += "    const float* restrict ak = a + k * " + MR + ";\n";
  s += "    _mm_prefetch((const char*)(ak + 16 * " + MR + "), _MM_HINT_T0);\n";
  for (int r = 0; r < mr; ++r) {
    const std::string R = std::to_string(r);
    s += "    { const __m512 av = _mm512_set1_ps(ak[" + R + "]); c" + R + "_0 = _mm512_fmadd_ps(av, b0, c" + R +
         "_0); c" + R + "_1 = _mm512_fmadd_ps(av, b1, c" + R + "_1); }\n";
  }
  s += "  }\n";
  for (int r = 0; r < mr; ++r) {
    const std::string R = std::to_string(r);
    s += "  _mm512_storeu_ps(c + " + R + " * ldc, c" + R + "_0); _mm512_storeu_ps(c + " + R + " * ldc + 16, c" + R +
         "_1);\n";
  }
  s += "}\n\n";
  return s;
}

std::string gemm_body(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning) {
  const auto& d = c99_simd_dialect();
  const std::string T = ld.type;
  const bool gated = plan.gate.has_value();
  const bool has_bias = std::find(plan.epilogue.begin(), plan.epilogue.end(), Op::bias) != plan.epilogue.end();
  const std::string CW = gated ? "16" : "32"; // output columns per packed panel
  std::string s;
  s += "  const " + T + "* restrict A = (const " + T + "*)operands[0];\n";
  s += "  const " + T + "* restrict B = (const " + T + "*)operands[1];\n";
  int next = 2;
  if (gated) s += "  const " + T + "* restrict B2 = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  if (has_bias) s += "  const " + T + "* restrict bias = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  if (plan.residual)
    s += "  const " + T + "* restrict res = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  s += "  if (M == 0 || N == 0) return 0;\n";
  // K blocks of at most `kc`, evenly sized: fewer blocks mean fewer partial-sum merges
  // through `out`, and a micro-panel streamed from L2 costs the micro-kernel little.
  s += "  const int64_t KCM = " + std::to_string(tuning.kc) + ", MCT = " + std::to_string(tuning.mc) + ";\n";
  s += "  const int64_t KC = K <= KCM ? (K > 0 ? K : 1) : fusor_cdiv(K, fusor_cdiv(K, KCM));\n";
  s += "  const int64_t np = fusor_cdiv(N, " + CW + ");\n";
  s += "  const int64_t kcap = K < KC ? (K > 0 ? K : 1) : KC;\n";
  s += "  float* restrict bp = (float*)fusor_alloc(sizeof(float) * (size_t)np * (size_t)kcap * 32);\n";
  s += "  if (!bp) return 2;\n";
  if (gated) {
    // Partial sums of both products when K spans several blocks (out holds only one).
    s += "  float* restrict part = NULL;\n";
    s += "  if (K > KC) {\n    part = (float*)fusor_alloc(sizeof(float) * (size_t)M * (size_t)np * 32);\n";
    s += "    if (!part) { free(bp); return 2; }\n  }\n";
  }
  s += "  int failed = 0;\n";
  s += "  #pragma omp parallel\n  {\n";
  s += "    int nt = 1;\n#ifdef _OPENMP\n    nt = omp_get_num_threads();\n#endif\n";
  // Row blocks: about MCT rows, a multiple of MR, at least one per thread when M allows;
  // when there are fewer row blocks than threads the panels are split between them.
  s += "    int64_t nib = fusor_cdiv(M, MCT);\n    if (nib < nt) nib = nt;\n";
  s += "    const int64_t mc = fusor_cdiv(fusor_cdiv(M, nib), FUSOR_MR) * FUSOR_MR;\n";
  s += "    nib = fusor_cdiv(M, mc);\n";
  s += "    const int64_t npc = nib >= nt ? 1 : fusor_cdiv(nt, nib), ppc = fusor_cdiv(np, npc);\n";
  s += "    float* restrict ap = (float*)fusor_alloc(sizeof(float) * (size_t)mc * (size_t)kcap);\n";
  s += "    float tile[FUSOR_MR * 32] __attribute__((aligned(64)));\n";
  s += "    if (!ap) {\n      #pragma omp atomic write\n      failed = 1;\n    }\n";
  s += "    for (int64_t pc = 0; pc == 0 || pc < K; pc += KC) {\n";
  s += "      const int64_t kc = K - pc < KC ? K - pc : KC;\n";
  s += "      const int first = pc == 0, last = pc + KC >= K;\n";
  // ---- pack B
  s += "      #pragma omp for schedule(static)\n";
  s += "      for (int64_t p = 0; p < np; ++p) {\n";
  s += "        float* restrict dst = bp + p * kc * 32;\n";
  s += "        const int64_t c0 = p * " + CW + ", w = N - c0 < " + CW + " ? N - c0 : " + CW + ";\n";
  if (gated) {
    s += "        for (int64_t k = 0; k < kc; ++k) {\n          float* restrict dk = dst + k * 32;\n";
    s += "          for (int64_t j = 0; j < w; ++j) {\n";
    s += "            dk[j] = " + ld.load("B", "(pc + k) * N + c0 + j") + ";\n";
    s += "            dk[16 + j] = " + ld.load("B2", "(pc + k) * N + c0 + j") + ";\n          }\n";
    s += "          for (int64_t j = w; j < 16; ++j) dk[j] = dk[16 + j] = 0.0f;\n        }\n";
  } else if (plan.b_trans) {
    s += "        for (int64_t j = 0; j < w; ++j)\n          for (int64_t k = 0; k < kc; ++k) dst[k * 32 + j] = " +
         ld.load("B", "(c0 + j) * K + pc + k") + ";\n";
    s += "        for (int64_t k = 0; k < kc; ++k)\n          for (int64_t j = w; j < 32; ++j) dst[k * 32 + j] = "
         "0.0f;\n";
  } else {
    s += "        for (int64_t k = 0; k < kc; ++k) {\n          float* restrict dk = dst + k * 32;\n";
    s += "          const " + T + "* restrict src = B + (pc + k) * N + c0;\n";
    s += "          for (int64_t j = 0; j < w; ++j) dk[j] = " + ld.load("src", "j") + ";\n";
    s += "          for (int64_t j = w; j < 32; ++j) dk[j] = 0.0f;\n        }\n";
  }
  s += "      }\n";
  // ---- row blocks
  s += "      #pragma omp for schedule(static)\n";
  s += "      for (int64_t item = 0; item < nib * npc; ++item) {\n";
  s += "        if (!ap) continue;\n";
  s += "        const int64_t i0 = (item / npc) * mc, mrows = M - i0 < mc ? M - i0 : mc;\n";
  s += "        const int64_t p_lo = (item % npc) * ppc, p_hi = p_lo + ppc < np ? p_lo + ppc : np;\n";
  s += "        const int64_t nq = fusor_cdiv(mrows, FUSOR_MR);\n";
  s += "        if (p_lo >= p_hi) continue;\n";
  // Pack A with the prologue applied once per element; rows past M are zero.
  s += "        for (int64_t q = 0; q < nq; ++q)\n          for (int64_t r = 0; r < FUSOR_MR; ++r) {\n";
  s += "            const int64_t i = i0 + q * FUSOR_MR + r;\n";
  s += "            float* restrict dst = ap + q * kc * FUSOR_MR + r;\n";
  s += "            if (i >= M) { for (int64_t k = 0; k < kc; ++k) dst[k * FUSOR_MR] = 0.0f; continue; }\n";
  s += "            for (int64_t k = 0; k < kc; ++k) {\n";
  s += "              float v = " + ld.load("A", plan.a_trans ? "(pc + k) * M + i" : "i * K + pc + k") + ";\n";
  s += codegen::render_unary_chain(d, plan.prologue, "v", "", "              ");
  s += "              dst[k * FUSOR_MR] = v;\n            }\n          }\n";
  s += "        for (int64_t p = p_lo; p < p_hi; ++p)\n          for (int64_t q = 0; q < nq; ++q) {\n";
  s += "            fusor_ukr(kc, ap + q * kc * FUSOR_MR, bp + p * kc * 32, tile, 32);\n";
  s += "            const int64_t r0 = i0 + q * FUSOR_MR, c0 = p * " + CW + ";\n";
  s += "            const int64_t rows = M - r0 < FUSOR_MR ? M - r0 : FUSOR_MR, cols = N - c0 < " + CW +
       " ? N - c0 : " + CW + ";\n";
  s += "            for (int64_t r = 0; r < rows; ++r) {\n";
  s += "              const float* restrict t = tile + r * 32;\n";
  s += "              float* restrict o = out + (r0 + r) * N + c0;\n";
  if (gated) {
    s += "              float* restrict sp = part ? part + (r0 + r) * np * 32 + p * 32 : NULL;\n";
    s += "              if (!last) {\n";
    s += "                for (int64_t j = 0; j < 32; ++j) sp[j] = first ? t[j] : sp[j] + t[j];\n";
    s += "                continue;\n              }\n";
    s += "              #pragma omp simd\n";
    s += "              for (int64_t j = 0; j < cols; ++j) {\n";
    s += "                float v = first ? t[j] : t[j] + sp[j];\n";
    s += "                const float u = first ? t[16 + j] : t[16 + j] + sp[16 + j];\n";
    s += codegen::render_gemm_epilogue(d, plan.gate, {}, "", "", "                ");
    s += "                o[j] = v;\n              }\n";
  } else {
    s += "              if (!last) {\n";
    s += "                if (first) for (int64_t j = 0; j < cols; ++j) o[j] = t[j];\n";
    s += "                else for (int64_t j = 0; j < cols; ++j) o[j] += t[j];\n";
    s += "                continue;\n              }\n";
    s += "              #pragma omp simd\n";
    s += "              for (int64_t j = 0; j < cols; ++j) {\n";
    s += "                float v = first ? t[j] : t[j] + o[j];\n";
    s +=
        codegen::render_gemm_epilogue(d, std::nullopt, plan.epilogue, has_bias ? ld.load("bias", "c0 + j") : "",
                                      plan.residual ? ld.load("res", "(r0 + r) * N + c0 + j") : "", "                ");
    s += "                o[j] = v;\n              }\n";
  }
  s += "            }\n          }\n";
  if (plan.reduction) {
    // The block's rows are final once its last K block is merged (all panels are this item's).
    s += "        if (last && npc == 1)\n          for (int64_t i = i0; i < i0 + mrows; ++i) {\n";
    s += "            float* row = out + i * N;\n";
    s += row_norm_simd(*plan.reduction, "row", "row", "N", codegen::float_literal(plan.eps), "", "", "            ");
    s += "          }\n";
  }
  s += "      }\n    }\n";
  if (plan.reduction) {
    s += "    if (npc > 1) {\n      #pragma omp for schedule(static)\n";
    s += "      for (int64_t i = 0; i < M; ++i) {\n        float* row = out + i * N;\n";
    s += row_norm_simd(*plan.reduction, "row", "row", "N", codegen::float_literal(plan.eps), "", "", "        ");
    s += "      }\n    }\n";
  }
  s += "    free(ap);\n  }\n  free(bp);\n";
  if (gated) s += "  free(part);\n";
  s += "  return failed ? 2 : 0;\n";
  return s;
}

} // namespace fusor::x86::simd
