// GEMM-rooted kinds (fused, matmul, gated) for the AVX-512 lane, brgemm-style. Work items
// are (row block, panel chunk), split over threads by columns when B is the larger operand,
// by rows otherwise; threads out of items take panels of others' last K blocks (steal_items).
// Per item and K block (kc):
//   pack A (storage -> f32, layout, prologue) into MR-row panels that stay in L2;
//   for every 4 panels of B: pack them (32 columns each) into a private L2 buffer, then run
//     the MR x 32 register micro-kernel over every panel x A panel (whole panels of f32 B
//     [K, N] are packed by the tiles instead: an item's first panel by its first A panel's
//     tiles, fusor_ukr_pack, and each next one by the previous panel's later tiles, a piece of
//     its rows each, fusor_ukr_copy, so B's reads spread over the FMAs). Inner K
//     blocks leave their partial sums in `out`; the next block's micro-kernel sums from
//     zero (restarting every FUSOR_KSUB steps) and adds them at its end; at the last block
//     bias, epilogue, gate and residual from the op table are applied to the L1 tile (16
//     lanes at a time with masked edges when the chain renders over __m512) and the value is
//     stored once.
//     Row reductions run on the item's finished rows while they are still in L2.
// Narrow GEMMs (N <= 256) read A and B where they lie instead (fusor_ukr_direct); few rows
// through a wider B stream it unpacked: from 2 rows through a register block (row_run_gemm in
// x86_simd_gemm_rows.cpp), one row and the rows below 8 that path declines through
// skinny_gemm; edge panels of any row count run as tiles of 8, 4, 2 and 1 rows, so row blocks
// are multiples of 4 rows.
// Gated regions interleave Wg and Wu per panel ([16 gate columns | 16 up columns]) so one
// micro-kernel call yields both products of the same output columns. The x86_amx lane runs
// this loop nest with its own packing and micro-kernel (Tuning::amx, x86_amx_gemm.cpp), the
// x86_avx2 lane with an AVX2 micro-kernel (f32 B packed by its first tiles too), scalar packing
// otherwise and the float-loop epilogue
// (Tuning::avx2, x86_avx2_gemm.cpp).
#include <functional>

#include "codegen/abi.hpp"
#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

using codegen::c99_simd_dialect;

std::string omp_parallel(const std::string& work, const std::string& rest) {
  return "#pragma omp parallel" + rest + " if (parallel: (double)(" + work + ") >= FUSOR_SERIAL_BELOW)";
}

std::string copying_ukr_params() {
  return "const float* restrict a, const float* restrict b, const float* restrict src, const float* restrict src2, "
         "int64_t lds, float* restrict dst, float* restrict dst2, int64_t n";
}

// The line ends a copied row's runs span: both ends of the first panel's 16 columns, and with
// dst2 those of the second panel's, `cw` columns to the right.
std::vector<std::string> copy_ends(const std::string& cw) { return {"", " + 15", " + " + cw, " + " + cw + " + 15"}; }

namespace {

// Prefetches of both ends of each run of the copied row `row` (an expression in rows of lds).
std::string copy_row_prefetches(const std::vector<CopyRun>& runs, const std::string& cw, const std::string& row,
                                const char* hint, const std::string& I) {
  std::string s;
  const auto ends = copy_ends(cw);
  for (const CopyRun& run : runs)
    for (size_t e = 0; e < ends.size(); ++e)
      s += I + (e < 2 ? "" : "if (cpends > 2) ") + "_mm_prefetch((const char*)(" + run.from + " + " + row + " * lds" +
           ends[e] + "), " + hint + ");\n";
  return s;
}

} // namespace

std::string copy_setup(const std::vector<CopyRun>& runs, const std::string& cw, const std::string& I) {
  // (The first copy comes cpevery steps in, not at once: its row was prefetched by the
  // previous tile's last copies or by the prefetches below, which need the time.)
  // When the copies come closer than every 8 steps (a panel with few tiles copies many rows
  // each), kCopyAhead copies ahead is too near for rows from memory, and further ahead in L1
  // they would be evicted (the rows share few sets): rows of a wide B (kWideB) are also
  // prefetched to L2 at least 32 steps ahead (cpl2 copies).
  std::string s = I + "const int64_t cpevery = n > 0 && kc / n > 0 ? kc / n : 1;\n" + I +
                  "const int64_t cpl2 = cpevery < 8 && lds >= " + std::to_string(kWideB) +
                  " ? fusor_cdiv(32, cpevery) : " + std::to_string(kCopyAhead) + ";\n" + I +
                  "int64_t cpj = 0, cpcnt = cpevery;\n" + I + "const int cpends = dst2 ? 4 : 2;\n";
  for (int r = 0; r < kCopyAhead; ++r) s += copy_row_prefetches(runs, cw, std::to_string(r), "_MM_HINT_T0", I);
  s += I + "for (int64_t r_ = " + std::to_string(kCopyAhead) + "; r_ < cpl2 && r_ < n; ++r_) {\n" +
       copy_row_prefetches(runs, cw, "r_", "_MM_HINT_T1", I + "  ") + I + "}\n";
  return s;
}

std::string copy_step(const std::vector<CopyRun>& runs, const std::string& cw, bool avx2, const std::string& I) {
  const std::string A = std::to_string(kCopyAhead);
  const auto copy16 = [&](const std::string& to, const std::string& from) {
    return avx2 ? "{ _mm256_storeu_ps(" + to + ", _mm256_loadu_ps(" + from + ")); _mm256_storeu_ps(" + to +
                      " + 8, _mm256_loadu_ps(" + from + " + 8)); }\n"
                : "_mm512_storeu_ps(" + to + ", _mm512_loadu_ps(" + from + "));\n";
  };
  std::string s = I + "if (--cpcnt == 0) {\n" + I + "  cpcnt = cpevery;\n" + I + "  if (cpj < n) {\n";
  for (const CopyRun& run : runs) {
    const std::string from = run.from + " + cpj * lds", to = " + cpj * 32 + " + run.to;
    s += I + "    " + copy16("dst" + to, from);
    s += I + "    if (dst2) " + copy16("dst2" + to, from + " + " + cw);
    // (Both ends of each run: a run off a cache line spans two.)
    s += copy_row_prefetches({run}, cw, "(cpj + " + A + ")", "_MM_HINT_T0", I + "    ");
    s += I + "    if (cpl2 > " + A + ") {\n" +
         copy_row_prefetches({run}, cw, "(cpj + cpl2)", "_MM_HINT_T1", I + "      ") + I + "    }\n";
  }
  return s + I + "    ++cpj;\n" + I + "  }\n" + I + "}\n";
}

std::string packing_prefetches(const std::vector<std::string>& rows, int ahead, const std::string& I) {
  std::string s;
  if (ahead <= 0) return s;
  for (const std::string& row : rows)
    for (const char* end : {"", " + 15"})
      s += I + "_mm_prefetch((const char*)(" + row + " + " + std::to_string(ahead) + " * ldb" + end +
           "), _MM_HINT_T0);\n";
  return s;
}

