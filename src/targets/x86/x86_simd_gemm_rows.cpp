// Few-row GEMMs through a wide B on the zmm tile (Tuning::srows): a decoder's handful of
// tokens through a weight. Each element of B serves only M multiply-adds, so the call is B's
// trip from memory plus M·N·K FMAs, and how B is read decides it. Packed 32 columns at a time
// (the general path), each panel reads 128 bytes per row of B, a new page every row, and a
// panel's few row tiles cannot hide that: on Zen 4 (two threads, 4096 x 4096 B) 8 rows took
// 4.1-4.4 ms, more than 16 rows (3.7). The skinny path (fewer than 4 rows here) reads long
// runs of B's rows but reloads them from L1 for every row of A.
//
// Here each thread owns a range of columns and walks K in steps of 8 rows of B, 1024 columns
// (4 KiB of each row) at a time: for every 32 columns the step's 8 x 32 block of B is loaded
// into 16 registers once and serves all M rows of A, whose partial sums (M x 1024 floats,
// restarting every FUSOR_KSUB steps as the tiles' do) go through L1/L2 `part` and are added to
// `out` per sub-block. A is packed per sub-block as [step][row][8] so a row's 8 broadcasts
// share a line. The next step's rows are prefetched as the block is loaded. Emitted kernel
// against the packed path, two threads, 4096 x 4096 B, this harness's medians: Zen 4 4 rows
// 0.70x the time, 7 0.56x (against the skinny path), 8 0.53x, 12 0.57x; the lent host's Xeon
// (B rotated through memory or reused from its L3; 16 and 2 threads) 0.52-0.78x at 4-12 rows.
// At 15 rows it lost with B in that L3 (1.06-1.15x), so from 14 rows, one full register tile
// of the packed path, the tiles take over. Below 4 rows it gains little (2-3 rows 0.94x) and
// loses at 1 row (1.10x), where the skinny path reads B at the read rate, so those keep it.
#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

namespace {

// One 8-row step over the 32 columns at j: B's block into registers (rows past `kr` are zero
// when not `full`), the next step's rows prefetched, then every row of A.
std::string row_step(bool full, const std::string& I) {
  std::string s = I + "__m512 b0[8], b1[8];\n";
  s += I + "#pragma GCC unroll 8\n" + I + "for (int t = 0; t < 8; ++t) {\n";
  const std::string load0 = "_mm512_maskz_loadu_ps(m0, b + t * N + j)",
                    load1 = "_mm512_maskz_loadu_ps(m1, b + t * N + j + 16)";
  if (full) {
    s += I + "  b0[t] = " + load0 + ";\n" + I + "  b1[t] = " + load1 + ";\n";
    // Prefetching never faults, so the last step's reach past B is harmless.
    s += I + "  _mm_prefetch((const char*)(b + (8 + t) * N + j), _MM_HINT_T0);\n";
    s += I + "  _mm_prefetch((const char*)(b + (8 + t) * N + j + 16), _MM_HINT_T0);\n";
  } else {
    s += I + "  b0[t] = t < kr ? " + load0 + " : _mm512_setzero_ps();\n";
    s += I + "  b1[t] = t < kr ? " + load1 + " : _mm512_setzero_ps();\n";
  }
  s += I + "}\n";
  s += I + "for (int64_t m = 0; m < M; ++m) {\n";
  s += I + "  float* restrict pm = part + m * FUSOR_RUNP + (j - jc);\n";
  s += I + "  const float* restrict am = as + m * 8;\n";
  s += I + "  __m512 c0 = kb == k0 ? _mm512_setzero_ps() : _mm512_load_ps(pm);\n";
  s += I + "  __m512 c1 = kb == k0 ? _mm512_setzero_ps() : _mm512_load_ps(pm + 16);\n";
  s += I + "  #pragma GCC unroll 8\n" + I + "  for (int t = 0; t < 8; ++t) {\n";
  s += I + "    const __m512 a = _mm512_set1_ps(am[t]);\n";
  s += I + "    c0 = _mm512_fmadd_ps(a, b0[t], c0);\n" + I + "    c1 = _mm512_fmadd_ps(a, b1[t], c1);\n" + I + "  }\n";
  s += I + "  _mm512_store_ps(pm, c0);\n" + I + "  _mm512_store_ps(pm + 16, c1);\n" + I + "}\n";
  return s;
}

} // namespace

