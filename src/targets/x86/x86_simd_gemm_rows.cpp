// Few-row GEMMs through a wide B (Tuning::srows): a decoder's handful of tokens through a
// weight. Each element of B serves only M multiply-adds, so the call is B's trip from memory
// plus M·N·K FMAs, and how B is read decides it. Packed 32 columns at a time (the general
// path), each panel reads 128 bytes per row of B, a new page every row, and a panel's few row
// tiles cannot hide that: on Zen 4 (two threads, 4096 x 4096 B) 8 rows took 4.1-4.4 ms, more
// than 16 rows (3.7). The skinny path (fewer than 8 rows) reads long runs of B's rows but
// reloads them from L1 for every row of A.
//
// Here each thread owns a range of columns and walks K in steps of 8 rows of B, a strip of
// columns at a time (runc: the whole range up to 8 rows, else 1024): the step's block of B is
// loaded into registers once (zmm: 8 x 32 in 16 registers; ymm: 8 x 8 in 8) and serves all M
// rows of A, whose partial sums (M x runc floats, restarting every FUSOR_KSUB steps as the
// tiles' do) go through `part` and are added to `out` per sub-block. A is packed per
// sub-block as [step][row][8] so a row's 8 broadcasts share a line. The rows two steps on are
// prefetched into L2 as the block is loaded.
//
// Emitted kernels against the path each replaces, medians of alternating calls, B 4096 x 4096
// reused (partly in L3) or cold (copies of B in turn), two threads unless said:
// * zmm, Zen 4: reused 3 rows 0.84x the time (skinny), 4 0.70x, 7 0.56x, 8 0.53x, 12 0.57x,
//   15 0.86x; cold 3-4 rows 0.98-1.02x, 8 0.56x, 12 0.63x, 15 0.89x; B of 1-8 MiB in cache
//   0.58-0.91x at 3-12 rows. The lent host's Xeon: cold 3 rows 0.86x, 4 0.79x, 8-13
//   0.64-0.66x; B in its 300 MiB L3 0.65-0.78x at 3-13 rows, but 15 rows 1.02x and 16 rows
//   1.09x (16 threads 1.16x), so from 14 rows (one full 14-row tile of the packed path) the
//   tiles take over. 1 row stays on the skinny path, which reads B at the read rate (the row
//   path 1.10-1.21x; 2 rows 0.64-1.14x, mixed).
// * ymm (the AVX2 lane), Zen 4: reused 7-32 rows 0.48-0.87x; cold 4 rows 0.96x, 8 0.57x, 12
//   0.93x, 16 1.00x; but B of 1-8 MiB in cache 1.1-1.4x, so only B of 16 MiB or more (2048 x
//   2048 at 8 rows 0.75x). The lent host: cold 0.52-0.81x at 4-16 rows (4096^2 and 2048^2); B
//   in its L3 0.76-0.86x at 8-16 rows of 4096^2, 0.93-1.01x of 2048^2, and 24 rows 1.10-1.24x,
//   so 4-15 rows (2-15 since run ba, below).
#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