namespace {

// A zmm register tile of `rows` rows as function `name(kc, <params>, c, ldc, cin, ldin)`: `vecs`
// (2, or 1 for a 16-column half tile) x rows accumulators over kc steps of `step_head` (loads b0
// and, for two, b1: B's 32 columns at k) and row r's FMAs with A's value `a_at(r)`, then
// `step_tail`; c = cin + the products (cin NULL: none; it may be c). The accumulators start from
// zero every FUSOR_KSUB steps and are added to cin (the first time) or to c (after): the sum
// over K is three-level (sub-blocks, K blocks, the running sum), so its rounding error grows
// with the sub-block's length, not the K block's or K's.
std::string avx512_tile(int rows, const std::string& name, const std::string& params, const std::string& setup,
                        const std::string& step_head, const std::function<std::string(int)>& a_at,
                        const std::string& step_tail, int vecs = 2) {
  // Row r's statement `each(R, "0")`, then for two vectors `each(R, "1")` on the same line.
  const auto per_vec = [vecs](int r, const std::function<std::string(const std::string&, const std::string&)>& each) {
    const std::string R = std::to_string(r);
    std::string t = each(R, "0");
    if (vecs == 2) t += " " + each(R, "1");
    return t;
  };
  std::string s =
      "static void " + name + "(int64_t kc, " + params + ", float* c, int64_t ldc, const float* cin, int64_t ldin) {\n";
  for (int r = 0; r < rows; ++r)
    s += "  " +
         per_vec(r, [](const std::string& R,
                       const std::string& v) { return "__m512 c" + R + "_" + v + " = _mm512_setzero_ps();"; }) +
         "\n";
  const std::string sub = "FUSOR_KSUB";
  s += setup + "  for (int64_t k0 = 0;; k0 += " + sub + ") {\n";
  s += "    const int64_t k1 = kc - k0 > " + sub + " ? k0 + " + sub + " : kc;\n";
  s += "    #pragma GCC unroll 4\n    for (int64_t k = k0; k < k1; ++k) {\n" + step_head;
  for (int r = 0; r < rows; ++r)
    s += "      { const __m512 av = _mm512_set1_ps(" + a_at(r) + "); " +
         per_vec(r,
                 [](const std::string& R, const std::string& v) {
                   return "c" + R + "_" + v + " = _mm512_fmadd_ps(av, b" + v + ", c" + R + "_" + v + ");";
                 }) +
         " }\n";
  s += step_tail + "    }\n";
  // The sums so far (cin the first time, then c; NULL: none) plus the accumulators, to c.
  s += "    const float* from = k0 == 0 ? cin : c;\n    const int64_t ldf = k0 == 0 ? ldin : ldc;\n";
  s += "    if (from) {\n";
  for (int r = 0; r < rows; ++r)
    s += "      " +
         per_vec(r,
                 [](const std::string& R, const std::string& v) {
                   return "c" + R + "_" + v + " = _mm512_add_ps(c" + R + "_" + v + ", _mm512_loadu_ps(from + " + R +
                          " * ldf" + (v == "1" ? " + 16" : "") + "));";
                 }) +
         "\n";
  s += "    }\n";
  for (int r = 0; r < rows; ++r)
    s += "    " +
         per_vec(r,
                 [](const std::string& R, const std::string& v) {
                   return "_mm512_storeu_ps(c + " + R + " * ldc" + (v == "1" ? " + 16" : "") + ", c" + R + "_" + v +
                          ");";
                 }) +
         "\n";
  s += "    if (k1 == kc) break;\n";
  for (int r = 0; r < rows; ++r)
    s += "    " +
         per_vec(r, [](const std::string& R,
                       const std::string& v) { return "c" + R + "_" + v + " = _mm512_setzero_ps();"; }) +
         "\n";
  return s + "  }\n}\n\n";
}

// A packed [kc][mr] at step k: `ak` (row r's value is ak[r]), 16 steps ahead prefetched.
std::string packed_a_step(int mr) {
  const std::string MR = std::to_string(mr);
  return "    const float* restrict ak = a + k * " + MR + ";\n    _mm_prefetch((const char*)(ak + 16 * " + MR +
         "), _MM_HINT_T0);\n";
}
std::string packed_a_at(int r) { return "ak[" + std::to_string(r) + "]"; }

// fusor_ukr's tile of `rows` rows, A packed [kc][mr] (rows < mr: the first rows of a panel,
// from a + r), B packed [kc][32] (`vecs` 1: its first 16 columns only).
std::string avx512_packed_ukr(int rows, int mr, const std::string& name, int vecs = 2) {
  const std::string b =
      vecs == 2 ? "    const __m512 b0 = _mm512_loadu_ps(b + k * 32), b1 = _mm512_loadu_ps(b + k * 32 + 16);\n"
                : "    const __m512 b0 = _mm512_loadu_ps(b + k * 32);\n";
  return avx512_tile(rows, name, "const float* restrict a, const float* restrict b", "", b + packed_a_step(mr),
                     packed_a_at, "", vecs);
}

// fusor_ukr's full tile with B read from its storage instead of a packed panel (f32 [K, N],
// rows ldb apart; b0 from b, b1 from b2: 16 columns to the right, or the gated up projection's
// columns) and stored to the packed panel bp as it is used. The first A panel of a panel block
// packs B for the others, so B's packing runs between FMAs instead of before them, and a
// packed panel is written once while it is hot. B's rows are prefetched `ahead` rows early,
// both ends of both 64-byte runs (an unaligned run spans two lines).
std::string avx512_packing_ukr(int mr, int ahead) {
  std::string head = "    const float* restrict bk = b + k * ldb;\n    const float* restrict bk2 = b2 + k * ldb;\n"
                     "    const __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk2);\n"
                     "    _mm512_storeu_ps(bp + k * 32, b0);\n    _mm512_storeu_ps(bp + k * 32 + 16, b1);\n" +
                     packed_a_step(mr);
  head += packing_prefetches({"bk", "bk2"}, ahead, "    ");
  return avx512_tile(mr, "fusor_ukr_pack",
                     "const float* restrict a, const float* restrict b, const float* restrict b2, int64_t ldb, "
                     "float* restrict bp",
                     "", head, packed_a_at, "");
}

// fusor_ukr_copy's zmm tile (x86_simd_common.hpp): the two 16-column runs of each copied row
// from src and src2.
std::string avx512_copying_ukr(int mr, int cw) {
  const std::vector<CopyRun> runs{{"src", "0"}, {"src2", "16"}};
  const std::string CW = std::to_string(cw);
  return avx512_tile(mr, "fusor_ukr_copy", copying_ukr_params(), copy_setup(runs, CW, "  "),
                     "    const __m512 b0 = _mm512_loadu_ps(b + k * 32), b1 = _mm512_loadu_ps(b + k * 32 + 16);\n" +
                         packed_a_step(mr) + copy_step(runs, CW, false, "    "),
                     packed_a_at, "");
}

// fusor_ukr_direct's tile of `rows` rows. The rows' addresses are three bases five rows apart
// plus 0, lda, 2 lda, 3 lda, 4 lda in bytes (x86 addressing's base + index * scale), so the
// fourteen A streams need five registers, not fourteen.
std::string avx512_direct_ukr(int rows, const std::string& name) {
  std::string setup = "  const int64_t s1 = lda * 4, s3 = 3 * s1;\n  (void)s1, (void)s3;\n", tail;
  for (int base = 0; base < rows; base += 5) {
    const std::string B = std::to_string(base);
    setup += "  const char* p" + B + " = (const char*)(a + " + B + " * lda);\n";
    tail += "    p" + B + " += 4;\n";
  }
  static const char* const kOffset[] = {"0", "s1", "2 * s1", "s3", "4 * s1"};
  return avx512_tile(
      rows, name, "const float* restrict a, int64_t lda, const float* restrict b, int64_t ldb", setup,
      "    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);\n    b += ldb;\n",
      [](int r) { return "*(const float*)(p" + std::to_string(r / 5 * 5) + " + " + kOffset[r % 5] + ")"; }, tail);
}

} // namespace

std::string ksub_define(int ksub) {
  return "#define FUSOR_KSUB " + (ksub > 0 ? std::to_string(ksub) + "LL" : std::string("(1LL << 62)")) + "\n";
}

std::string micro_kernel_source(int mr, int ksub) {
  return "#define FUSOR_MR " + std::to_string(mr) + "\n" + ksub_define(ksub) + avx512_packed_ukr(mr, mr, "fusor_ukr") +
         transpose16_source();
}

std::string half_micro_kernel_source(int mr) { return avx512_packed_ukr(mr, mr, "fusor_ukr16", 1); }

namespace {

// `dispatch(rows, kc, <a, [lda,] b, [ldb,]> c, ldc)`: rows <= FUSOR_MR (direct: any) of the tile
// as calls of `full` (MR rows) and of `piece`N for N in 8, 4, 2, 1 below mr; `row_a` is the
// address of row r's A.
std::string rows_dispatch(int mr, const std::string& dispatch, const std::string& a_params, const std::string& b_params,
                          const std::string& a_args, const std::string& b_args, const std::string& full,
                          const std::string& piece, const std::string& row_a) {
  std::string s = "static void " + dispatch + "(int64_t rows, int64_t kc, " + a_params + ", " + b_params +
                  ", float* c, int64_t ldc) {\n";
  s += "  for (int64_t r = 0; r < rows;) {\n    const int64_t left = rows - r;\n";
  const auto call = [&](const std::string& fn, const std::string& n) {
    return " {\n      " + fn + "(kc, " + row_a + ", " + a_args + b_args +
           ", c + r * ldc, ldc, NULL, 0);\n      r += " + n + ";\n    }";
  };
  s += "    if (left >= FUSOR_MR)" + call(full, "FUSOR_MR");
  for (int n : {8, 4, 2, 1})
    if (n < mr)
      s += " else if (left >= " + std::to_string(n) + ")" + call(piece + std::to_string(n), std::to_string(n));
  return s + "\n  }\n}\n\n";
}

} // namespace