std::string row_run_gemm(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning) {
  std::string s = "  if (M >= 4 && M < " + std::to_string(tuning.srows) + " && !direct) {\n    int sfail = 0;\n";
  // part rows 1024 + 16 floats apart: 4 KiB apart they would share L1 sets with B's rows.
  s += "    enum { FUSOR_RUNC = 1024, FUSOR_RUNP = 1040 };\n";
  s += "    " + omp_parallel("M * N * K") + "\n    {\n";
  s += "      int nt = 1, me = 0;\n#ifdef _OPENMP\n      nt = omp_get_num_threads(), me = omp_get_thread_num();\n"
       "#endif\n";
  s += "      const int64_t per = fusor_cdiv(fusor_cdiv(N, nt), 32) * 32;\n";
  s += "      const int64_t j0 = me * per < N ? me * per : N, j1 = j0 + per < N ? j0 + per : N;\n";
  s += "      float* restrict part = (float*)fusor_scratch(1, sizeof(float) * (size_t)(M * FUSOR_RUNP));\n";
  s += "      float* restrict ap = (float*)fusor_scratch(2, sizeof(float) * (size_t)(M * (FUSOR_KSUB + 8)));\n";
  s += "      if (!part || !ap) {\n        #pragma omp atomic write\n        sfail = 1;\n      }\n";
  s += "      for (int64_t k0 = 0; part && ap && k0 < K; k0 += FUSOR_KSUB) {\n";
  s += "        const int64_t k1 = K - k0 > FUSOR_KSUB ? k0 + FUSOR_KSUB : K;\n";
  s += "        for (int64_t q = 0; q * 8 < k1 - k0; ++q)\n          for (int64_t m = 0; m < M; ++m)\n";
  s += "            for (int64_t t = 0; t < 8; ++t)\n";
  s += "              ap[(q * M + m) * 8 + t] = k0 + q * 8 + t < k1 ? A[m * K + k0 + q * 8 + t] : 0.0f;\n";
  s += "        for (int64_t jc = j0; jc < j1; jc += FUSOR_RUNC) {\n";
  s += "          const int64_t je = j1 - jc > FUSOR_RUNC ? jc + FUSOR_RUNC : j1;\n";
  s += "          for (int64_t kb = k0; kb < k1; kb += 8) {\n";
  s += "            const float* restrict b = B + kb * N;\n";
  s += "            const float* restrict as = ap + (kb - k0) * M;\n";
  s += "            const int64_t kr = k1 - kb < 8 ? k1 - kb : 8;\n";
  s += "            for (int64_t j = jc; j < je; j += 32) {\n";
  s += "              const int64_t w = je - j;\n";
  s += "              const __mmask16 m0 = w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1u);\n";
  s += "              const __mmask16 m1 = w >= 32 ? (__mmask16)0xFFFF : w <= 16 ? (__mmask16)0 : "
       "(__mmask16)((1u << (w - 16)) - 1u);\n";
  s += "              if (kr == 8) {\n" + row_step(true, "                ") + "              } else {\n" +
       row_step(false, "                ") + "              }\n";
  s += "            }\n          }\n";
  s += "          for (int64_t m = 0; m < M; ++m) {\n";
  s += "            float* restrict o = out + m * N;\n            const float* restrict pm = part + m * FUSOR_RUNP - "
       "jc;\n";
  s += "            #pragma omp simd\n";
  s += "            for (int64_t j = jc; j < je; ++j) o[j] = (k0 == 0 ? 0.0f : o[j]) + pm[j];\n          }\n";
  s += "        }\n      }\n";
  return s + thread_columns_tail(plan, ld);
}

} // namespace fusor::x86::simd