namespace {

// One 8-row step over the 32 columns at j: B's block into registers (rows past `kr` are zero
// when not `full`), the next step's rows prefetched, then every row of A.
std::string zmm_row_step(bool full, const std::string& I) {
  std::string s = I + "__m512 b0[8], b1[8];\n";
  s += I + "#pragma GCC unroll 8\n" + I + "for (int t = 0; t < 8; ++t) {\n";
  const std::string load0 = "_mm512_maskz_loadu_ps(m0, b + t * N + j)",
                    load1 = "_mm512_maskz_loadu_ps(m1, b + t * N + j + 16)";
  if (full) {
    s += I + "  b0[t] = " + load0 + ";\n" + I + "  b1[t] = " + load1 + ";\n";
    // Prefetching never faults, so the last steps' reach past B is harmless. Two steps ahead
    // and into L2 (row_run_gemm says why).
    s += I + "  _mm_prefetch((const char*)(b + (16 + t) * N + j), _MM_HINT_T1);\n";
    s += I + "  _mm_prefetch((const char*)(b + (16 + t) * N + j + 16), _MM_HINT_T1);\n";
  } else {
    s += I + "  b0[t] = t < kr ? " + load0 + " : _mm512_setzero_ps();\n";
    s += I + "  b1[t] = t < kr ? " + load1 + " : _mm512_setzero_ps();\n";
  }
  s += I + "}\n";
  s += I + "for (int64_t m = 0; m < M; ++m) {\n";
  s += I + "  float* restrict pm = part + m * runp + (j - jc);\n";
  s += I + "  const float* restrict am = as + m * 8;\n";
  s += I + "  __m512 c0 = kb == k0 ? _mm512_setzero_ps() : _mm512_load_ps(pm);\n";
  s += I + "  __m512 c1 = kb == k0 ? _mm512_setzero_ps() : _mm512_load_ps(pm + 16);\n";
  s += I + "  #pragma GCC unroll 8\n" + I + "  for (int t = 0; t < 8; ++t) {\n";
  s += I + "    const __m512 a = _mm512_set1_ps(am[t]);\n";
  s += I + "    c0 = _mm512_fmadd_ps(a, b0[t], c0);\n" + I + "    c1 = _mm512_fmadd_ps(a, b1[t], c1);\n" + I + "  }\n";
  s += I + "  _mm512_store_ps(pm, c0);\n" + I + "  _mm512_store_ps(pm + 16, c1);\n" + I + "}\n";
  return s;
}

// The ymm tile's step over the 8 columns at j (16 registers: B's 8 x 8 block, a row's two
// FMA chains, even and odd k, and their broadcasts); a line of the rows two steps on is
// prefetched into L2 every second group, as the zmm step's are.
std::string ymm_row_step(bool full, const std::string& I) {
  std::string s = I + "__m256 b0[8];\n";
  if (full) {
    s += I + "if (((j - jc) & 15) == 0) {\n" + I + "  #pragma GCC unroll 8\n";
    s += I + "  for (int t = 0; t < 8; ++t) _mm_prefetch((const char*)(b + (16 + t) * N + j), _MM_HINT_T1);\n";
    s += I + "}\n";
  }
  s += I + "#pragma GCC unroll 8\n" + I + "for (int t = 0; t < 8; ++t)\n";
  s += full ? I + "  b0[t] = _mm256_loadu_ps(b + t * N + j);\n"
            : I + "  b0[t] = t < kr ? _mm256_maskload_ps(b + t * N + j, mk) : _mm256_setzero_ps();\n";
  s += I + "for (int64_t m = 0; m < M; ++m) {\n";
  s += I + "  float* restrict pm = part + m * runp + (j - jc);\n";
  s += I + "  const float* restrict am = as + m * 8;\n";
  s += I + "  __m256 c0 = kb == k0 ? _mm256_setzero_ps() : _mm256_load_ps(pm), c1 = _mm256_setzero_ps();\n";
  s += I + "  #pragma GCC unroll 4\n" + I + "  for (int t = 0; t < 8; t += 2) {\n";
  s += I + "    c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(am + t), b0[t], c0);\n";
  s += I + "    c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(am + t + 1), b0[t + 1], c1);\n" + I + "  }\n";
  s += I + "  _mm256_store_ps(pm, _mm256_add_ps(c0, c1));\n" + I + "}\n";
  return s;
}

} // namespace