std::string edge_tiles_source(int mr, bool avx2, bool in_place, int pack_ahead, int copy_cw) {
  std::string s = pack_ahead < 0 ? "" : (avx2 ? avx2_packing_ukr(mr, pack_ahead) : avx512_packing_ukr(mr, pack_ahead));
  if (copy_cw > 0) s += avx2 ? avx2_copying_ukr(mr, copy_cw) : avx512_copying_ukr(mr, copy_cw);
  for (int n : {8, 4, 2, 1})
    if (n < mr)
      s += avx2 ? avx2_packed_ukr(n, mr, "fusor_ukr" + std::to_string(n))
                : avx512_packed_ukr(n, mr, "fusor_ukr" + std::to_string(n));
  s += rows_dispatch(mr, "fusor_ukr_packed_rows", "const float* a", "const float* b", "", "b", "fusor_ukr", "fusor_ukr",
                     "a + r");
  if (!in_place) return s;
  const auto direct = [avx2](int rows, const std::string& name) {
    return avx2 ? avx2_direct_ukr(rows, name) : avx512_direct_ukr(rows, name);
  };
  s += direct(mr, "fusor_ukr_direct");
  for (int n : {8, 4, 2, 1})
    if (n < mr) s += direct(n, "fusor_ukr_direct" + std::to_string(n));
  return s + rows_dispatch(mr, "fusor_ukr_direct_rows", "const float* a, int64_t lda", "const float* b, int64_t ldb",
                           "lda, ", "b, ldb", "fusor_ukr_direct", "fusor_ukr_direct", "a + r * lda");
}

// A loop normalising rows [lo, hi) of `out` with the plan's row reduction.
std::string reduce_rows(const GemmPlan& plan, const std::string& lo, const std::string& hi, const std::string& I) {
  return I + "for (int64_t i = " + lo + "; i < " + hi + "; ++i) {\n" + I + "  float* row = out + i * N;\n" +
         row_norm_simd(*plan.reduction, "row", "row", "N", codegen::float_literal(plan.eps), "", "", I + "  ") + I +
         "}\n";
}

// The start of a streaming path's parallel region: each thread's range of columns [j0, j1),
// `align` columns a unit.
std::string thread_columns_head(int align) {
  const std::string a = std::to_string(align);
  std::string s = "    " + omp_parallel("M * N * K") + "\n    {\n";
  s += "      int nt = 1, me = 0;\n#ifdef _OPENMP\n      nt = omp_get_num_threads(), me = omp_get_thread_num();\n"
       "#endif\n";
  s += "      const int64_t per = fusor_cdiv(fusor_cdiv(N, nt), " + a + ") * " + a + ";\n";
  return s + "      const int64_t j0 = me * per < N ? me * per : N, j1 = j0 + per < N ? j0 + per : N;\n";
}

// The end of a streaming path: the epilogue from the op table on the thread's columns [j0, j1)
// (K = 0: the sums are zero), the rows' reduction after a barrier, and the return.
std::string thread_columns_tail(const GemmPlan& plan, const StorageLoad& ld) {
  const auto& d = c99_simd_dialect();
  std::string s;
  const bool has_bias = std::find(plan.epilogue.begin(), plan.epilogue.end(), Op::bias) != plan.epilogue.end();
  s += "      for (int64_t m = 0; m < M; ++m) {\n        float* restrict o = out + m * N;\n";
  s += "        #pragma omp simd\n        for (int64_t j = j0; j < j1; ++j) {\n";
  s += "          float v = K > 0 ? o[j] : 0.0f;\n";
  s += codegen::render_gemm_epilogue(d, std::nullopt, plan.epilogue, has_bias ? ld.load("bias", "j") : "",
                                     plan.residual ? ld.load("res", "m * N + j") : "", "          ");
  s += "          o[j] = v;\n        }\n      }\n";
  if (plan.reduction) {
    s += "      #pragma omp barrier\n      #pragma omp for schedule(static)\n" + reduce_rows(plan, "0", "M", "      ");
  }
  return s + "    }\n    return sfail ? 2 : 0;\n  }\n";
}

namespace {

// Fewer than 8 rows (a decoder's few tokens) and N > 256: B is streamed, not packed. A GEMM of so few rows
// reads each element of B once, so its time is B's trip from memory; packed 32 columns at a
// time, B's rows are read 512 bytes per 4 KiB page and the packing is a second pass. Here B
// is walked in steps of 8 rows: for each 512-column chunk and row of A, 8 FMAs per output into
// a partial row (in L1), so B streams in 8 sequential rows. Against the packed path
// (development VM, 4096 x 4096 B): 2.5x faster at M = 1, 1.45x at 4, 1.33x at 6 and 7, 0.95x
// at 8; at N = 256 the in-place tile is faster (M = 1: 0.8x here).
//
// Which rows of B a thread reads (Tuning::ksplit): with the columns split, each thread reads
// its share of every row (at 16 threads 1 KiB of a 16 KiB row), the threads' reads interleaved
// through memory; with K split, each thread reads whole rows, one contiguous run of B, into
// partial rows of its own (M x N, shared), which the threads sum column range by column range
// after a barrier, in thread order. Emitted kernels, bias + GELU, 4096 x 4096 B (two copies in
// turn), K split / columns split: the lent host's Xeon at 16 threads 0.93x (1 row), 0.86x
// (2 rows), 0.82x (3 rows, ymm); at two threads 0.98-1.01x; Zen 4 (two threads) 0.92-1.00x.
// Either way each sub-block of FUSOR_KSUB rows sums into `part` before it is added to the
// running sum: as the tiles' sums, three levels (pairs, sub-blocks, the running sum).
std::string skinny_gemm(const GemmPlan& plan, const StorageLoad& ld, bool ksplit) {
  std::string s = "  if (M < 8 && !direct) {\n    int sfail = 0;\n";
  if (ksplit) {
    s += "    int ntm = 1;\n#ifdef _OPENMP\n    ntm = omp_get_max_threads();\n#endif\n";
    s += "    float* restrict kpart = (float*)fusor_scratch(3, sizeof(float) * (size_t)ntm * (size_t)(M * N));\n";
    s += "    if (!kpart) return 2;\n";
  }
  s += thread_columns_head(16);
  // Column j's index in a partial row, and the rows' width.
  const std::string at = ksplit ? "j" : "j - j0", width = ksplit ? "N" : "per";
  s += "      float* restrict part = (float*)fusor_scratch(1, sizeof(float) * (size_t)(M * " + width + "));\n";
  s += "      if (!part) {\n        #pragma omp atomic write\n        sfail = 1;\n      }\n";
  if (ksplit) {
    s += "      const int64_t kper = fusor_cdiv(fusor_cdiv(K, nt), 8) * 8;\n";
    s += "      const int64_t ka = me * kper < K ? me * kper : K, kz = ka + kper < K ? ka + kper : K;\n";
    s += "      float* restrict run = kpart + (size_t)me * (size_t)(M * N);\n";
    s += "      if (ka >= kz) memset(run, 0, sizeof(float) * (size_t)(M * N));\n";
  } else {
    s += "      const int64_t ka = 0, kz = K;\n";
  }
  s += "      for (int64_t k0 = ka; part && k0 < kz; k0 += FUSOR_KSUB) {\n";
  s += "        const int64_t k1 = kz - k0 > FUSOR_KSUB ? k0 + FUSOR_KSUB : kz;\n";
  s += "        for (int64_t kb = k0; kb < k1; kb += 8)\n";
  s += ksplit
           ? "          for (int64_t jc = 0; jc < N; jc += 512) {\n            const int64_t je = jc + 512 < N ? jc + "
             "512 : N;\n"
           : "          for (int64_t jc = j0; jc < j1; jc += 512) {\n            const int64_t je = jc + 512 < j1 ? "
             "jc + 512 : j1;\n";
  s += "            for (int64_t m = 0; m < M; ++m) {\n";
  s += "              float* restrict p = part + m * " + width +
       ";\n              const float* restrict am = A + m * K + kb;\n";
  s += "              if (k1 - kb >= 8) {\n                const float ";
  for (int t = 0; t < 8; ++t)
    s += std::string(t ? ", " : "") + "a" + std::to_string(t) + " = am[" + std::to_string(t) + "]";
  s += ";\n                #pragma omp simd\n                for (int64_t j = jc; j < je; ++j) {\n";
  // The step's eight products summed in pairs, then added to the sub-block's sum.
  const auto prod = [](int t) { return "a" + std::to_string(t) + " * B[(kb + " + std::to_string(t) + ") * N + j]"; };
  for (int t = 0; t < 8; t += 2)
    s += "                  const float s" + std::to_string(t) + " = " + prod(t) + " + " + prod(t + 1) + ";\n";
  s += "                  p[" + at + "] = (kb == k0 ? 0.0f : p[" + at + "]) + ((s0 + s2) + (s4 + s6));\n";
  s += "                }\n              } else\n";
  s += "                for (int64_t t = 0; kb + t < k1; ++t) {\n                  const float at = am[t];\n";
  s += "                  #pragma omp simd\n";
  s += "                  for (int64_t j = jc; j < je; ++j)\n";
  s += "                    p[" + at + "] = (kb + t == k0 ? 0.0f : p[" + at + "]) + at * B[(kb + t) * N + j];\n";
  s += "                }\n";
  s += "            }\n          }\n";
  // The sub-block's sums onto the running sum: the thread's own partial rows (K split) or its
  // columns of `out`.
  s += "        for (int64_t m = 0; m < M; ++m) {\n";
  if (ksplit) {
    s += "          float* restrict r = run + m * N;\n          const float* restrict p = part + m * N;\n";
    s += "          #pragma omp simd\n";
    s += "          for (int64_t j = 0; j < N; ++j) r[j] = (k0 == ka ? 0.0f : r[j]) + p[j];\n        }\n";
  } else {
    s += "          float* restrict o = out + m * N;\n          const float* restrict p = part + m * per;\n";
    s += "          #pragma omp simd\n";
    s += "          for (int64_t j = j0; j < j1; ++j) o[j] = (k0 == 0 ? 0.0f : o[j]) + p[j - j0];\n        }\n";
  }
  s += "      }\n";
  if (ksplit) {
    // Every thread's partial rows are whole: the thread's columns summed over the threads, in
    // thread order, into `out`.
    s += "      #pragma omp barrier\n";
    s += "      for (int64_t m = 0; m < M; ++m) {\n        float* restrict o = out + m * N;\n";
    s += "        #pragma omp simd\n        for (int64_t j = j0; j < j1; ++j) {\n";
    s += "          float v = kpart[m * N + j];\n";
    s += "          for (int t = 1; t < nt; ++t) v += kpart[(size_t)t * (size_t)(M * N) + m * N + j];\n";
    s += "          o[j] = v;\n        }\n      }\n";
  }
  return s + thread_columns_tail(plan, ld);
}

} // namespace

