// Pieces shared by the AVX-512 lane's emitters (internal to src/targets/x86).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fusor/dtype.hpp"
#include "fusor/error.hpp"
#include "fusor/ops.hpp"
#include "fusor/region.hpp"

namespace fusor::x86::simd {

struct Tuning {
  int mr = 14;  // rows of the register tile (accumulators: mr x 2 zmm)
  int kc = 768; // largest K block (K is split into even blocks no larger)
  int mc = 512; // target rows of a packed A block (fewer when mc x kc floats pass 1 MiB)
  int nb = 512; // attention: keys per online-softmax step (a multiple of 32)
  // Work (multiply-adds; an element of a streaming kernel counts 16) below which a kernel
  // stays on the calling thread: forking and joining the pool costs about a microsecond,
  // more than a tiny kernel's work. Measured on two threads: 32^3 GEMM 2.5 us serial vs 3.2
  // parallel, 16x64x64 even, 64^3 11 vs 8; a 32 x 64 layer norm 2.1 vs 2.3, 64 x 64 3.8 vs
  // 3.2. 0: always parallel.
  int serial = 1 << 16;
  // GEMM-rooted kinds: the x86_amx lane's bf16-tile micro-kernel (x86_amx_gemm.cpp) instead
  // of the zmm one; set by the lane, not an option.
  bool amx = false;
  // The x86_avx2 lane: no AVX-512 instruction. GEMM-rooted kinds and attention on its ymm
  // micro-kernel (x86_avx2_*.cpp) with scalar packing and compiler-vectorised epilogue and
  // softmax; streaming kinds with the compiler-vectorised loops and ymm streaming stores.
  // Set by the lane.
  bool avx2 = false;
  int amx_parts_a = 3, amx_parts_b = 3;
  int exact = 0; // x86_amx: 1 computes all nine bf16 part products (x86_amx_gemm.cpp)
  // x86_amx: 0 runs vector work after the tile products instead of between them (attention's
  // softmax, x86_amx_attention.cpp; GEMM's packing of B's next panels), to measure what the
  // overlap gains.
  int overlap = 1;
  // Norm chains and pointwise DAGs: non-temporal stores of the output (stream_helpers says
  // why): 0 never, 1 always, 2 when the output passes the process's share of the last-level
  // cache, at most 12 MiB (stream_limit_bytes).
  int stream = 2;
  // GEMM-rooted kinds on the zmm and ymm tiles: B's packing prefetches the row this many rows
  // ahead (0: none). B [K, N] rows are N floats apart, a new page nearly every row, where the
  // hardware prefetchers start over. Same-run A/B on Zen 4 (harness, best of 60): 128 x 3072 x
  // 768 0.93-0.96x the time, 128 x 768 x 3072 0.95-0.97x, 1024^3 0.98x.
  int bpf = 16;
  // GEMM-rooted kinds on the zmm and ymm tiles: K steps after which a tile adds its
  // accumulators to the sums so far and starts again from zero (FUSOR_KSUB; 0: only at K
  // blocks), so a sum's rounding error grows with this length, not the K block's or K's.
  int ksub = 256;
  // GEMM-rooted kinds on the zmm and ymm tiles: a tile of the last K block prefetches the
  // output rows it will store (for writing) and the residual rows it will read before its
  // micro-kernel runs, so the epilogue finds them in cache (0: no).
  int epf = 1;
  // GEMM-rooted kinds on the zmm and ymm tiles, f32 B [K, N]: the first A panel's tiles of a block of B's
  // panels read B where it lies and pack it as they go (fusor_ukr_pack), instead of a packing
  // pass before the block's tiles (0: the pass).
  int bfuse = 1;
  // With bfuse: a block's next whole panel of B is packed by this panel's tiles after the
  // first, a piece of its rows each (fusor_ukr_copy), so only an item's first panel is packed
  // by its first tile (0: every panel by its first tile, fusor_ukr_pack, which then waits on
  // B's rows: 17 % of a gated call's time for 6 % of its products on Zen 5).
  int bnext = 1;
  // With bnext: panels copied per visit of a row of B (1 or 2; 0: 2 for gated regions, whose
  // panels hold 16 columns of each weight, else 1). B's rows are N floats apart, so each visit
  // touches a new page: gated panels two at a time read 128 contiguous bytes of each weight
  // per visit, as other panels do, and halve the page walks that stall the copies (gated 512 x
  // 768 -> 2048: 0.91-1.00x the time on Ice Lake, 0.98x on the lent host; 32-column panels two
  // at a time: 1.00-1.02x).
  int bcopy = 0;
  // GEMM-rooted kinds on the zmm and ymm tiles, f32 B [K, N] read in place with N > 256: from
  // 2 rows (ymm: with B of 16 MiB or more) to srows - 1, B's rows stream through an 8-row
  // register block (row_run_gemm, which says why these bounds; srows <= 4: never). The ymm
  // lane's default is 16.
  int srows = 14;
  // The skinny path (fewer rows than the row path takes, N > 256) splits K between the threads,
  // each reading whole rows of B, and sums their partial rows after a barrier (skinny_gemm says
  // why); 0: each thread owns a range of columns instead. For A/B runs.
  int ksplit = 1;
  // With srows: rows below crows take the row path too where B is larger than the host's
  // last-level cache (llc), so that it comes from memory at every call (row_run_gemm says why;
  // 0 or <= srows: never). The ymm lane's default is 0.
  int crows = 25;
  // The row path's strip of columns (runc in row_run_gemm, a multiple of 32; 0: its own rule).
  // For A/B runs.
  int runc = 0;
  // With srows: rows below wrows take the row path too where each thread's share of the columns
  // is at least wcols (row_run_gemm says why; wrows <= srows: never). The ymm lane's default
  // wrows is 0.
  int wrows = 33;
  int wcols = 1024;
  // The last-level cache's size in KiB that crows compares B with, and stream's limit; -1: the
  // host's share (host_llc_share_bytes), 0: unknown, so crows never applies (stream: 12 MiB).
  // A test knob.
  int llc = -1;
  // Attention with at most fq query rows per head takes the few-query path (K and V read in
  // place: x86_simd_attention_few.cpp); 0 sends every call through the flash loop. 8: against
  // the flash loop on Zen 5 (H = 32, Nk = 2048, D = 128) M = 4 / 8 / 16 took 0.36 / 0.61 /
  // 0.70x the time, with 8 query heads per KV head 0.60 / 0.92 / 0.99x; at Nk = 256 M = 8 the
  // same, M = 32 1.3x.
  int fq = 8;
  // Attention: the packed K panels shared by the threads (and the zmm lane's widened 16-bit V,
  // the AMX lane's packed V) are written with streaming stores (1; streams_k_panels says why)
  // or plain ones (0); -1: the lane's default, 1 on the zmm and ymm tiles, 0 on the AMX tiles.
  int kstream = -1;
  // Non-causal attention: each thread takes runs of query blocks from its own range of the
  // (head, query block) sequence first (1), or every thread from one shared counter (0); 2:
  // ranges while a head's K and V, as the lane keeps them, fit in half of an L2 of l2 KiB
  // (query_block_ranges in x86_simd_attention.cpp says why).
  int claim = 2;
  // One core's L2 in KiB that claim = 2 compares a head's K and V with; -1: the host's
  // (host_l2_bytes), 0: unknown, so the counter. A test knob.
  int l2 = -1;
  // Causal attention: the items (query blocks of a head) go head after head, largest block
  // first within a head (1), or the largest blocks of every head first (0); 2: head after head
  // while there are at least 16 items per thread (causal_items_by_head says why); 3: a head's
  // items in pairs (its largest with its smallest, ...: equal work), claimed as non-causal
  // query blocks are (claim), so a thread keeps to one head and, with lpack, packs its K
  // itself. -1: the lane's default, 3 on the AMX and zmm lanes where the process may run on 16
  // CPUs or more (causal_pairs says why), else 0 on the AMX lane and 2 on the vector lanes.
  // Filled in with qitems by attention's with_item_defaults.
  int byhead = -1;
  // With ranges: a thread takes runs of up to qs blocks from its own range's front (1) instead
  // of at most half of what is left of it (0). For A/B runs (run bh, 16 threads: 1.07-1.11x the time).
  int qrun = 0;
  // With ranges: the fewest query blocks a run from a thread's own range takes (while its range
  // has them), so a thread's last runs are this size. For A/B runs (run bn, AMX lane at S = 512:
  // 1 moved nothing out of the passes' spread).
  int qmin = 2;
  // Attention: at most this many query blocks an item (0: as qitems says, at most QS). For
  // A/B runs.
  int qs = 0;
  // Attention: the items a thread takes on average, which an item's query blocks are sized
  // for (the blocks of every head spread over qitems x the threads); -1: 5 for the AMX lane's
  // causal pairs (byhead 3; causal_pairs says why), else 2.
  int qitems = -1;
  // GEMM-rooted kinds on the zmm and ymm tiles (no row reduction): threads out of items take
  // panels of others' last K blocks (steal_items in x86_simd_gemm.cpp; 0: the static split).
  int steal = 1;
  // Test knob, with steal: thread 0 starts its items this many microseconds late.
  int lag = 0;
  // GEMM-rooted kinds on the AMX tiles: items handed out one at a time as threads ask (1), or
  // split statically (0) (gemm_body says why).
  int dyn = 1;
  // With dyn: chunks of B's panels per thread when the threads split the columns. For A/B runs.
  int isplit = 1;
  // Attention on the AMX and zmm tiles, f32, where the threads work from ranges (claim;
  // non-causal items and causal pairs, byhead = 3): each thread packs K (AMX: and V) of its
  // item's head into its own scratch when its head changes (1), instead of every head packed
  // by all threads before the items (0) (decisions.md, "K and V packed by the thread that
  // reads them").
  int lpack = 1;
  // With lpack, for A/B runs: a thread out of its own range steals from ranges of its own KV
  // head first, and from another head's (which it must then pack) only while that range has
  // at least xsteal query blocks left; 0: the range with most left, whatever its head (run bm:
  // 3 and "never" took 1.11x and 1.17x the time at S = 512 D = 64 on 16 threads: decisions.md).
  int xsteal = 0;
  // Attention on the AMX tiles, f32: P·V on zmm FMAs, between the tile products of the next
  // step's scores (1), or on the tiles (0; a head whose V is not all finite takes zmm either
  // way); 2: each thread picks per item whichever took fewer cycles per query-key of its recent
  // items, trying the other every 32nd item. For A/B runs: it lost (decisions.md, "P·V on zmm
  // beside slowed tiles").
  int zpv = 0;
  // Non-causal attention on the AMX tiles with thread-local packs, one key block: a thread's
  // item starts as one query block of its own range and grows by the next one while its
  // steps run (up to qs blocks, within the head), so its block steps stay one software
  // pipeline and the blocks it has not reached stay in its range for others to steal (1); 0:
  // runs claimed whole (claim_query_blocks). Run br, 64 alternated pairs on Emerald Rapids:
  // D = 128 faster in 45 (medians up to 11 % less), D = 64 even (decisions.md, "Items that grow").
  int qgrow = 1;
  // Attention on the AMX tiles: the K, V and query packs prefetch (T0) the source lines they
  // read next, one 32-key panel (K, V) or four query rows ahead (1), or rely on the hardware
  // prefetchers (0). K's register transpose reads 32 rows a line at a time, which those do not
  // follow. -1: the lane's default, decided per call: prefetch where the call's team has fewer
  // than 16 threads (decisions.md, "The AMX lane's packs prefetch their sources" says why).
  int ppf = -1;
  // Attention's flash loop: every 64 calls, each thread's cycles per call in each phase
  // printed on stdout (the trace_* helpers in x86_simd_attention.cpp). For measurements only.
  int trace = 0;
};

// `#pragma omp parallel<rest>` that runs on the calling thread alone while `work` (an
// expression, in Tuning::serial's units) is below FUSOR_SERIAL_BELOW.
std::string omp_parallel(const std::string& work, const std::string& rest = "");

Error unsupported(RegionKind kind, const std::string& reason, std::string_view lane = "x86_avx512");

// C type and load expression of an operand stored in `dtype` (f32, f16, bf16).
struct StorageLoad {
  std::string type;
  std::string wrap_open, wrap_close;
  DType dtype = DType::f32;
  std::string load(const std::string& ptr, const std::string& idx) const {
    return wrap_open + ptr + "[" + idx + "]" + wrap_close;
  }
  // The 16 consecutive elements at `ptr` as one __m512 of f32 (exact for all three), zero
  // in the lanes `mask` leaves out.
  std::string load16(const std::string& mask, const std::string& ptr) const {
    if (dtype == DType::f32) return "_mm512_maskz_loadu_ps(" + mask + ", " + ptr + ")";
    const std::string h = "_mm256_maskz_loadu_epi16(" + mask + ", " + ptr + ")";
    if (dtype == DType::f16) return "_mm512_cvtph_ps(" + h + ")";
    return "_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(" + h + "), 16))"; // bf16: the top half
  }
  // The 8 elements at `ptr` as one __m256 (AVX2; F16C for f16).
  std::string load8(const std::string& ptr) const {
    if (dtype == DType::f32) return "_mm256_loadu_ps(" + ptr + ")";
    const std::string h = "_mm_loadu_si128((const __m128i*)(" + ptr + "))";
    if (dtype == DType::f16) return "_mm256_cvtph_ps(" + h + ")";
    return "_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(" + h + "), 16))";
  }
};

// The MR x 32 micro-kernel `fusor_ukr(kc, a, b, c, ldc, cin, ldin)`: c[MR][32] (rows ldc floats
// apart) = cin + a^T b (cin rows ldin apart; NULL: zero; it may be c) with a packed [kc][MR] and b packed [kc][32];
// accumulators live in zmm registers, restarting from zero every FUSOR_KSUB steps of kc.
// `#define FUSOR_KSUB` for the tiles (Tuning::ksub; 0: never within a K block).
std::string ksub_define(int ksub);
std::string micro_kernel_source(int mr, int ksub);
// `fusor_ukr16`: fusor_ukr's contract for the first 16 columns of the packed panel only
// (c[MR][16]), for a panel whose last 16 columns nobody reads.
std::string half_micro_kernel_source(int mr);
// fusor_ukr with the same contract on AVX2 + FMA (x86_avx2_gemm.cpp): each 16-column half of
// the tile in 2 x mr ymm accumulators (mr <= 6).
std::string avx2_micro_kernel_source(int mr, int ksub);
// (x86_avx2_gemm.cpp) The ymm tiles of `rows` rows: A packed [kc][mr], or read in place.
std::string avx2_packed_ukr(int rows, int mr, const std::string& name);
// With `halves` the read-in-place tile takes a last parameter nc and computes only its first nc
// (16 or 32) columns.
std::string avx2_direct_ukr(int rows, const std::string& name, bool halves = false);
// (x86_avx2_gemm.cpp) fusor_ukr_pack's ymm tile: B read in place and packed as it is used.
std::string avx2_packing_ukr(int mr, int ahead);
std::string avx2_copying_ukr(int mr, int cw);
// The same tile as `fusor_ukr_rows`, whose A is row-major with rows FUSOR_NB floats apart
// (attention's probabilities): a[r * FUSOR_NB + k], and B's rows ldb floats apart.
std::string avx2_rows_kernel_source(int mr);
// `fusor_transpose16(__m512 r[16])`: a 16 x 16 transpose in registers (r[c] ends holding
// column c); micro_kernel_source includes it.
std::string transpose16_source();

// Statements packing a 16 x 16 slab through the register transpose: rows r < `rows` (<= 16) are
// the 16 floats at `row_at` (an expression in r; rows past are zero), each mapped through
// `prologue` over __m512, and column c (an expression in c) is stored to `column_at` under `mask`
// (`stream`: whole, 64-byte aligned columns stored past the caches instead). With `storage`, rows
// are 16 elements of its type (f16, bf16) widened to f32.
std::string transpose16_slab(const std::string& row_at, const std::string& rows, const std::vector<Op>& prologue,
                             const std::string& column_at, const std::string& mask, const std::string& indent,
                             bool stream = false, const StorageLoad* storage = nullptr);

// Statements normalising a row with the op table's four steps, vectorised: reads src[0..n),
// writes dst[0..n) (they may alias), then optional per-feature `* gamma[j]` / `+ beta[j]`.
std::string row_norm_simd(RowNorm norm, const std::string& src, const std::string& dst, const std::string& n,
                          const std::string& eps, const std::string& gamma, const std::string& beta,
                          const std::string& indent);

struct GemmPlan {
  bool a_trans = false, b_trans = false;
  std::vector<Op> prologue, epilogue;
  bool residual = false;
  std::optional<RowNorm> reduction;
  double eps = 0.0;
  std::optional<Op> gate;
};
// Whether the kernel may read A and B in place when N is small: f32 row-major operands, no
// prologue to apply, one product (gated panels interleave two B operands), the zmm or ymm tile.
bool gemm_reads_in_place(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning);
// Edge tiles for the GEMM kinds: `fusor_ukr_packed_rows(rows, kc, a, b, c, ldc)` computes the
// first rows (<= FUSOR_MR) of a packed panel's tile (cin NULL) as tiles of MR, 8, 4, 2 and 1
// rows, so an edge panel costs its rows, not MR. With `in_place`, small GEMMs read A and B
// where they lie (gemm_reads_in_place), since packing them costs as much as a few
// micro-kernel calls and few calls reuse a packed panel: `fusor_ukr_direct(kc, a, lda, b, ldb,
// c, ldc, cin, ldin)` is fusor_ukr's tile with A's rows lda floats apart (a[r * lda + k]) and
// B's rows ldb apart (b[k * ldb + j]), `fusor_ukr_direct_rows(rows, kc, a, lda, b, ldb, c,
// ldc)` any rows of it the same way. With `pack_ahead` >= 0 (gemm_packs_in_tiles),
// `fusor_ukr_pack(kc, a, b, b2, ldb, bp, c, ldc, cin, ldin)` is fusor_ukr's tile with B's 32
// columns read where they lie (b[k * ldb + j] for j < 16, b2[k * ldb + j - 16] after) and
// stored packed to bp on the way, its rows prefetched pack_ahead rows early.
// With `copy_cw` > 0 (gemm_copies_next_panel; B's columns per panel), `fusor_ukr_copy(kc, a, b,
// src, src2, lds, dst, dst2, n, c, ldc, cin, ldin)` is fusor_ukr's tile that also copies n rows
// of another panel's two 16-column runs (src[j * lds ..] and src2[j * lds ..] to dst[j * 32 ..]
// and dst[j * 32 + 16 ..]) and, with dst2, the next panel's (copy_cw columns further) to dst2,
// one row every kc / n steps, each prefetched kCopyAhead copies earlier.
std::string edge_tiles_source(int mr, bool avx2, bool in_place, int pack_ahead, int copy_cw);
// Whether the first A panel's tiles of a block of B's panels pack B (Tuning::bfuse): f32
// B [K, N] on the zmm and ymm tiles.
bool gemm_packs_in_tiles(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning);
// Whether, on top of that, a panel's tiles pack the next panel (Tuning::bnext).
bool gemm_copies_next_panel(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning);
// fusor_ukr_copy's parts, shared by the zmm and ymm tiles: its parameters; the counters and
// the first kCopyAhead rows' prefetches (setup); the step that copies every kc / n steps the
// next row of each run (`from`, a source pointer, to dst's row + `to`) and prefetches the row
// kCopyAhead ahead. B's rows lie on few cache sets when N is a power of two: lines fetched
// much earlier were evicted before use, and a tile copying a row every step (fusor_ukr_pack)
// waits on memory. So when copies come closer than every 8 steps (few tiles a panel: a GEMM
// of 16-64 rows) and B is wide, rows are also prefetched to L2 at least 32 steps ahead.
inline constexpr int kCopyAhead = 4;
// B rows at least this many floats apart (8 KiB) take the copying tiles' L2 prefetches: a
// weight that wide (4096 x 4096: 64 MiB) comes from memory between uses, where they gain
// (Ice Lake, 32 / 48 / 64 x 4096 x 4096: 0.80 / 0.87 / 0.86x the time; the lent host, family
// 6 model 207, with four copies of B used in turn: 32 / 64 rows 0.79-0.83 / 0.94-0.96x); B
// kept in cache pays for them (that host, one B reused from its L3: 1.02-1.06 / 0.91-1.05x;
// 1024^3 on 16 threads, whose tiles copy every other step, 1.02-1.05x without this bound).
inline constexpr int kWideB = 2048;
struct CopyRun {
  std::string from, to;
};
std::string copying_ukr_params();
std::string copy_setup(const std::vector<CopyRun>& runs, const std::string& cw, const std::string& indent);
std::string copy_step(const std::vector<CopyRun>& runs, const std::string& cw, bool avx2, const std::string& indent);
// fusor_ukr_pack's prefetches of B's rows `rows` (pointers to this step's row, ldb apart): both
// ends of the 16-column run `ahead` rows early to L1, for both lanes. (Also to L2 three times
// as far, as the copies do for a wide B: 0.86-0.89x the time at 16 x 4096 x 4096 on Ice Lake,
// 0.98x on the lent host with B from memory, 1.11-1.32x there with B in its L3; not kept.)
std::string packing_prefetches(const std::vector<std::string>& rows, int ahead, const std::string& indent);
// The x86_amx lane (x86_amx_gemm.cpp): bf16 parts an operand needs to be exact (f32 or any
// prologue: 3; f16: 2; bf16: 1); the head (FUSOR_MR 32, part splitting, tile permission and
// configuration, `fusor_amx_ukr` with fusor_ukr's contract on packed bf16 panels); the
// statements packing A's panels of the item and B's panels pb .. pb + pn.
int amx_parts(DType storage, bool has_prologue);
// One 32-k chunk of a row, packed as bf16 parts (the A-side layout): `valid` values (an
// expression; the rest zero) through `prologue`, element t at `dst + t`, parts
// `part_stride` apart; `flag` (an lvalue) set when a value is not finite. `contiguous` (a pointer
// to the chunk's first element, any storage) enables the 16-lane path; otherwise element t is
// source[element], an expression in t.
struct AmxRowChunk {
  std::string source, element, contiguous, valid, dst, part_stride, parts, flag;
  std::vector<Op> prologue;
  // The values are finite or NaN (attention's probabilities): no infinity to flag (`flag`
  // is unused), and a NaN's parts are NaN, so the split skips the special-value handling.
  bool finite_or_nan = false;
  // Element t at dst + 2 (t % 16) + t / 16: values t and t + 16 form one pair (attention's
  // probabilities; V is packed with the same pairing). A part's pair is then a shift and one
  // ternary-logic op instead of VCVTNE2PS2BF16, which barely runs beside tile products (a
  // probe: 14-57 % of its time hid behind them; shifts and logic hide entirely).
  bool pair_halves = false;
  // With `contiguous`: a pointer to the chunk to prefetch (T0) as this one is read, and when
  // (attention's query rows a few rows ahead); empty: none.
  std::string prefetch, prefetch_if;
};
std::string amx_pack_row_chunk(const AmxRowChunk& chunk, const StorageLoad& ld, const std::string& indent);
// The lane's common C (FUSOR_NSA/NSB: parts of A and B; tile configuration, part splits,
// C tiles); the micro-kernel `name` for nsa x nsb parts; its part products one at a time
// (fusor_amx_product<suffix>, so vector work can run between them); and
// `fusor_amx_ukr_packing`, the micro-kernel packing B's next panels between its products
// (GEMM-rooted kinds with B not transposed).
std::string amx_source(int nsa, int nsb);
std::string amx_ukr_source(int nsa, int nsb, bool exact, const std::string& name);
std::string amx_product_source(int nsa, int nsb, bool exact, const std::string& suffix);
std::string amx_packing_ukr_source(int nsa, int nsb, bool exact, const StorageLoad& ld);
std::string amx_pack_a(const GemmPlan& plan, const StorageLoad& ld, const std::string& indent);
std::string amx_pack_b(const GemmPlan& plan, const StorageLoad& ld, const std::string& indent);
// Packing flags the rows of A (rf[row - i0]) and the columns of B (cf[(panel - p_lo) * 2 +
// half], a bit per column) that hold a NaN or an infinity: a split part that is zero times
// an infinity would make NaN where f32 gives the infinity. These statements recompute a
// flagged tile element as an f32 dot product, before the epilogue.
std::string amx_special_fixup(const GemmPlan& plan, const StorageLoad& ld, const std::string& indent);

std::string gemm_body(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning);
// Few-row GEMMs with B read where it lies (x86_simd_gemm_rows.cpp): from 2 rows to
// Tuning::srows - 1 and N > 256, B's rows stream through an 8-row register block.
std::string row_run_gemm(const GemmPlan& plan, const StorageLoad& ld, const Tuning& tuning);
// A loop normalising rows [lo, hi) of `out` with the plan's row reduction.
std::string reduce_rows(const GemmPlan& plan, const std::string& lo, const std::string& hi, const std::string& I);
// The start of a streaming GEMM path's parallel region (each thread's columns [j0, j1), in
// units of `align`) and its end: the epilogue on those columns, the rows' reduction after a
// barrier, and the return.
std::string thread_columns_head(int align);
std::string thread_columns_tail(const GemmPlan& plan, const StorageLoad& ld);
std::string attention_body(const AttentionRegion& region, const StorageLoad& ld, const Tuning& tuning);
// Whether the op table spells softmax's e^d as expf, so that it may run as 2^(d·log2 e)
// (x86_simd_attention.cpp); and whether the AVX-512 and AMX lanes' flash loop does (scale > 0:
// its max rule takes the raw scores' max). The vector vocabulary's step (below) takes any scale.
bool softmax_exp_is_expf();
bool attention_softmax_in_base2(const AttentionRegion& region);
// Attention's vector vocabulary (x86_simd_attention_few.cpp): a few dozen vector words
// (fusor_fq_*) on zmm or (avx2) ymm registers, and the base-2 online-softmax step of one row
// written over them (fusor_softmax_step, any scale); the few-query path's and, where
// softmax_exp_is_expf(), the x86_avx2 lane's flash loop's.
std::string attention_vector_source(const StorageLoad& ld, bool avx2);
// The few-query path (x86_simd_attention_few.cpp): whether a kernel has it (softmax's e^d
// spelled expf; any lane, storage, K layout and scale), its functions over the vocabulary
// above, and the kernel's first statement, which takes calls with at most tuning.fq query rows
// per head.
bool attention_reads_few_queries(const Tuning& tuning);
// Whether the AMX and zmm lanes' causal attention takes pairs of items by default on a process
// of `cpus` CPUs (Tuning::byhead 3; on the AMX lane sized for five a thread, Tuning::qitems 5;
// x86_simd_attention.cpp says why).
bool causal_pairs(int cpus);
std::string attention_few_queries_source(const AttentionRegion& region, const StorageLoad& ld);
std::string attention_few_queries_dispatch(const AttentionRegion& region, const Tuning& tuning);
// The x86_amx lane's attention pieces (x86_amx_attention.cpp), in attention_body's loops:
// packing K (per KV head and 32-key panel), packing a 32-row query block, packing V of every
// KV head (when no element is NaN or infinite, vfl[head panel] = 0); the helpers of the
// pipelined block steps (fusor_att_step, fusor_att_next); splitting row rr of a block's
// probabilities into parts from chunk sfrom on, and the exp pass's whole chunk e0, e1 at j;
// the item's block steps around `rows_loop` (the softmax rows, which advance the tile queue
// tq) and `zmm_pv` (P·V of heads whose V is not all finite).
// Attention's two micro-kernels and their products (scores: nq x nk parts, P·V: 3 x nv) and
// the tile queue that runs them a part product at a time (fusor_tiles_product).
std::string amx_attention_queue_source(int nq, int nk, int nv, bool exact);
// `prefetch`: Tuning::ppf is not 0 (the prefetches then run where the kernel's `ppf` is set).
std::string amx_attention_pack_k(const AttentionRegion& r, const StorageLoad& ld, bool stream, bool prefetch);
std::string amx_attention_pack_q(const AttentionRegion& r, const StorageLoad& ld, bool prefetch);
std::string amx_attention_pack_v(const StorageLoad& ld, bool stream, bool prefetch);
// The body of amx_attention_pack_v's loop: V panel hp (of ndp a head) of KV head `head`.
std::string amx_attention_pack_v_panel(const StorageLoad& ld, bool stream, bool prefetch, const std::string& head);
std::string amx_attention_step_source();
std::string amx_attention_split_row(const std::string& hook);
std::string amx_attention_split_chunk();
// `grow`: statements run before each step's successor is found, which may add a query block to
// the item (nsub, nsteps; Tuning::qgrow).
std::string amx_attention_steps(const AttentionRegion& r, const StorageLoad& ld, bool overlap,
                                const std::string& step_rows, const std::string& rows_loop, const std::string& zmm_pv,
                                const std::string& grow);
// One online-softmax step's new running max of row rr (mn, from mrow[rr] and the block's max
// bm) and the factor alpha = e^(old max - new max) (`exp_dm`, an expression in dm) that
// rescales the row's sum and output; both lanes' softmax rows (x86_simd_attention.cpp). With
// `dscale`, the maxima are raw scores and dm is their difference times it.
std::string online_softmax_rescale(const std::string& exp_dm, const std::string& dscale = "");
// The factor that takes a running softmax state from maximum `from` to maximum `to`: 1 when
// they are equal, 0 from an empty state (from = -inf), else `exp_diff` (e^(from - to) in the
// kernel's base). The rows' steps above and the few-query path's merge of key splits.
std::string rescale_factor(const std::string& from, const std::string& to, const std::string& exp_diff);
// The x86_avx2 lane's attention pieces (x86_avx2_attention.cpp), in attention_body's loops:
// where P·V reads V (in place, or packed: FUSOR_VPANEL(head, panel), rows ldv apart),
// packing V of every KV head into 32-column panels, an 8 x 8 register transpose and the K
// panels packed through it, one row's online-softmax step, and the block's P·V through
// fusor_ukr.
std::string avx2_attention_v_source(bool f32);
// The barrier after a parallel loop of streaming stores, which are weakly ordered: each thread
// fences its own before the others may read them (x86_simd_attention.cpp).
std::string fenced_barrier();
std::string avx2_attention_pack_v(const StorageLoad& ld, bool stream);
std::string avx2_transpose8_source();
std::string avx2_attention_pack_k(const StorageLoad& ld, bool stream);
std::string avx2_attention_softmax_row();
std::string avx2_attention_pv(bool causal);
std::string norm_chain_body(const NormChainRegion& region, bool avx2);
// (avx2: no AVX-512 instruction; the 16-lane path gives way to the compiler-vectorised loop.)
std::string pointwise_body(const PointwiseGraphRegion& region, bool avx2);
std::string pointwise_reduce_body(const PointwiseReduceRegion& region);
std::string pointwise_helpers();
// fusor_stream_output / fusor_stream_floats for the streaming kinds, with Tuning::stream's mode
// and outputs past limit_bytes streamed in mode 2 (stream_limit_bytes).
// (avx2: two ymm streaming stores per 64 bytes instead of one zmm.)
std::int64_t stream_limit_bytes(const Tuning& tuning);
std::string stream_helpers(int mode, std::int64_t limit_bytes, bool avx2);

} // namespace fusor::x86::simd