// Tuning::crows: from 14 rows the packed path's full tiles win while B stays in cache, but
// where B comes from memory at every call the row path still reads it faster. Medians of
// alternating calls, 4096 x 4096 B, row path / packed path time:
// * cold (copies of B in turn, past the last-level cache): Zen 4, two threads, 14 rows 0.82x,
//   16 0.84x, 20 0.79x, 24 0.92x, 28 1.05x, 32 1.38x; the lent host's Xeon, two threads,
//   14-24 rows 0.70-0.80x, 28 0.92x; 16 threads 0.81-0.85x, 28 1.06x;
// * warm (one B, in the lent host's 300 MiB L3): 14-28 rows 1.12-1.25x on two threads,
//   1.03-1.25x on 16; Zen 4, B 2048 x 2048 in its 32 MiB L3: 16 rows 1.03x, 24 1.10x.
// So rows below crows (25) take it where B is larger than the last-level cache, which it then
// cannot stay in between calls. (A decoder's weights, many of them, stream from memory even
// where one would fit; that case keeps the packed path.) The cache is the process's share
// (host_llc_share_bytes): a guest's sysfs reports its host's whole L3, 300 MiB on the lent
// host's 16 vCPUs, where a reused 64 MiB B was read at the speed of memory; 14-24 rows, 16
// threads, ratio against oneDNN, row path / packed path: 1.04-1.26 / 0.80-0.97 (run bi, three
// alternated passes before and three after the change; 8 and 32 rows unchanged); the two-core
// VM, B of 16-24 MiB, 1.01-1.51 / 0.77-1.18, while B of 8-9 MiB stayed cached there.
//
// Tuning::wrows: with B in cache the packed path loses too where each thread's share of the
// columns is wide: its 14-row tiles and their 4- or 2-row edges pack each 32-column panel for
// few rows. The bench's ratio against oneDNN (B reused; bench/results/*-bf-*-rows.json), row
// path / packed path: 4096 x 4096 on two threads (2048 columns a thread), 14-32 rows, the lent
// host's Xeon 1.13-1.39 / 0.77-0.95 and the development VM (same CPU) 1.15-1.28 / 0.70-0.93; at
// 48-64 rows even (1.00-1.07 / 0.94-1.01). With 1024 columns a thread (N = 2048) 24 and 32 rows
// 1.04-1.13 / 0.88-0.99, with 512 (N = 1024) 24 rows 1.05 / 1.07-1.10; on the lent host's 16
// threads with 256 columns a thread (N = 4096) the packed path won at 14-64 rows (1.01-1.34 /
// 0.72-1.30), with 1024 (N = 16384) the row path 1.15-1.30 / 0.70-0.96. So rows below wrows
// (33) take it where a thread has at least wcols (1024) columns.
std::string row_run_gemm(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning) {
  // The ymm tile's packed path wins while B stays in cache (4-12 rows, B of 1-8 MiB: the row
  // path 1.1-1.4x the time on Zen 4), so it streams B from 16 MiB up.
  std::string rows = "M < " + std::to_string(tuning.srows);
  if (tuning.crows > tuning.srows && tuning.llc > 0)
    rows += " || (M < " + std::to_string(tuning.crows) + " && 4.0 * (double)K * N > " +
            std::to_string(1024LL * tuning.llc) + ".0)";
  if (tuning.wrows > tuning.srows)
    rows +=
        " || (M < " + std::to_string(tuning.wrows) + " && N >= (int64_t)" + std::to_string(tuning.wcols) + " * wnt)";
  if (rows.find("||") != std::string::npos) rows = "(" + rows + ")";
  // From 2 rows: with the strips above, 2 rows through a cold 4096 x 4096 B took 0.85-0.92x the
  // skinny path's time (zmm; ymm 0.91x, 3 rows 0.88x), B of 4 MiB in cache 1.03x; at one row
  // the two are even, and the skinny path keeps it.
  std::string s;
  if (tuning.wrows > tuning.srows) s += "  int wnt = 1;\n#ifdef _OPENMP\n  wnt = omp_get_max_threads();\n#endif\n";
  s += "  if (M >= 2 && " + rows + " && !direct" + (tuning.avx2 ? " && (double)K * N >= 4194304.0" : "") +
       ") {\n    int sfail = 0;\n";
  s += thread_columns_head(32);
  // The strip of columns a pass over K walks (runc): each row of B is read in runs of that
  // length, and longer runs read faster (512 columns took 1.26x the time of 1024). With 8 rows
  // or fewer it is as many columns as keep the partial sums within 64 KiB, at most the
  // thread's range (2048 columns of 4096 x 4096 on two threads); with more rows 1024, as wider
  // strips' partial sums left L1 (12 rows at 1344: 1.10x, 16 rows at 2048: 1.45x). The steps'
  // prefetches of B go two steps ahead into L2: into L1 one step ahead, a strip's worth of
  // lines (32 KiB at 1024 columns) crowded out the partial sums. Both together, new/old time
  // on Zen 4, B cold: zmm 3-8 rows 0.76-0.90x (8 rows with the threads far apart 1.00x),
  // 12-16 rows 0.98-0.99x; ymm 4 and 8 rows 0.89x and 0.85x.
  // part rows runc + 16 floats apart: 4 KiB apart they would share L1 sets with B's rows.
  s += "      int64_t runc = " +
       (tuning.runc > 0 ? std::to_string(tuning.runc) : std::string("M <= 8 ? 16384 / M / 32 * 32 : 1024")) + ";\n";
  s += "      if (runc > fusor_cdiv(j1 - j0, 32) * 32) runc = fusor_cdiv(j1 - j0, 32) * 32;\n";
  s += "      const int64_t runp = runc + 16;\n";
  s += "      float* restrict part = (float*)fusor_scratch(1, sizeof(float) * (size_t)(M * runp));\n";
  // A's sub-block: FUSOR_KSUB rows of K at most (with ksub=0 that is all of K).
  s += "      const int64_t kspan = K < FUSOR_KSUB ? K : FUSOR_KSUB;\n";
  s += "      float* restrict ap = (float*)fusor_scratch(2, sizeof(float) * (size_t)(M * (kspan + 8)));\n";
  s += "      if (!part || !ap) {\n        #pragma omp atomic write\n        sfail = 1;\n      }\n";
  s += "      for (int64_t k0 = 0; part && ap && k0 < K; k0 += FUSOR_KSUB) {\n";
  s += "        const int64_t k1 = K - k0 > FUSOR_KSUB ? k0 + FUSOR_KSUB : K;\n";
  s += "        for (int64_t q = 0; q * 8 < k1 - k0; ++q)\n          for (int64_t m = 0; m < M; ++m)\n";
  s += "            for (int64_t t = 0; t < 8; ++t)\n";
  s += "              ap[(q * M + m) * 8 + t] = k0 + q * 8 + t < k1 ? A[m * K + k0 + q * 8 + t] : 0.0f;\n";
  s += "        for (int64_t jc = j0; jc < j1; jc += runc) {\n";
  s += "          const int64_t je = j1 - jc > runc ? jc + runc : j1;\n";
  s += "          for (int64_t kb = k0; kb < k1; kb += 8) {\n";
  s += "            const float* restrict b = B + kb * N;\n";
  s += "            const float* restrict as = ap + (kb - k0) * M;\n";
  s += "            const int64_t kr = k1 - kb < 8 ? k1 - kb : 8;\n";
  const std::string I = "                ";
  if (tuning.avx2) {
    s += "            for (int64_t j = jc; j < je; j += 8) {\n";
    s += "              const int64_t w = je - j;\n";
    s += "              if (kr == 8 && w >= 8) {\n" + ymm_row_step(true, I) + "              } else {\n";
    s += "                const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(w < 8 ? w : 8)), "
         "_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));\n";
    s += ymm_row_step(false, I) + "              }\n";
  } else {
    s += "            for (int64_t j = jc; j < je; j += 32) {\n";
    s += "              const int64_t w = je - j;\n";
    s += "              const __mmask16 m0 = w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1u);\n";
    s += "              const __mmask16 m1 = w >= 32 ? (__mmask16)0xFFFF : w <= 16 ? (__mmask16)0 : "
         "(__mmask16)((1u << (w - 16)) - 1u);\n";
    s += "              if (kr == 8) {\n" + zmm_row_step(true, I) + "              } else {\n" +
         zmm_row_step(false, I) + "              }\n";
  }
  s += "            }\n          }\n";
  s += "          for (int64_t m = 0; m < M; ++m) {\n";
  s += "            float* restrict o = out + m * N;\n            const float* restrict pm = part + m * runp - "
       "jc;\n";
  s += "            #pragma omp simd\n";
  s += "            for (int64_t j = jc; j < je; ++j) o[j] = (k0 == 0 ? 0.0f : o[j]) + pm[j];\n          }\n";
  s += "        }\n      }\n";
  return s + thread_columns_tail(plan, ld);
}

} // namespace fusor::x86::simd