bool gemm_packs_in_tiles(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning) {
  return tuning.bfuse && !tuning.amx && ld.dtype == DType::f32 && !plan.b_trans;
}

bool gemm_copies_next_panel(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning) {
  return gemm_packs_in_tiles(plan, ld, tuning) && tuning.bnext;
}

bool gemm_reads_in_place(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning) {
  return !tuning.amx && ld.dtype == DType::f32 && !plan.a_trans && !plan.b_trans && plan.prologue.empty() &&
         !plan.gate.has_value();
}

std::string transpose16_source() {
  std::string s;
  // 16 x 16 transpose in registers: 32-bit interleaves, 64-bit shuffles within 128-bit
  // lanes, then two rounds of 128-bit lane shuffles; r[c] ends holding column c.
  s += "static inline void fusor_transpose16(__m512* r) {\n  __m512 t[16];\n";
  s += "  for (int i = 0; i < 16; i += 2) {\n";
  s += "    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);\n    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);\n  }\n";
  s += "  for (int i = 0; i < 16; i += 4) {\n";
  s += "    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);\n";
  s += "    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);\n";
  s += "    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);\n";
  s += "    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);\n  }\n";
  s += "  for (int i = 0; i < 4; ++i) {\n";
  s += "    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);\n";
  s += "    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);\n";
  s += "    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);\n";
  s += "    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);\n  }\n";
  s += "  for (int i = 0; i < 8; ++i) {\n";
  s += "    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);\n";
  s += "    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);\n  }\n}\n\n";
  return s;
}

std::string transpose16_slab(const std::string& row_at, const std::string& rows, const std::vector<Op>& prologue,
                             const std::string& column_at, const std::string& mask, const std::string& indent,
                             bool stream, const StorageLoad* storage) {
  const std::string& I = indent;
  const std::string load = storage && storage->dtype != DType::f32 ? storage->load16("(__mmask16)0xFFFF", row_at)
                                                                   : "_mm512_loadu_ps(" + row_at + ")";
  std::string s = I + "__m512 t_[16];\n" + I + "#pragma GCC unroll 16\n";
  s += I + "for (int r = 0; r < 16; ++r)\n";
  s += I + "  t_[r] = r < " + rows + " ? " + load + " : _mm512_setzero_ps();\n";
  if (!prologue.empty()) {
    s += I + "for (int r = 0; r < " + rows + "; ++r) {\n" + I + "  __m512 v = t_[r];\n";
    s += codegen::render_unary_chain(codegen::c99_avx512_dialect(), prologue, "v", "", I + "  ");
    s += I + "  t_[r] = v;\n" + I + "}\n";
  }
  s += I + "fusor_transpose16(t_);\n" + I + "#pragma GCC unroll 16\n";
  s += I + "for (int c = 0; c < 16; ++c)\n";
  s += I + (stream ? "  _mm512_stream_ps(" + column_at + ", t_[c]);\n"
                   : "  _mm512_mask_storeu_ps(" + column_at + ", " + mask + ", t_[c]);\n");
  return s;
}

namespace {

// Packs the item's A panels for this K block: storage -> f32, the prologue applied once per
// element; rows past M are zero. The packed panel is written in order (k outer): MR
// interleaved strided write streams would each fetch the same lines from L2 again.
std::string pack_a(const GemmPlan& plan, const StorageLoad& ld, bool avx2) {
  const auto& d = c99_simd_dialect();
  const auto& v16 = codegen::c99_avx512_dialect();
  const std::string T = ld.type;
  std::string s;
  const std::string a_index = plan.a_trans ? "(pc + k) * M + i + r" : "(i + r) * K + pc + k";
  s += "        for (int64_t q = 0; q < nq; ++q) {\n";
  s += "          const int64_t i = i0 + q * FUSOR_MR, rows = iend - i < FUSOR_MR ? iend - i : FUSOR_MR;\n";
  s += "          float* restrict dst = ap + q * kc * FUSOR_MR;\n";
  s += "          int64_t k0 = 0;\n";
  // f32 rows of a whole panel go 16 k at a time through a register transpose (a quarter of
  // a shuffle per element, against a load and a store each in the scalar loop).
  const bool vector_prologue =
      std::all_of(plan.prologue.begin(), plan.prologue.end(), [&](Op op) { return codegen::renders_in(v16, op); });
  if (T == "float" && !plan.a_trans && vector_prologue && !avx2) {
    s += "          if (rows == FUSOR_MR)\n            for (; k0 + 16 <= kc; k0 += 16) {\n";
    s += transpose16_slab("A + (i + r) * K + pc + k0", "FUSOR_MR", plan.prologue, "dst + (k0 + c) * FUSOR_MR",
                          "(__mmask16)((1u << FUSOR_MR) - 1u)", "              ");
    s += "            }\n";
  }
  s += "          for (int64_t k = k0; k < kc; ++k) {\n";
  s += "            for (int64_t r = 0; r < rows; ++r) {\n";
  s += "              float v = " + ld.load("A", a_index) + ";\n";
  s += codegen::render_unary_chain(d, plan.prologue, "v", "", "              ");
  s += "              dst[k * FUSOR_MR + r] = v;\n            }\n";
  s += "            for (int64_t r = rows; r < FUSOR_MR; ++r) dst[k * FUSOR_MR + r] = 0.0f;\n";
  s += "          }\n        }\n";
  return s;
}

// Packs panels pb .. pb + pn of B (storage -> f32, layout; columns past N are zero).
// With `in_place`, whole panels are left to be read where they lie when `direct` holds.
std::string pack_b(const GemmPlan& plan, const StorageLoad& ld, bool avx2, bool in_place, int ahead) {
  const std::string T = ld.type;
  // 16 f32 from src to dst, whole vectors.
  const auto copy16 = [avx2](const std::string& dst, const std::string& src) {
    return avx2 ? "_mm256_storeu_ps(" + dst + ", _mm256_loadu_ps(" + src + ")); _mm256_storeu_ps(" + dst +
                      " + 8, _mm256_loadu_ps(" + src + " + 8));"
                : "_mm512_storeu_ps(" + dst + ", _mm512_loadu_ps(" + src + "));";
  };
  const bool gated = plan.gate.has_value();
  const std::string CW = gated ? "16" : "32";
  std::string s;
  if (plan.b_trans) {
    s += "          for (int64_t pp = 0; pp < pn; ++pp) {\n";
    s += "            float* restrict dst = bp + ((pb + pp - p_lo) % NBP) * kc * 32;\n";
    s += "            const int64_t c0 = (pb + pp) * 32, w = N - c0 < 32 ? N - c0 : 32;\n";
    s += "            for (int64_t j = 0; j < w; ++j)\n";
    s += "              for (int64_t k = 0; k < kc; ++k) dst[k * 32 + j] = " + ld.load("B", "(c0 + j) * K + pc + k") +
         ";\n";
    s += "            for (int64_t k = 0; k < kc; ++k)\n";
    s += "              for (int64_t j = w; j < 32; ++j) dst[k * 32 + j] = 0.0f;\n          }\n";
  } else {
    // A [K, N] B is read row by row (k outer), each row's columns of the block in one run. Rows
    // N floats apart land on a new page nearly every row, where the hardware prefetchers start
    // over: the run `ahead` rows ahead is prefetched (Tuning::bpf).
    s += "          for (int64_t k = 0; k < kc; ++k) {\n";
    s += "            const " + T + "* restrict src = B + (pc + k) * N;\n";
    if (gated) s += "            const " + T + "* restrict src2 = B2 + (pc + k) * N;\n";
    if (ahead > 0) {
      const std::string A = std::to_string(ahead);
      s += "            if (k + " + A + " < kc)\n";
      s += "              for (int64_t o = 0; o < pn * " + CW + " * (int64_t)sizeof(" + T + "); o += 64) {\n";
      s += "                _mm_prefetch((const char*)(src + " + A + " * N + pb * " + CW + ") + o, _MM_HINT_T0);\n";
      if (gated)
        s += "                _mm_prefetch((const char*)(src2 + " + A + " * N + pb * " + CW + ") + o, _MM_HINT_T0);\n";
      s += "              }\n";
    }
    s += "            for (int64_t pp = 0; pp < pn; ++pp) {\n";
    s += "              float* restrict dk = bp + ((pb + pp - p_lo) % NBP) * kc * 32 + k * 32;\n";
    s += "              const int64_t c0 = (pb + pp) * " + CW + ", w = N - c0 < " + CW + " ? N - c0 : " + CW + ";\n";
    // Full panels copy whole vectors (f32 spelled out: GCC turns the copy loop into a
    // memcpy call per row); other storage converts with a constant trip count.
    const bool f32 = T == "float";
    if (gated) {
      if (f32)
        s += "              if (w == 16) {\n                " + copy16("dk", "src + c0") + "\n                " +
             copy16("dk + 16", "src2 + c0") + "\n              }\n";
      else {
        s += "              if (w == 16)\n                for (int64_t j = 0; j < 16; ++j) {\n";
        s += "                  dk[j] = " + ld.load("src", "c0 + j") + ";\n";
        s += "                  dk[16 + j] = " + ld.load("src2", "c0 + j") + ";\n                }\n";
      }
      s += "              else {\n                for (int64_t j = 0; j < w; ++j) {\n";
      s += "                  dk[j] = " + ld.load("src", "c0 + j") + ";\n";
      s += "                  dk[16 + j] = " + ld.load("src2", "c0 + j") + ";\n                }\n";
      s += "                for (int64_t j = w; j < 16; ++j) dk[j] = dk[16 + j] = 0.0f;\n              }\n";
    } else {
      if (f32)
        s += std::string("              if (w == 32) {\n") + (in_place ? "                if (!direct)\n" : "") +
             "                {\n                " + copy16("dk", "src + c0") + "\n                " +
             copy16("dk + 16", "src + c0 + 16") + "\n                }\n              }\n";
      else
        s += "              if (w == 32)\n                for (int64_t j = 0; j < 32; ++j) dk[j] = " +
             ld.load("src", "c0 + j") + ";\n";
      s += "              else {\n                for (int64_t j = 0; j < w; ++j) dk[j] = " + ld.load("src", "c0 + j") +
           ";\n";
      s += "                for (int64_t j = w; j < 32; ++j) dk[j] = 0.0f;\n              }\n";
    }
    s += "            }\n          }\n";
  }
  return s;
}

// Emitted: `word` (a tail word, steal_items) read into w, lo (next panel) and hi (past the
// end), then, while panels are left, `count` and a compare-and-swap of w for `next`; after
// it lo >= hi says none were left.
std::string claim_panels(const std::string& word, const std::string& count, const std::string& next,
                         const std::string& I) {
  return I + "uint64_t w = __atomic_load_n(" + word + ", __ATOMIC_ACQUIRE);\n" + I + "int64_t lo, hi;\n" + I +
         "do {\n" + I + "  lo = (int64_t)(w & 0xFFFFF), hi = (int64_t)(w >> 20 & 0xFFFFF);\n" + I +
         "  if (lo >= hi) break;\n" + I + "  " + count + ";\n" + I + "} while (!__atomic_compare_exchange_n(" + word +
         ", &w, " + next + ", 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));\n";
}

// The GEMM's work loop when threads share out the tail (gemm_body). A static split waits for
// its slowest thread, and threads are not equally fast: on the Ice Lake VM the two threads'
// busy time per call differed by 4-15 %, either one slower by turns. Each thread runs its
// static share of the items; in an item's last K block it publishes the block's panels in its
// word of `tail` (item + 1 in bits 40-63, past-the-end panel in 20-39, next panel in 0-19) and
// claims them a few at a time (gemm_body), and a thread out of items takes half of the
// unclaimed panels of the word with the most, packing that item's A block itself. Only last
// K blocks are shared: an earlier block's sums must be done before the next adds to them. A
// thief that finds nothing waits while an owner may still publish. (Words per thread, zeroed
// before the parallel region: no barrier, which cost small GEMMs 2-4 % as a `single`
// allocation.)
std::string steal_items(const Tuning& tuning) {
  std::string s;
  s += "    int me = 0;\n#ifdef _OPENMP\n    me = omp_get_thread_num();\n#endif\n";
  s += "    const int64_t nitems = nib * npc;\n";
  s += "    const int shares = nt <= FUSOR_TAIL_THREADS && np < (1 << 20) && nitems < (1 << 23);\n";
  if (tuning.lag > 0) {
    // (Test knob: thread 0 starts late, so the others must take its panels.)
    s += "#ifdef _OPENMP\n    if (me == 0) {\n";
    s += "      const double until = omp_get_wtime() + " + std::to_string(tuning.lag) + " * 1e-6;\n";
    s += "      while (omp_get_wtime() < until) _mm_pause();\n    }\n#endif\n";
  }
  s += "    int64_t own = me * nitems / nt, held_i0 = -1, held_pc = -1;\n";
  s += "    const int64_t own_end = (me + 1) * nitems / nt, pc_last = K > KC ? (fusor_cdiv(K, KC) - 1) * KC : 0;\n";
  s += "    const int able = ap && bp;\n";
  s += "    int idle = 0;\n";
  s += "    for (;;) {\n";
  s += "      int64_t item, p_lo, p_hi, pc0 = 0;\n";
  s += "      uint64_t* word = NULL;\n";
  s += "      if (able && own < own_end) {\n";
  s += "        item = own++, word = shares ? tail + me : NULL;\n";
  s += "        p_lo = (item / nib) * ppc, p_hi = p_lo + ppc < np ? p_lo + ppc : np;\n";
  s += "      } else {\n";
  s += "        if (!idle) {\n          idle = 1;\n          #pragma omp atomic update\n          finished += 1;\n";
  s += "        }\n        if (!able || !shares) break;\n";
  s += "        int64_t victim = -1, most = 0;\n";
  s += "        for (int64_t v = 0; v < nt; ++v) {\n";
  s += "          const uint64_t w = __atomic_load_n(tail + v, __ATOMIC_ACQUIRE);\n";
  s += "          const int64_t n = (int64_t)(w >> 20 & 0xFFFFF) - (int64_t)(w & 0xFFFFF);\n";
  s += "          if (n > most) most = n, victim = v;\n        }\n";
  s +=
      "        if (victim < 0) {\n          int done;\n          #pragma omp atomic read\n          done = finished;\n";
  s += "          if (done == nt) break;\n          _mm_pause();\n          continue;\n        }\n";
  s += "        int64_t take = 0;\n";
  s += claim_panels("tail + victim", "take = (hi - lo + 1) / 2",
                    "(w & ~(0xFFFFFull << 20)) | (uint64_t)(hi - take) << 20", "        ");
  s += "        if (lo >= hi) continue;\n";
  s += "        item = (int64_t)(w >> 40) - 1, p_lo = hi - take, p_hi = hi, pc0 = pc_last;\n";
  s += "      }\n";
  return s;
}

} // namespace

std::string gemm_body(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning) {
  const auto& d = c99_simd_dialect();
  const std::string T = ld.type;
  const bool gated = plan.gate.has_value();
  const bool has_bias = std::find(plan.epilogue.begin(), plan.epilogue.end(), Op::bias) != plan.epilogue.end();
  const std::string CW = gated ? "16" : "32"; // output columns per packed panel
  const auto& v16 = codegen::c99_avx512_dialect();
  const bool in_place = gemm_reads_in_place(plan, ld, tuning);
  const bool packs_in_tiles = gemm_packs_in_tiles(plan, ld, tuning);
  std::string s;
  s += "  const " + T + "* restrict A = (const " + T + "*)operands[0];\n";
  s += "  const " + T + "* restrict B = (const " + T + "*)operands[1];\n";
  int next = 2;
  if (gated) s += "  const " + T + "* restrict B2 = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  if (has_bias) s += "  const " + T + "* restrict bias = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  if (plan.residual)
    s += "  const " + T + "* restrict res = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  s += "  if (M == 0 || N == 0) return 0;\n";
  const bool amx = tuning.amx;
  // AMX with f32 B [K, N]: B's next panels are packed between the tile products.
  const bool overlap = amx && tuning.overlap != 0 && !plan.b_trans;
  if (amx) s += "  if (!fusor_amx_permit()) return " + std::to_string(codegen::kKernelNoTileState) + ";\n";
  // K blocks of at most `kc`, evenly sized: fewer blocks mean fewer partial-sum round trips
  // through `out`, and a micro-panel streamed from L2 costs the micro-kernel little.
  // AMX blocks are whole 32-k tile steps: only the last one is padded.
  const int kcm = amx ? std::max(32, tuning.kc / 32 * 32) : tuning.kc;
  s += "  const int64_t KCM = " + std::to_string(kcm) + ", MCT = " + std::to_string(tuning.mc) + ";\n";
  s += amx ? "  const int64_t KC = K <= KCM ? (K > 0 ? K : 1) : fusor_cdiv(fusor_cdiv(K, fusor_cdiv(K, KCM)), 32) * "
             "32;\n"
           : "  const int64_t KC = K <= KCM ? (K > 0 ? K : 1) : fusor_cdiv(K, fusor_cdiv(K, KCM));\n";
  s += "  const int64_t np = fusor_cdiv(N, " + CW + ");\n";
  s += "  const int64_t kcap = K < KC ? (K > 0 ? K : 1) : KC;\n";
  // Narrow B (<= 8 panels): A and B are read in place. Packing them costs as much as a few
  // micro-kernel calls, and each packed panel would serve few; rows 1 KiB apart or less keep
  // B's reads prefetchable (wide B read in place measured 1.2-2.5x slower).
  if (in_place) {
    s += "  const int direct = N <= 256;\n";
    if (tuning.srows > 4) s += row_run_gemm(plan, ld, tuning);
    s += skinny_gemm(plan, ld, tuning.ksplit != 0);
  }
  if (gated) {
    // Partial sums of both products when K spans several blocks (out holds only one).
    s += "  float* restrict part = NULL;\n";
    s += "  if (K > KC) {\n    part = (float*)fusor_scratch(0, sizeof(float) * (size_t)M * (size_t)np * 32);\n";
    s += "    if (!part) return 2;\n  }\n";
  }
  // Threads that finish their items early take panels of others' last K blocks (steal_items).
  const bool steals = !amx && !plan.reduction && tuning.steal != 0;
  s += "  int failed = 0;\n";
  if (steals) {
    s += "  enum { FUSOR_TAIL_THREADS = 256 };\n";
    s += "  uint64_t tail[FUSOR_TAIL_THREADS] = {0};\n  int finished = 0;\n";
  }
  s += "  " + omp_parallel("M * N * K") + "\n  {\n";
  s += "    int nt = 1;\n#ifdef _OPENMP\n    nt = omp_get_num_threads();\n#endif\n";
  // Work items are (row block, panel chunk). B is packed by the thread that uses it, a few
  // panels at a time into a private buffer that stays in L2: a shared packed copy of all of
  // B would go to memory and come back once per row block. So each thread should read as
  // little of B as it can: when B is the larger operand (N > M) the panels are split
  // between threads (every thread reads all of the smaller A); otherwise the rows are, in
  // row blocks of about MCT rows (a multiple of MR), a whole number per thread. With B read
  // in place (narrow B) and fewer than seven tiles of rows a thread, the panels are split
  // too: each thread's few rows would end in an edge tile of their own, and both operands
  // sit in L2 anyway (two threads on Ice Lake, bias + residual, 31 alternating rounds:
  // 64 x 64 x 256 0.83-0.85x the time, 64^3 0.85-0.94x, 96 x 64 x 256 0.87x, 128^3 0.93-0.96x,
  // 192^3 0.96x; 256^3 1.05x, so not beyond).
  s += std::string("    const int colsplit = np >= nt && (N > M") +
       (in_place ? " || (direct && M < nt * 7 * FUSOR_MR)" : "") + ");\n";
  // The packed A block (rows x KC floats) is held to 1 MiB so it shares L2 with B's block.
  // (AMX: FUSOR_NSA bf16 parts per element, K padded to 32.)
  s += amx ? "    const int64_t kce = fusor_cdiv(KC, 32) * 32 * FUSOR_NSA / 2;\n" : "    const int64_t kce = KC;\n";
  s += "    const int64_t mct = MCT * kce <= 262144 ? MCT : (262144 / kce > FUSOR_MR ? 262144 / kce : FUSOR_MR);\n";
  s += "    int64_t nib = fusor_cdiv(M, mct);\n";
  s += "    if (!colsplit) nib = fusor_cdiv(nib, nt) * nt;\n";
  // Row blocks of a multiple of 4 rows: edge panels cost their rows (fusor_ukr_packed_rows),
  // so blocks of whole panels would only unbalance the threads (64 rows on two: 42 + 22, not
  // 32 + 32; 1024 rows in four blocks: 532 + 492). AMX blocks stay whole 32-row tiles.
  s += std::string("    const int64_t mq = ") + (amx ? "FUSOR_MR" : "4") + ";\n";
  s += "    const int64_t mc = fusor_cdiv(fusor_cdiv(M, nib), mq) * mq;\n";
  s += "    nib = fusor_cdiv(M, mc);\n";
  // (AMX items handed out as threads ask: isplit chunks of panels per thread.)
  const std::string chunks = "nt * " + std::to_string(tuning.isplit);
  const std::string npc = amx && tuning.dyn && tuning.isplit > 1 ? "(" + chunks + " < np ? " + chunks + " : np)" : "nt";
  s += "    const int64_t npc = colsplit ? " + npc + " : 1, ppc = fusor_cdiv(np, npc);\n";
  // Panels packed together: four rows of 128 contiguous bytes per k keep the reads of B
  // sequential enough for the prefetcher while the block (kc x 128 floats) stays in L2.
  s += "    const int64_t NBP = 4;\n";
  if (amx) {
    s += "    const int64_t kcap32 = fusor_cdiv(kcap, 32) * 32;\n";
    s += "    uint16_t* restrict ap = (uint16_t*)fusor_scratch(1, 2 * FUSOR_NSA * (size_t)mc * (size_t)kcap32);\n";
    // (Two blocks when B's next panels are packed between the tile products of this block's.)
    s += "    const size_t bpn = FUSOR_NSB * (size_t)NBP * (size_t)kcap32 * 32;\n";
    s += std::string("    uint16_t* restrict bp = (uint16_t*)fusor_scratch(2, 2 * bpn") + (overlap ? " * 2" : "") +
         ");\n";
    s += "    unsigned char* restrict rf = (unsigned char*)fusor_scratch(3, (size_t)mc);\n";
    s += "    uint16_t* restrict cf = (uint16_t*)fusor_scratch(4, 4 * (size_t)ppc);\n";
    s += "    if (!rf || !cf) {\n      #pragma omp atomic write\n      failed = 1;\n    }\n";
    s += "    fusor_amx_config();\n";
  } else {
    // (Whole panels: the block's last one is padded to MR rows.)
    s += "    const size_t apn = (size_t)(fusor_cdiv(mc, FUSOR_MR) * FUSOR_MR) * (size_t)kcap;\n";
    s += "    float* restrict ap = (float*)fusor_scratch(1, sizeof(float) * apn);\n";
    s += "    float* restrict bp = (float*)fusor_scratch(2, sizeof(float) * (size_t)NBP * (size_t)kcap * 32);\n";
  }
  s += "    float tile[FUSOR_MR * 32] __attribute__((aligned(64)));\n";
  s += "    if (!ap || !bp) {\n      #pragma omp atomic write\n      failed = 1;\n    }\n";
  if (steals) {
    s += steal_items(tuning);
  } else {
    s += std::string("    #pragma omp for schedule(") + (amx && tuning.dyn ? "dynamic, 1" : "static") + ")\n";
    s += "    for (int64_t item = 0; item < nib * npc; ++item) {\n";
    s += "      if (!ap || !bp) continue;\n";
  }
  s += "      const int64_t i0 = (item % nib) * mc, mrows = M - i0 < mc ? M - i0 : mc, iend = i0 + mrows;\n";
  if (!steals) s += "      const int64_t p_lo = (item / nib) * ppc, p_hi = p_lo + ppc < np ? p_lo + ppc : np;\n";
  s += "      const int64_t nq = fusor_cdiv(mrows, FUSOR_MR);\n";
  s += "      if (p_lo >= p_hi) continue;\n";
  if (amx)
    s += "      if (!rf || !cf) continue;\n      memset(rf, 0, (size_t)mc);\n      memset(cf, 0, 4 * (size_t)ppc);\n";
  s += std::string("      for (int64_t pc = ") + (steals ? "pc0" : "0") + "; pc == 0 || pc < K; pc += KC) {\n";
  s += "        const int64_t kc = K - pc < KC ? K - pc : KC;\n";
  s += "        const int first = pc == 0, last = pc + KC >= K;\n";
  if (amx) s += "        const int64_t kcp = fusor_cdiv(kc, 32) * 32;\n";
  if (amx)
    s += amx_pack_a(plan, ld, "        ");
  else {
    // (A thief's next panels may be of the row block whose A it holds.)
    const std::string held = steals ? "(i0 != held_i0 || pc != held_pc)" : "";
    const std::string cond = in_place ? (steals ? "!direct && " + held : "!direct") : held;
    s += cond.empty() ? pack_a(plan, ld, tuning.avx2)
                      : "        if (" + cond + ") {\n" + pack_a(plan, ld, tuning.avx2) + "        }\n";
    if (steals) s += "        held_i0 = i0, held_pc = pc;\n";
  }
  if (steals) {
    // The owner's last K block: its panels are claimed from its `tail` word, whose far end
    // thieves take: NBP at a time, or half of what is left when that is less, so the last
    // panels stay to be taken when an item has few (16 threads at 512 x 2048 x 768: four
    // each). Claims stay contiguous from p_lo and panels keep their ring slots ((p - p_lo) %
    // NBP), so the next-panel copies hold.
    const std::string word_of = "(uint64_t)(item + 1) << 40 | (uint64_t)p_hi << 20 | (uint64_t)p_lo";
    s += "        if (word && last) __atomic_store_n(word, " + word_of + ", __ATOMIC_RELEASE);\n";
    s += "        for (int64_t pb = p_lo;; pb += NBP) {\n";
    s += "          int64_t pn = 0;\n";
    s += "          if (word && last) {\n";
    s += claim_panels("word", "pn = (hi - lo + 1) / 2 < NBP ? (hi - lo + 1) / 2 : NBP",
                      "(w & ~0xFFFFFull) | (uint64_t)(lo + pn)", "            ");
    s += "            if (lo >= hi) break;\n";
    s += "            pb = lo, p_hi = hi;\n";
    s += "          } else {\n";
    s += "            if (pb >= p_hi) break;\n";
    s += "            pn = p_hi - pb < NBP ? p_hi - pb : NBP;\n";
    s += "          }\n";
  } else {
    s += "        for (int64_t pb = p_lo; pb < p_hi; pb += NBP) {\n";
    s += "          const int64_t pn = p_hi - pb < NBP ? p_hi - pb : NBP;\n";
  }
  if (overlap) {
    // B's panel blocks alternate between two buffers: the first block of a K block is packed
    // alone, each next one between the tile products of the one before.
    const std::string b2 = gated ? "B2" : "NULL";
    s += "          uint16_t* restrict bcur = bp + (((pb - p_lo) / NBP) & 1) * bpn;\n";
    s += "          if (pb == p_lo)\n" + amx_pack_b(plan, ld, "            ");
    s += "          const int64_t pb2 = pb + NBP, pn2 = p_hi - pb2 < NBP ? p_hi - pb2 : NBP;\n";
    s += "          fusor_bpack nx = {B, " + b2 +
         ", bp + (((pb2 - p_lo) / NBP) & 1) * bpn, cf + (pb2 - p_lo) * 2, N, pc, kc, kcp, pb2, pn2, "
         "pb2 < p_hi ? 0 : kcp, 0, 0};\n";
  } else if (amx) {
    s += "          uint16_t* restrict bcur = bp;\n";
    s += amx_pack_b(plan, ld, "          ");
  } else if (packs_in_tiles) {
    // Blocks of whole panels, with a whole first A panel, are packed by that panel's tiles.
    s += "          const int fuse = " + std::string(in_place ? "!direct && " : "") +
         "mrows >= FUSOR_MR && (pb + pn) * " + CW + " <= N;\n";
    // (Narrow B read in place: only a partial last panel is packed.)
    s += "          if (!fuse" + std::string(in_place ? " && (!direct || (pb + pn) * 32 > N)" : "") + ") {\n" +
         pack_b(plan, ld, tuning.avx2, in_place, tuning.bpf) + "          }\n";
  } else {
    s += in_place ? "          if (!direct || (pb + pn) * 32 > N) {\n" +
                        pack_b(plan, ld, tuning.avx2, true, tuning.bpf) + "          }\n"
                  : pack_b(plan, ld, tuning.avx2, false, tuning.bpf);
  }
  // ---- every packed panel x A panel: the micro-kernel, then the merge or the epilogue.
  s += "          for (int64_t p = pb; p < pb + pn; ++p)\n            for (int64_t q = 0; q < nq; ++q) {\n";
  s += "              const int64_t r0 = i0 + q * FUSOR_MR, c0 = p * " + CW + ";\n";
  // (A block need not be whole panels: its last panel's rows end at the block's end.)
  s += "              const int64_t rows = iend - r0 < FUSOR_MR ? iend - r0 : FUSOR_MR, cols = N - c0 < " + CW +
       " ? N - c0 : " + CW + ";\n";
  // Partial sums of inner K blocks live in `acc` (out; for gated, `part`, whose panels are
  // always 32 wide). Whole tiles continue them in registers; edge tiles merge through `tile`.
  if (gated)
    s += "              float* acc = part ? part + r0 * np * 32 + p * 32 : NULL;\n"
         "              const int64_t lacc = np * 32, accw = 32;\n";
  else
    s += "              float* acc = out + r0 * N + c0;\n              const int64_t lacc = N, accw = cols;\n";
  const std::string ukr = overlap ? "fusor_amx_ukr_packing(kcp, ain, kcp * 32, bin, kcp * 32, &nx, "
                          : amx   ? "fusor_amx_ukr(kcp, ain, kcp * 32, bin, kcp * 32, "
                                  : "fusor_ukr(kc, ain, bin, ";
  if (amx)
    s += "              const uint16_t* ain = ap + q * FUSOR_NSA * kcp * 32;\n"
         "              const uint16_t* bin = bcur + (p - pb) * FUSOR_NSB * kcp * 32;\n";
  else
    s += "              const float* ain = ap + q * kc * FUSOR_MR;\n"
         "              const float* bin = bp + ((p - p_lo) % NBP) * kc * 32;\n";
  const bool copies_next = gemm_copies_next_panel(plan, ld, tuning);
  if (copies_next) {
    // The next panels, when whole, are packed by earlier panels' full tiles q >= 1, a piece of
    // their rows each (fusor_ukr_copy), into their slots of bp (a ring of NBP panels); their own
    // first tiles then need not pack them. CPW adjacent panels are copied per visit of a row
    // of B (Tuning::bcopy): the item's first panel copies the next CPW whole; after it each
    // group of CPW is copied by the CPW panels before it, a 1 / CPW share of the rows each, so
    // the slots written are never the ones read (NBP >= 2 CPW).
    const std::string CPW = std::to_string(tuning.bcopy > 0 ? tuning.bcopy : gated ? 2 : 1);
    s += "              const int64_t nf = fuse ? mrows / FUSOR_MR : 0;\n";
    s += "              const int64_t rel = p - p_lo, cg = rel == 0 ? 0 : (rel - 1) / " + CPW +
         " + 1, cpart = rel == 0 ? 0 : (rel - 1) % " + CPW + ";\n";
    s += "              const int64_t crow0 = rel == 0 ? 0 : cpart * kc / " + CPW +
         ", crow1 = rel == 0 ? kc : (cpart + 1) * kc / " + CPW + ";\n";
    s += "              const int64_t t1 = p_lo + 1 + cg * " + CPW + ";\n";
    s += "              const int whole1 = t1 < p_hi && (t1 + 1) * " + CW + " <= N;\n";
    s += "              const int whole2 = " +
         (CPW == "1" ? std::string("0") : "whole1 && t1 + 1 < p_hi && (t1 + 2) * " + CW + " <= N") + ";\n";
    s += "              const int copying = nf > 1 && q > 0 && q < nf && whole1;\n";
    s += "              const int64_t k0n = copying ? crow0 + (q - 1) * (crow1 - crow0) / (nf - 1) : 0;\n";
    s += "              const int64_t kn = copying ? crow0 + q * (crow1 - crow0) / (nf - 1) - k0n : 0;\n";
    s += "              float* restrict bnext = bp + ((t1 - p_lo) % NBP) * kc * 32 + k0n * 32;\n";
    s += "              float* restrict bnext2 = whole2 ? bp + ((t1 + 1 - p_lo) % NBP) * kc * 32 + k0n * 32 : NULL;\n";
    s += "              const float* bnsrc = copying ? B + (pc + k0n) * N + t1 * " + CW + " : B;\n";
    s += "              const float* bnsrc2 = copying ? " +
         std::string(gated ? "B2 + (pc + k0n) * N + t1 * 16" : "bnsrc + 16") + " : B;\n";
  }
  // In place: A's rows from the operand; B's whole panels too (an edge panel was packed).
  if (in_place)
    s += "              const float* ad = A + r0 * K + pc;\n"
         "              const float* bd = direct && cols == 32 ? B + pc * N + c0 : bin;\n"
         "              const int64_t ldb = direct && cols == 32 ? N : 32;\n";
  const auto call = [&](const std::string& args) {
    std::string packed = ukr + args + ");\n";
    if (copies_next)
      packed = "if (copying) fusor_ukr_copy(kc, ain, bin, bnsrc, bnsrc2, N, bnext, bnext2, kn, " + args +
               ");\n                else " + packed;
    // (With copies_next a panel after the item's first was packed by the one before when the
    // block has two full tiles.)
    if (packs_in_tiles)
      packed = "if (fuse && q == 0" + std::string(copies_next ? " && (p == p_lo || mrows < 2 * FUSOR_MR)" : "") +
               ") fusor_ukr_pack(kc, ain, B + pc * N + c0, " +
               std::string(gated ? "B2 + pc * N + c0" : "B + pc * N + c0 + 16") + ", N, (float*)bin, " + args +
               ");\n                else " + packed;
    return in_place ? "if (direct) fusor_ukr_direct(kc, ad, K, bd, ldb, " + args + ");\n                else " + packed
                    : packed;
  };
  if (tuning.epf && !amx) {
    s += "              if (last)\n                for (int64_t r = 0; r < rows; ++r) {\n";
    s += "                  __builtin_prefetch(out + (r0 + r) * N + c0, 1, 3);\n"
         "                  __builtin_prefetch(out + (r0 + r) * N + c0 + 16, 1, 3);\n";
    if (plan.residual)
      s += "                  _mm_prefetch((const char*)(res + (r0 + r) * N + c0), _MM_HINT_T0);\n"
           "                  _mm_prefetch((const char*)(res + (r0 + r) * N + c0) + 64, _MM_HINT_T0);\n";
    s += "                }\n";
  }
  s += "              if (rows == FUSOR_MR && accw == 32) {\n";
  s += "                " + call("last ? tile : acc, last ? 32 : lacc, first ? NULL : acc, lacc");
  s += "                if (!last) continue;\n              } else {\n";
  // (Edge tiles: only their rows; AMX computes its whole 32-row tile.)
  const std::string packed_edge =
      amx ? ukr + "tile, 32, NULL, 0);\n" : "fusor_ukr_packed_rows(rows, kc, ain, bin, tile, 32);\n";
  s += in_place ? "                if (direct) fusor_ukr_direct_rows(rows, kc, ad, K, bd, ldb, tile, 32);\n"
                  "                else " +
                      packed_edge
                : "                " + packed_edge;
  s += "                for (int64_t r = 0; r < rows; ++r) {\n";
  s += "                  float* restrict t = tile + r * 32;\n                  float* restrict a = acc + r * lacc;\n";
  s += "                  if (last) {\n";
  s += "                    if (!first) for (int64_t j = 0; j < accw; ++j) t[j] += a[j];\n";
  s += "                  } else if (first) for (int64_t j = 0; j < accw; ++j) a[j] = t[j];\n";
  s += "                  else for (int64_t j = 0; j < accw; ++j) a[j] += t[j];\n                }\n";
  s += "                if (!last) continue;\n              }\n";
  if (amx) s += amx_special_fixup(plan, ld, "              ");
  // The last K block: the tile holds the whole sums; the epilogue reads only L1. When every
  // op renders over __m512 it runs 16 lanes at a time with fusor_expf16 and masked edges
  // (16-bit bias and residual widened as they load); otherwise the host compiler vectorises
  // the float loop.
  std::vector<Op> ops = plan.epilogue;
  if (gated) ops.push_back(*plan.gate);
  const bool vector_epilogue =
      !tuning.avx2 && std::all_of(ops.begin(), ops.end(), [&](Op op) { return codegen::renders_in(v16, op); });
  s += "              for (int64_t r = 0; r < rows; ++r) {\n";
  s += "                const float* restrict t = tile + r * 32;\n";
  s += "                float* restrict o = out + (r0 + r) * N + c0;\n";
  if (vector_epilogue) {
    s += "                for (int64_t j = 0; j < cols; j += 16) {\n";
    s += "                  const __mmask16 m = cols - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - j)) - "
         "1u);\n";
    s += "                  __m512 v = _mm512_load_ps(t + j);\n";
  } else {
    s += "                #pragma omp simd\n";
    s += "                for (int64_t j = 0; j < cols; ++j) {\n";
    s += "                  float v = t[j];\n";
  }
  const auto& ed = vector_epilogue ? v16 : d;
  if (gated) {
    s += vector_epilogue ? "                  const __m512 u = _mm512_load_ps(t + 16 + j);\n"
                         : "                  const float u = t[16 + j];\n";
    s += codegen::render_gemm_epilogue(ed, plan.gate, {}, "", "", "                  ");
  } else {
    const std::string bias_load = !has_bias         ? ""
                                  : vector_epilogue ? ld.load16("m", "bias + c0 + j")
                                                    : ld.load("bias", "c0 + j");
    const std::string res_load = !plan.residual    ? ""
                                 : vector_epilogue ? ld.load16("m", "res + (r0 + r) * N + c0 + j")
                                                   : ld.load("res", "(r0 + r) * N + c0 + j");
    s += codegen::render_gemm_epilogue(ed, std::nullopt, plan.epilogue, bias_load, res_load, "                  ");
  }
  s += vector_epilogue ? "                  _mm512_mask_storeu_ps(o + j, m, v);\n" : "                  o[j] = v;\n";
  s += "                }\n              }\n            }\n";
  if (overlap) s += "          fusor_bpack_all(&nx);\n";
  s += "        }\n      }\n";
  if (plan.reduction) {
    // The block's rows are final after its last K block when all panels are this item's.
    s += "      if (npc == 1)\n" + reduce_rows(plan, "i0", "i0 + mrows", "        ");
  }
  s += "    }\n";
  if (plan.reduction) {
    s += "    if (npc > 1) {\n      #pragma omp for schedule(static)\n" + reduce_rows(plan, "0", "M", "      ") +
         "    }\n";
  }
  if (amx) s += "    _tile_release();\n"; // (no tile state: less to save on a switch)
  s += "  }\n";
  s += "  return failed ? 2 : 0;\n";
  return s;
}

} // namespace fusor::x86::simd
