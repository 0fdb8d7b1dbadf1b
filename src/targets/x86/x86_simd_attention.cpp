// Flash-style attention for the AVX-512 lane. A work item is (batch, head, up to QS blocks of
// MR queries). Per key block of NB keys (default 512) and per query block: the GEMM micro-kernel
// writes the MR x NB scores into an L1 buffer (Q block packed [D][MR], K packed once per KV
// head as [32-key panel][D][32]); one online-softmax step per row and key block (running max,
// rescaled sum, one rescale of the output rows) turns them into probabilities in place; a
// 12-row x 32-column register kernel adds P·V into the block's output rows, its accumulators
// held over all NB keys. No score matrix is ever stored. The softmax steps come from the op
// table (accumulate = e^d, factor = 1/s): e^d over 16 lanes through the AVX-512 dialect.
//
// Why these sizes: with NB keys per step the per-row bookkeeping (max reduction, rescale,
// sum) and the P·V accumulator loads/stores are paid once per NB keys instead of once per 32;
// MR = 12 gives a 24-accumulator score micro-kernel and a P·V tile of 24 accumulators + 2 V
// vectors + a broadcast within the 32 zmm registers; key blocks outside query blocks bring a
// K/V block to L2 once per QS x MR queries.
#include <cstring>
#include <functional>
#include <utility>

#include "codegen/abi.hpp"
#include "codegen/c_renderer.hpp"
#include "fusor/toolchain.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

using codegen::c99_simd_dialect;

namespace {

// o[R][dv] += Σ_{j0 <= j < j1} p[r][j] · v[j][dv] for R = FUSOR_PVR rows (or 1), one chunk of
// NC <= FUSOR_PVC (or 4) 16-column vectors at a time: R x NC zmm accumulators stay in registers
// over all keys, masked for a ragged dv. p rows are FUSOR_NB floats apart (a constant, so the
// broadcasts address by immediates and no general register holds a row offset); rows of a tile
// past the block's real rows are padding (finite or not, they are never stored to the output).
// The @Q..@ marks are where the AMX lane's version takes its tile queue (fusor_pv_source).
const char* kPv = R"(#define FUSOR_PVR 12
#define FUSOR_PVC 2
static inline __attribute__((always_inline)) void fusor_pv_tile(const int R, const int NC, int64_t j0, int64_t j1,
    const float* restrict p, const float* restrict v, int64_t ldv, float* restrict o, int64_t ldo, const __mmask16* mk@QP@) {
  __m512 acc[FUSOR_PVR][4];@QB@
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_maskz_loadu_ps(mk[c], o + r * ldo + 16 * c);
  for (int64_t j = j0; j < j1; ++j) {
    const float* restrict vr = v + j * ldv;
    /* V rows 8 keys ahead toward L1: without it the V loads were the kernel's hottest stall. */
    _mm_prefetch((const char*)(vr + 8 * ldv), _MM_HINT_T0);
    if (NC > 1) _mm_prefetch((const char*)(vr + 8 * ldv + 16), _MM_HINT_T0);
    __m512 vv[4];
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) vv[c] = _mm512_maskz_loadu_ps(mk[c], vr + 16 * c);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 pb = _mm512_set1_ps(p[r * FUSOR_NB + j]);
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
    }@QT@
  }@QE@
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(o + r * ldo + 16 * c, mk[c], acc[r][c]);
}
static void fusor_pv(int tile_rows, int64_t j0, int64_t j1, const float* restrict p, const float* restrict v,
                     int64_t ldv, float* restrict o, int64_t ldo, int64_t dv@QP@) {
  if (j1 <= j0) return;
  const int w = tile_rows == 1 ? 4 : FUSOR_PVC;
  for (int64_t d0 = 0; d0 < dv; d0 += 16 * w) {
    __mmask16 mk[4];
    int nc = 0;
    for (int c = 0; c < 4; ++c) {
      const int64_t rem = c < w ? dv - d0 - 16 * c : 0;
      mk[c] = rem >= 16 ? (__mmask16)0xFFFF : (rem > 0 ? (__mmask16)((1u << rem) - 1u) : (__mmask16)0);
      if (rem > 0) nc = c + 1;
    }
    const float* restrict vc = v + d0;
    float* restrict oc = o + d0;
    if (tile_rows == 1) {
      switch (nc) {
      case 4: fusor_pv_tile(1, 4, j0, j1, p, vc, ldv, oc, ldo, mk@QA@); break;
      case 3: fusor_pv_tile(1, 3, j0, j1, p, vc, ldv, oc, ldo, mk@QA@); break;
      case 2: fusor_pv_tile(1, 2, j0, j1, p, vc, ldv, oc, ldo, mk@QA@); break;
      default: fusor_pv_tile(1, 1, j0, j1, p, vc, ldv, oc, ldo, mk@QA@); break;
      }
    } else if (tile_rows == 8 && nc == FUSOR_PVC) {
      fusor_pv_tile(8, FUSOR_PVC, j0, j1, p, vc, ldv, oc, ldo, mk@QA@);
    } else if (tile_rows == 8) {
      fusor_pv_tile(8, 1, j0, j1, p, vc, ldv, oc, ldo, mk@QA@);
    } else if (nc == FUSOR_PVC) {
      fusor_pv_tile(FUSOR_PVR, FUSOR_PVC, j0, j1, p, vc, ldv, oc, ldo, mk@QA@);
    } else {
      fusor_pv_tile(FUSOR_PVR, 1, j0, j1, p, vc, ldv, oc, ldo, mk@QA@);
    }
  }
}
)";

// kPv, and on the AMX lane with the tile queue: every key of a tile's loop advances it by `prods`
// of `den` (the tick rule of the softmax's chunks), so the zmm P·V runs between tile products
// as the softmax does (Tuning::zpv says why).
std::string fusor_pv_source(bool queue) {
  std::string s = kPv;
  const std::pair<const char*, const char*> marks[] = {
      {"@QP@", ", fusor_tiles* tq, int64_t* tk, int64_t prods, int64_t den"},
      {"@QB@", "\n  int64_t tick = *tk;"},
      {"@QT@", "\n    for (tick += prods; tick >= den; tick -= den) fusor_tiles_product(tq);"},
      {"@QE@", "\n  *tk = tick;"},
      {"@QA@", ", tq, tk, prods, den"},
  };
  for (const auto& [mark, text] : marks)
    for (size_t at = s.find(mark); at != std::string::npos; at = s.find(mark, at))
      s.replace(at, std::strlen(mark), queue ? text : "");
  return s;
}

} // namespace

// Query blocks of MR rows per work item, at most: each key block is brought from L3/memory
// to L2 once for QS blocks (K and V of a long sequence do not fit L2 together). The AMX lane
// takes 16: its block steps are pipelined within an item, so the first step's scores and the
// last one's P·V run alone, once per item (same-run A/B against 4 on the development VM:
// 0.86x the time at S = 512, 0.92-0.96x at S = 2048; 32 and 64 gained no more). Fewer when
// the items would not keep every thread busy twice over.
constexpr int kQueryBlocks = 4, kAmxQueryBlocks = 16;

// Whether causal items of the AVX-512 lanes go in pairs claimed from ranges (byhead = 3; on the
// AMX tiles sized for five items a thread, qitems = 5), on a process of `cpus` CPUs. The AMX
// lane's reasons first, then the zmm lane's. Largest first from a dynamic
// schedule with items sized for two a thread, at S = 512 on 16 threads each thread holds about
// two items of four blocks: a thread whose tiles run at a third of the rate (the lent hosts' tile
// probe finds one or more) keeps a whole large item to the end. Pairs of smaller items leave it a
// share the others take from its range. Lent Sapphire Rapids host, 16 threads, the AMX lane's
// time (run bj, seven passes alternated with the former default): pairs of two-block items took
// 0.55-0.87x at causal S = 512; fusor's ratio against oneDNN at D = 128 1.88-2.83 against
// 1.48-2.43. But two-block items lose where the blocks are many, since the tiles' block steps are
// pipelined within an item only (run bk, same host): at S = 2048 2.13-2.36 / 3.88-4.57 ms (D = 64
// / 128) against 1.67-2.46 / 2.94-5.57 largest first (medians 1.70 / 3.06). Items of at most 2,
// 4, 5, 6, 8 and 16 blocks at S = 512, 768, 1024 and 2048 ran fastest with about three pairs a
// thread: 4 (0.16-0.33 / 0.27-0.49 ms against 0.27-0.35 / 0.46-0.66 largest first), 6 at S = 768
// (D = 128, H = 8: 0.64-1.01 against 0.84-1.09), 8 at S = 1024 (0.58 / 0.95-0.99 against
// 0.74-0.83 / 1.23-1.37) and 16 at S = 2048 (1.67-1.71 / 2.93-3.01, even with largest first),
// which qitems = 5 picks at each. On the two-core VM pairs of two-block items took 0.99-1.09x the
// time (run bj); on the Emerald Rapids host under taskset (run bk) 12 CPUs 0.81-1.24x at S = 2048
// (median 1.12), 8 CPUs 0.66-1.34x, 4 CPUs 0.65-2.71x: no count below 16 gained throughout, so
// fewer CPUs keep the former default. On that host's 16 threads, its tiles mostly slowed, the AMX
// lane read the same with either rule but at S = 768 and 1024 D = 128 (1.39-1.55 / 2.07-2.46 ms
// against 1.24-1.29 / 1.83-2.07 largest first); there the zmm lane takes causal attention.
// The zmm lane's dynamic schedule hands a thread items of any head, so every head's K was
// packed by all threads before the items, streamed (streams_k_panels): its traces put that at
// 167-295 kcycles of a 588-1341-kcycle call at S = 512 (run bs). Pairs from ranges keep a
// thread on one or two heads, whose K it packs itself (local_packs). Lent Sapphire Rapids host,
// 16 threads, four passes rotated with the default (run bt): S = 512 0.204-0.212 / 0.368-0.409 ms
// (D = 64 / 128) against 0.289-0.294 / 0.549-0.553 (pairs with shared packs 0.213-0.234 /
// 0.400-0.524); S = 2048 2.67-2.71 / 5.26-5.27 against 2.83-2.84 / 5.29-5.31 (three passes; at
// D = 128 a head passes half an L2, so those pairs come from the counter with shared K);
// pairs sized for two, three and five items a thread within each other's spread, so the zmm
// pairs keep two. Below 16 CPUs the zmm lane keeps head after head (byhead = 2), unmeasured.
bool causal_pairs(int cpus) { return cpus >= 16; }

namespace {

// The tuning with attention's item defaults filled in where no knob gave them (Tuning::byhead,
// Tuning::qitems), decided here alone because they depend on the region (causal) and the
// process's CPUs (causal_pairs). The AMX tiles gained nothing from the head-after-head order
// (causal_items_by_head).
Tuning with_item_defaults(Tuning t, bool causal) {
  if (t.byhead < 0) t.byhead = !t.avx2 && causal_pairs(host_affinity_cpus()) ? 3 : t.amx ? 0 : 2;
  if (t.qitems < 0) t.qitems = t.amx && causal && t.byhead == 3 ? 5 : 2;
  return t;
}

// Whether the x86_avx2 lane's score kernel reads whole f32 query blocks where they lie
// (fusor_ukr_q, rows D floats apart) instead of a packed copy: a causal S = 512 call spent
// 3 % of its time packing them.
bool attention_reads_q_in_place(const AttentionRegion& r, const StorageLoad& ld, const Tuning& tuning) {
  return tuning.avx2 && ld.dtype == DType::f32 && !r.q_transposed();
}

// Whether the AMX lane's packs carry their source prefetches (Tuning::ppf not 0); the kernel's
// `ppf` then says per call whether they run.
bool packs_prefetch(const Tuning& tuning) { return tuning.ppf != 0; }

// Whether K's packed panels (and the zmm lane's widened 16-bit V) are written with streaming
// stores. Every item reads panels of any head, so after a call both cores' caches hold them
// shared, and the next call's plain stores had to take each line back from the other core
// first. On Zen 4 with the two threads in different core complexes (a line's round trip ~300
// ns) the packing took 0.52 ms of a 3.4 ms causal S = 512 D = 128 call (rdtsc per phase),
// against 0.04 ms packing alone. Streaming stores claim no line: the call took 0.89x the time
// there, 1.00x with the threads near (~60 ns); nothing reads the panels after the call, and
// the items find them in memory. The AMX lane's shared packs keep plain stores by default:
// streamed, on the Emerald Rapids host's 16 threads (run bl, three passes), they took
// 0.54-0.59 / 0.85-1.01 ms at non-causal S = 512 (shared packs) against 0.44-0.56 / 0.68-1.07,
// and S = 2048 moved no more than the passes' spread.
bool streams_k_panels(const AttentionRegion& r, const Tuning& tuning) {
  return (tuning.kstream < 0 ? !tuning.amx : tuning.kstream == 1) && !r.k_transposed();
}

// Whether causal items go head after head (largest block first within a head), as a C
// expression: the threads' consecutive items then read the same head's K and V, which stay in
// cache between them. With the largest blocks of every head first, as before run ap, Ice Lake
// took 1.16x the time at S = 2048 D = 128 and 1.04x at D = 64 on the zmm tiles, 1.4x and 1.08x
// on the ymm tiles, the lent AMX host 1.04-1.05x on zmm and 1.12-1.13x on ymm; S = 512, whose
// K and V fit L2, within 8 %. But the last head's largest items start late: with few items
// per thread one of them ends the call alone. At S = 512 (12-row blocks, four per item, H = 8:
// 88 items) the longest thread's share of the work is 1.002x the mean on 2 threads, 1.02x on
// 8 and 1.11x on 16 head after head, against 1.000, 1.000 and 1.008 largest first (the
// dynamic schedule's greedy order over the items' key panels); at S = 2048 on 16 threads
// (344 items) 1.009 against 1.001. So by default (byhead = 2) heads go one after another
// while there are at least 16 items per thread. The AMX lane keeps every head's largest blocks
// first: head after head its tiles took 1.00x the time at D = 128 and 1.03x at D = 64.
std::string causal_items_by_head(const Tuning& tuning) {
  if (tuning.byhead != 2) return std::to_string(tuning.byhead);
  return "nbh * nqb >= 16 * (int64_t)nthreads";
}

// Non-causal items: runs of up to qs query blocks of one head, from the (head, query block)
// sequence of nall blocks. Each run's blocks read all of their head's K and V. (Causal pairs,
// byhead = 3, are claimed the same way, one pair at a time, from the (head, pair) sequence:
// `per_head` units a head.)
//
// With ranges (claim = 1) every thread owns a contiguous range of the sequence (a word of
// `range`: next block in bits 0-31, past-the-end in 32-63) and takes runs from its front, at
// most half of what is left of it and at least two blocks, so it stays on one or two heads,
// those whose K it packed; a thread out of blocks takes half of what is left at the back of
// the range with most (a faster core does more). With claim = 0 every run comes from one
// shared counter, guided-style (no more than a (2 x threads)th of what is left), so on 16
// threads each thread's next run is about 16 runs on, nearly always in another head, and
// four to eight threads read a head at once. Lent host, 16 threads, same-run ratios against
// oneDNN, ranges against the counter: at S = 512, whose heads' K and V fit in half an L2 (2
// MiB), the zmm tiles 1.41-1.98 / 1.21-1.72 at D = 64 / 128 against 1.21-1.44 / 1.10-1.24
// (five passes each), the AMX tiles 0.77-1.32 / 0.85-1.20 against 0.84-1.05 / 0.75-0.97
// (eight); at S = 2048, whose K and V do not (but for the zmm tiles at D = 64: 1 MiB), the
// AMX tiles 2.07-2.80 / 1.37-2.34 against 2.24-2.89 / 1.68-2.51 (six), the zmm tiles 2.22-2.27
// / 1.72-1.89 against 2.19-2.39 / 1.93-2.03 (two). So by default (claim = 2) a thread keeps to
// its range while a head's K and V, as the lane keeps them, fit in half of its L2 (Tuning::l2).
// (Both kinds took the place of a counter handing out equal runs, which left one thread
// waiting up to 15 % of the call at the end when the two cores' tile rates differed.)
std::string query_block_ranges(const Tuning& tuning, const std::string& per_head = "fusor_cdiv(M, FUSOR_MR)") {
  std::string s = "  const int64_t nqm = " + per_head + ", nall = nbh * nqm;\n";
  s += "  int64_t claim = 0; /* claim = 0: the next block no thread has taken */\n";
  if (tuning.claim == 0) return s;
  s += "  enum { FUSOR_RANGES = 256 };\n";
  s += "  uint64_t range[FUSOR_RANGES];\n";
  std::string when;
  if (tuning.claim == 2) {
    // A head's K and V in bytes: the AMX tiles' bf16 parts, the vector lanes' f32 panels.
    const std::string head_bytes = tuning.amx ? "2 * Nk * (D * FUSOR_NSB + Dv * FUSOR_NSV)" : "4 * Nk * (D + Dv)";
    when = "(double)(" + head_bytes + ") <= " + std::to_string(512LL * tuning.l2) + ".0 && ";
  }
  s += "  const int nr = " + when +
       "nall < ((int64_t)1 << 31) ? (nthreads < FUSOR_RANGES ? nthreads : FUSOR_RANGES) : 0;\n";
  s += "  for (int t = 0; t < nr; ++t)\n";
  s += "    range[t] = fusor_range_word(t * nall / nr, (t + 1) * nall / nr);\n";
  return s;
}

// The KV head that (batch x head) index `bh` reads, as a C expression (grouped-query heads).
std::string kv_head_of(const std::string& bh) {
  return "(" + bh + " / heads) * kv_heads + (" + bh + " % heads) / group";
}

// Tuning::qgrow applies: the AMX lane's non-causal items from ranges with thread-local packs
// (local_packs), whose block steps are pipelined within an item. Causal pairs never grow:
// their ranges hold pairs, not query blocks.
bool growing_items(const Tuning& tuning, bool local, bool causal) {
  return tuning.amx && local && !causal && tuning.qgrow != 0;
}

// Emitted: sets u (first block) and qn (blocks, 0 when none is left) of the thread's next run
// (query_block_ranges says how; nr = 0: from the counter).
// one_at_a_time: causal pairs, claimed one at a time; else runs of two to qs blocks.
// local: the thread packs its item's head itself (lpack, lhead), so a steal from another head
// costs that head's packing: with Tuning::xsteal, ranges of the thread's own head go first,
// and another head's only while it has xsteal blocks left.
std::string claim_query_blocks(const Tuning& tuning, bool one_at_a_time = false, bool local = false) {
  const std::string qs = one_at_a_time ? "1" : "qs";
  const auto run_floor = [&](const std::string& indent, int least = 2) {
    const std::string n = std::to_string(least);
    return one_at_a_time || least <= 1 ? std::string() : indent + "qn = qn < " + n + " ? " + n + " : qn;\n";
  };
  const std::string counter =
      std::string("        u = __atomic_load_n(&claim, __ATOMIC_RELAXED);\n"
                  "        while (u < nall) {\n"
                  "          const int64_t in_head = nqm - u % nqm;\n"
                  "          qn = fusor_cdiv(nall - u, 2 * nthreads);\n") +
      run_floor("          ") + "          qn = qn > " + qs + " ? " + qs +
      " : qn; /* the scratch holds qs blocks */\n"
      "          qn = qn > in_head ? in_head : qn;\n"
      "          if (__atomic_compare_exchange_n(&claim, &u, u + qn, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) break;\n"
      "        }\n"
      "        if (u >= nall) qn = 0;\n";
  if (tuning.claim == 0) return "      {\n" + counter + "      }\n";
  std::string s = "      if (nr == 0) {\n" + counter + "      } else {\n";
  const bool by_head = local && tuning.xsteal > 0;
  if (by_head) s += "        int team = 1;\n#ifdef _OPENMP\n        team = omp_get_num_threads();\n#endif\n";
  // Own range: from the front.
  s += "        if (me < nr) {\n";
  s += "          uint64_t w = __atomic_load_n(range + me, __ATOMIC_RELAXED);\n";
  s += "          for (;;) {\n";
  s += "            const int64_t lo = fusor_range_lo(w), hi = fusor_range_hi(w);\n";
  s += "            if (lo >= hi) { qn = 0; break; }\n";
  s += "            const int64_t in_head = nqm - lo % nqm;\n";
  s += std::string("            qn = ") + (tuning.qrun ? "hi - lo" : "fusor_cdiv(hi - lo, 2)") + ";\n";
  s += run_floor("            ", tuning.qmin);
  if (growing_items(tuning, local, one_at_a_time))
    s += "            if (Nk <= NB) qn = 1; /* it grows (grow_item) */\n";
  s += "            qn = qn > " + qs + " ? " + qs + " : qn;\n";
  s += "            qn = qn > in_head ? in_head : qn;\n";
  s += "            qn = qn > hi - lo ? hi - lo : qn;\n";
  s += "            u = lo;\n";
  s += "            if (__atomic_compare_exchange_n(range + me, &w, fusor_range_word(lo + qn, hi), 0,\n";
  s += "                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED)) break;\n";
  s += "          }\n        }\n";
  // Out of own blocks: from the back of the range with most left; none left anywhere ends.
  s += "        while (qn == 0) {\n";
  s += "          int victim = -1;\n          int64_t most = 0;\n";
  s += "          for (int t = 0; t < nr; ++t) {\n";
  s += "            const uint64_t w = __atomic_load_n(range + t, __ATOMIC_RELAXED);\n";
  s += "            int64_t left = fusor_range_hi(w) - fusor_range_lo(w);\n";
  if (by_head) {
    // (Own head first: its left counts above any other head's; another head's below xsteal
    // blocks, not at all, unless no thread of the team owns that range (a team smaller than
    // nr: serial calls): then only a thief computes them.)
    s += "            if (lpack && left > 0) {\n";
    s += "              const int64_t vb = (fusor_range_hi(w) - 1) / nqm;\n";
    s += "              const int64_t vkv = " + kv_head_of("vb") + ";\n";
    s += "              left = vkv == lhead || t >= team ? left + nall : left >= " + std::to_string(tuning.xsteal) +
         " ? left : 0;\n";
    s += "            }\n";
  }
  s += "            if (left > most) most = left, victim = t;\n";
  s += "          }\n";
  s += "          if (victim < 0) break;\n";
  s += "          uint64_t w = __atomic_load_n(range + victim, __ATOMIC_RELAXED);\n";
  s += "          const int64_t lo = fusor_range_lo(w), hi = fusor_range_hi(w);\n";
  s += "          if (lo >= hi) continue;\n";
  s += "          const int64_t in_head = (hi - 1) % nqm + 1;\n";
  s += "          int64_t take = fusor_cdiv(hi - lo, 2);\n";
  s += "          take = take > " + qs + " ? " + qs + " : take;\n";
  s += "          take = take > in_head ? in_head : take;\n";
  s += "          if (__atomic_compare_exchange_n(range + victim, &w, fusor_range_word(lo, hi - take), 0,\n";
  s += "                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED))\n";
  s += "            u = hi - take, qn = take;\n";
  s += "        }\n      }\n";
  return s;
}

} // namespace

std::string fenced_barrier() { return "    _mm_sfence();\n    #pragma omp barrier\n"; }

// Helpers every attention kernel of these lanes may call: the range words of
// query_block_ranges, then the P·V and block-step source of the lane.
std::string attention_helper_source(const AttentionRegion& r, const StorageLoad& ld, const Tuning& tuning) {
  std::string s = "#define FUSOR_NB " + std::to_string(tuning.nb) + "\n";
  s += "static inline int64_t fusor_range_lo(uint64_t w) { return (int64_t)(w & 0xFFFFFFFFu); }\n"
       "static inline int64_t fusor_range_hi(uint64_t w) { return (int64_t)(w >> 32); }\n"
       "static inline uint64_t fusor_range_word(int64_t lo, int64_t hi) {\n"
       "  return (uint64_t)lo | (uint64_t)hi << 32;\n}\n";
  if (tuning.amx) return s + fusor_pv_source(true) + amx_attention_step_source();
  if (!tuning.avx2) return s + fusor_pv_source(false) + half_micro_kernel_source(tuning.mr);
  // (The AVX2 lane's P·V is its GEMM micro-kernel reading P's rows in place.)
  s += avx2_rows_kernel_source(tuning.mr);
  if (!r.k_transposed()) s += avx2_transpose8_source();
  if (attention_reads_q_in_place(r, ld, tuning)) s += avx2_direct_ukr(tuning.mr, "fusor_ukr_q", true);
  return s;
}

std::string rescale_factor(const std::string& from, const std::string& to, const std::string& exp_diff) {
  // A row's first block rescales nothing (e^-inf = 0): computing it went through a denormal
  // 2^n product, a microcode assist per row and block that took 40 % of a small head's time.
  return from + " == " + to + " ? 1.0f : (" + from + " == -INFINITY ? 0.0f : " + exp_diff + ")";
}

std::string online_softmax_rescale(const std::string& exp_dm, const std::string& dscale) {
  std::string s = "          const float mo = mrow[rr], mn = mo > bm ? mo : bm;\n";
  s += "          const float dm = " + (dscale.empty() ? std::string("mo - mn") : "(mo - mn) * (" + dscale + ")") +
       ";\n";
  return s + "          const float alpha = " + rescale_factor("mo", "mn", exp_dm) + ";\n";
}

// The table's e^d, evaluated as 2^(d·log2 e) with log2 e folded into the fmsub's scale:
// maxima, d and the rescale exponent are then in base-2 units, and fusor_exp2f16 needs no
// Cody-Waite reduction nor rounding (9 instructions per 16 probabilities instead of 14). Only
// where the table spells the accumulate step as expf, so a changed formula is never misread.
bool softmax_exp_is_expf() {
  return codegen::render_row_norm_accumulate(codegen::c99_avx512_dialect(), RowNorm::softmax, "@") ==
             "fusor_expf16(@)" &&
         codegen::render_row_norm_accumulate(codegen::c99_avx2_dialect(), RowNorm::softmax, "@") == "fusor_expf8(@)" &&
         codegen::render_row_norm_accumulate(c99_simd_dialect(), RowNorm::softmax, "dm") == "fusor_expf(dm)";
}

bool attention_softmax_in_base2(const AttentionRegion& r) { return r.scale() > 0 && softmax_exp_is_expf(); }

namespace {

// Whether the items of the AVX-512 lanes read K packed by their own thread (the AMX lane's V
// too), one head at a time, where the threads work from ranges: non-causal items and causal
// pairs (byhead = 3; Tuning::lpack says why). f32 storage only: the AMX lane's 16-bit head
// whose V is not all finite needs every head's V widened before the items, as the zmm lane's
// 16-bit V always is.
bool local_packs(const AttentionRegion& r, const StorageLoad& ld, const Tuning& tuning) {
  return !tuning.avx2 && tuning.lpack && (!r.causal() || tuning.byhead == 3) && tuning.claim != 0 &&
         ld.dtype == DType::f32;
}

// Whether Tuning::zpv is `zpv` for this region. zv, emitted after vfin (zpv_choice), says
// whether an item's P·V runs on zmm FMAs between the tile products. On the AMX lane a block
// step is the tiles' work (both products, six part products each for f32) and the vector
// units' (the softmax, the probabilities' parts): at full tile rate the tiles take about twice
// the vector units' time, and the lent hosts slow the tiles to a third on many threads. If
// only the tiles slowed, P·V on zmm (half the tiles' work moved onto the FMAs, no parts to
// split) would halve such a thread's steps; run bn measured the slow threads no faster with it
// (decisions.md, "P·V on zmm beside slowed tiles"). With zpv = 2 each thread keeps its items'
// cycles per query-key (an average over recent items) for either way, takes the cheaper one
// and, every 32nd item, the other, so a thread follows its own tiles' rate as it changes.
// Outputs differ between the two by f32 rounding only. f32 storage only: the zmm P·V reads V
// as f32, which 16-bit storage widens only for heads whose V is not all finite.
bool zpv_applies(const Tuning& tuning, const StorageLoad& ld, int zpv) {
  return tuning.zpv == zpv && ld.dtype == DType::f32;
}

// zv's statements.
std::string zpv_choice(const Tuning& tuning, const StorageLoad& ld) {
  std::string s = "      int zv = !vfin; /* P·V on zmm */\n";
  if (zpv_applies(tuning, ld, 1)) s += "      zv = 1;\n";
  if (!zpv_applies(tuning, ld, 2)) return s;
  s += "      static _Thread_local double zcost[2]; /* cycles per query-key, tiles and zmm */\n";
  s += "      static _Thread_local unsigned zitems;\n";
  s += "      if (!zv) {\n";
  s += "        zv = zcost[0] == 0.0 ? 0 : zcost[1] == 0.0 ? 1 : zcost[1] < zcost[0];\n";
  s += "        if (++zitems % 32 == 0) zv ^= 1;\n";
  s += "      }\n";
  return s;
}

// With zpv = 2: the start of an item's block steps, and their cycles per query-key after them.
std::string zpv_clock_start(const Tuning& tuning, const StorageLoad& ld) {
  return zpv_applies(tuning, ld, 2) ? "      const uint64_t zt0 = __builtin_ia32_rdtsc();\n" : "";
}

std::string zpv_clock_end(const Tuning& tuning, const StorageLoad& ld) {
  if (!zpv_applies(tuning, ld, 2)) return "";
  return "      if (qrows * n_all > 0) {\n"
         "        const double x = (double)(__builtin_ia32_rdtsc() - zt0) / (double)(qrows * n_all);\n"
         "        zcost[zv] = zcost[zv] == 0.0 ? x : 0.75 * zcost[zv] + 0.25 * x;\n"
         "      }\n";
}

// Tuning::trace: each thread's phases in cycles since the call began (enter, K packed, V packed,
// items done) and its items' counts and cycles (query packing, block steps, output rows),
// summed over 64 calls and printed on stdout, so a many-thread host shows where a call's time
// goes. Empty without the knob. The slots of a thread's row (trw), in the printed order:
enum TraceSlot {
  kEntered,
  kKPacked,
  kVPacked,
  kItemsDone,
  kItems,
  kQueryPacking,
  kBlockSteps,
  kOutputRows,
  kLocalPacks, // (heads the thread packed itself: lpack)
  kZmmItems,   // (items whose P·V ran on zmm: zpv)
  kTraceSlots
};

std::string trace_mark(const Tuning& tuning, TraceSlot slot) {
  return tuning.trace ? "    trw[" + std::to_string(slot) + "] += __builtin_ia32_rdtsc() - tr0;\n" : "";
}

// An item's start: counts it and starts its clock (tri).
std::string trace_item_begin(const Tuning& tuning) {
  if (!tuning.trace) return "";
  return "      uint64_t tri = __builtin_ia32_rdtsc();\n      trw[" + std::to_string(kItems) + "] += 1;\n";
}

// The end of an item's phase `slot`: its cycles since the last mark.
std::string trace_item(const Tuning& tuning, TraceSlot slot) {
  if (!tuning.trace) return "";
  return "      { const uint64_t trn = __builtin_ia32_rdtsc(); trw[" + std::to_string(slot) +
         "] += trn - tri; tri = trn; }\n";
}

// Emitted at the top of an item's step loop (amx_attention_steps' `grow`): before its last
// planned step, while the item has fewer than qs blocks and one key block, the thread takes
// the next query block of its own range when that is the item's next block of the same head,
// and packs it, so the item's steps go on in one pipeline.
// Its query packing counts in the trace's query-packing column, not in the block steps'.
std::string grow_item(const AttentionRegion& r, const StorageLoad& ld, const Tuning& tuning) {
  std::string s;
  s += "        if (lpack && t + 1 >= nsteps && nsub < qs && Nk <= NB) {\n";
  s += "          uint64_t w = me < nr ? __atomic_load_n(range + me, __ATOMIC_RELAXED) : 0;\n";
  s += "          while (me < nr) {\n";
  s += "            const int64_t lo = fusor_range_lo(w), hi = fusor_range_hi(w);\n";
  s += "            if (lo >= hi || lo != u + nsub || lo % nqm == 0) break;\n";
  s += "            if (!__atomic_compare_exchange_n(range + me, &w, fusor_range_word(lo + 1, hi), 0,\n";
  s += "                                             __ATOMIC_RELAXED, __ATOMIC_RELAXED))\n";
  s += "              continue;\n";
  if (tuning.trace) s += "            const uint64_t trg = __builtin_ia32_rdtsc();\n";
  s += "            const int64_t sb = nsub, i0 = q0 + sb * FUSOR_MR;\n";
  s += amx_attention_pack_q(r, ld, packs_prefetch(tuning));
  if (tuning.trace)
    s += "            { const uint64_t trd = __builtin_ia32_rdtsc() - trg; trw[" + std::to_string(kQueryPacking) +
         "] += trd; tri += trd; }\n";
  s += "            if (zv) memset(ob + sb * MRP * LDO, 0, sizeof(float) * (size_t)(MRP * LDO));\n";
  s += "            ++nsub, nsteps = nsub;\n";
  s += "            qrows = M - q0 < nsub * FUSOR_MR ? M - q0 : nsub * FUSOR_MR;\n";
  s += "            break;\n          }\n        }\n";
  return s;
}

std::string trace_begin(const Tuning& tuning) {
  if (!tuning.trace) return "";
  return "  enum { FUSOR_TRT = 256 };\n"
         "  static uint64_t fusor_tr[FUSOR_TRT][" +
         std::to_string(kTraceSlots) +
         "], fusor_trn, fusor_trt, fusor_trlast;\n"
         "  uint64_t trlast = 0; /* this call's last thread out of items */\n"
         "  const uint64_t tr0 = __builtin_ia32_rdtsc();\n";
}

// A thread out of items: its mark, and the call's last such time (trlast), so the trace tells a
// call's imbalance (the last thread per call, not the slowest on average) from its join.
std::string trace_items_done(const Tuning& tuning) {
  if (!tuning.trace) return "";
  return trace_mark(tuning, kItemsDone) + "    {\n      const uint64_t d = __builtin_ia32_rdtsc() - tr0;\n"
                                          "      uint64_t m = __atomic_load_n(&trlast, __ATOMIC_RELAXED);\n"
                                          "      while (d > m && !__atomic_compare_exchange_n(&trlast, &m, d, 0, "
                                          "__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {\n"
                                          "      }\n    }\n";
}

std::string trace_thread(const Tuning& tuning) {
  if (!tuning.trace) return "";
  return "    uint64_t* const trw = fusor_tr[me < FUSOR_TRT ? me : FUSOR_TRT - 1];\n" + trace_mark(tuning, kEntered);
}

std::string trace_end(const Tuning& tuning) {
  static_assert(kTraceSlots == 10, "the printf below prints slots w[0] to w[9]");
  if (!tuning.trace) return "";
  std::string s = "  fusor_trt += __builtin_ia32_rdtsc() - tr0;\n  fusor_trlast += trlast;\n";
  s += "  if (++fusor_trn == 64) {\n";
  s += "    int nt = 1;\n#ifdef _OPENMP\n    nt = omp_get_max_threads();\n#endif\n";
  s += "    __builtin_printf(\"trace: 64 calls, %.1f kcycles a call; each thread's kcycles a call: entered, K packed, "
       "V packed, items done | items a call, query packing, block steps, output rows | heads packed, items with PV "
       "on zmm a call; the "
       "last thread out of items at %.1f\\n\", fusor_trt / 64e3, fusor_trlast / 64e3);\n";
  s += "    for (int t = 0; t < nt && t < FUSOR_TRT; ++t) {\n";
  s += "      const uint64_t* w = fusor_tr[t];\n";
  s += "      __builtin_printf(\"trace: thread %2d %8.1f %8.1f %8.1f %8.1f | %6.2f %8.1f %8.1f %8.1f | %5.2f "
       "%5.2f\\n\", t, "
       "w[0] / 64e3, w[1] / 64e3, w[2] / 64e3, w[3] / 64e3, w[4] / 64.0, w[5] / 64e3, w[6] / 64e3, w[7] / 64e3, "
       "w[8] / 64.0, w[9] / 64.0);\n";
  s += "    }\n";
  s += "    memset(fusor_tr, 0, sizeof fusor_tr);\n";
  s += "    fusor_trn = fusor_trt = fusor_trlast = 0;\n";
  s += "  }\n";
  return s;
}

// The end of packing the vector lanes' K panel hb (keys n0 .. n0 + w of head `kh`, w <= 32)
// into dst, kp's panel hb of [D][32] floats: the features from c0 on (those the register
// transpose left) one at a time, and zeros past key w.
std::string vector_pack_k_tail(const StorageLoad& ld) {
  return "      for (int64_t j = 0; j < w; ++j)\n"
         "        for (int64_t c = c0; c < D; ++c) dst[c * 32 + j] = " +
         ld.load("kh", "(n0 + j) * D + c") +
         ";\n"
         "      for (int64_t c = c0; c < D; ++c)\n        for (int64_t j = w; j < 32; ++j) dst[c * 32 + j] = 0.0f;\n";
}

// The zmm lane's K panel hb, as vector_pack_k_tail says: whole panels go 16 keys x 16 features
// at a time through the register transpose, 16-bit storage widened as it is loaded; K
// transposed is copied (this too on the ymm lane).
std::string vector_attention_pack_k(const AttentionRegion& r, const StorageLoad& ld, bool stream) {
  std::string s = "      float* restrict dst = kp + hb * D * 32;\n";
  if (r.k_transposed()) {
    s += "      for (int64_t c = 0; c < D; ++c) {\n";
    s += "        for (int64_t j = 0; j < w; ++j) dst[c * 32 + j] = " + ld.load("kh", "c * Nk + n0 + j") + ";\n";
    s += "        for (int64_t j = w; j < 32; ++j) dst[c * 32 + j] = 0.0f;\n      }\n";
    return s;
  }
  s += "      int64_t c0 = 0;\n";
  s += "      if (w == 32)\n        for (; c0 + 16 <= D; c0 += 16)\n          for (int64_t jh = 0; jh < 32; jh += "
       "16) {\n";
  s += transpose16_slab("kh + (n0 + jh + r) * D + c0", "16", {}, "dst + (c0 + c) * 32 + jh", "(__mmask16)0xFFFF",
                        "            ", stream, &ld);
  s += "          }\n";
  return s + vector_pack_k_tail(ld);
}
} // namespace

std::string attention_body(const AttentionRegion& r, const StorageLoad& ld, const Tuning& given) {
  const Tuning tuning = with_item_defaults(given, r.causal());
  const bool amx = tuning.amx;   // both products on AMX tiles (x86_amx_attention.cpp)
  const bool avx2 = tuning.avx2; // both products on the AVX2 micro-kernel (x86_avx2_attention.cpp)
  const auto& d = c99_simd_dialect();
  const auto& v = codegen::c99_avx512_dialect();
  const std::string T = ld.type;
  const bool f32 = T == "float";
  const bool causal = r.causal();
  const bool q_in_place = attention_reads_q_in_place(r, ld, tuning);
  const bool local = local_packs(r, ld, tuning);
  std::string s;
  s += "  const " + T + "* restrict Q = (const " + T + "*)operands[0];\n";
  s += "  const " + T + "* restrict Kt = (const " + T + "*)operands[1];\n";
  s += "  const " + T + "* restrict V = (const " + T + "*)operands[2];\n";
  s += "  const int64_t group = heads / kv_heads;\n";
  s += "  const int64_t nbh = batch * heads, nkv = batch * kv_heads;\n";
  s += "  const float scale = " + codegen::float_literal(r.scale()) + ";\n";
  s += "  if (nbh == 0 || M == 0 || Dv == 0) return 0;\n";
  s += "  if (Nk == 0) { memset(out, 0, sizeof(float) * (size_t)(nbh * M * Dv)); return 0; }\n";
  if (attention_reads_few_queries(tuning)) s += attention_few_queries_dispatch(r, tuning);
  // Key block (a multiple of the 32-key panel) and the rows of the padded query block.
  s += "  const int64_t NB = FUSOR_NB;\n";
  s += avx2 ? "  const int64_t MRP = FUSOR_MR;\n"
            : "  const int64_t MRP = fusor_cdiv(FUSOR_MR, FUSOR_PVR) * FUSOR_PVR;\n";
  // Output rows of a block: AMX and the AVX2 micro-kernel store whole 32-column tiles.
  s += amx || avx2 ? "  const int64_t LDO = fusor_cdiv(Dv, 32) * 32;\n" : "  const int64_t LDO = Dv;\n";
  s += "  enum { QS = " + std::to_string(amx ? kAmxQueryBlocks : kQueryBlocks) + " };\n";
  s += "  int nthreads = 1;\n#ifdef _OPENMP\n  nthreads = omp_get_max_threads();\n#endif\n";
  s += "  int64_t qs = fusor_cdiv(M, FUSOR_MR) * nbh / (" + std::to_string(tuning.qitems) + " * nthreads);\n";
  s += "  qs = qs < 1 ? 1 : (qs > QS ? QS : qs);\n";
  if (tuning.qs > 0) s += "  qs = " + std::to_string(tuning.qs) + " < QS ? " + std::to_string(tuning.qs) + " : QS;\n";
  s += "  const int64_t nkb = fusor_cdiv(Nk, 32);\n";
  if (amx) {
    s += "  if (!fusor_amx_permit()) return " + std::to_string(codegen::kKernelNoTileState) + ";\n";
    // Tuning::ppf: the packs' prefetches, by default for teams of fewer than 16 threads.
    if (packs_prefetch(tuning))
      s +=
          std::string("  const int ppf = ") + (tuning.ppf > 0 ? "1" : "nthreads < 16") + "; /* the packs prefetch */\n";
    s += "  const int64_t Dp = D > 0 ? fusor_cdiv(D, 32) * 32 : 32; /* features in whole tile steps */\n";
    // V as bf16 parts in 32-column panels over all keys (P·V's B side). Bytes of one KV head's
    // packed K, its flags, packed V and its flags (kp, kf, vp, vfl: every head's, or with
    // thread-local packs one head's a thread).
    s += "  const int64_t ndp = fusor_cdiv(Dv, 32), Nkp = nkb * 32;\n";
    s += "  const size_t kpn = 2 * (size_t)(nkb * FUSOR_NSB * Dp * 32), kfn = (size_t)(nkb * 32),\n"
         "               vpn = 2 * (size_t)(ndp * FUSOR_NSV * Nkp * 32), vfn = (size_t)ndp;\n";
  } else {
    // (With thread-local packs, which the ranges decide, allocated below.)
    s += "  const size_t kpn = sizeof(float) * (size_t)(nkb * (D > 0 ? D : 1) * 32); /* one head's panels */\n";
    if (!local) s += "  float* restrict kp = (float*)fusor_scratch(0, kpn * nkv);\n  if (!kp) return 2;\n";
  }
  if (avx2) {
    s += avx2_attention_v_source(f32);
  } else if (!f32) {
    s += "  float* restrict vf = (float*)fusor_scratch(4, sizeof(float) * (size_t)(nkv * Nk * Dv));\n";
    s += "  if (!vf) return 2;\n";
  }
  s += "  int failed = 0;\n";
  // Causal pairs (byhead = 3; Tuning::byhead says why): claimed as query blocks are, from the
  // (head, pair) sequence.
  const bool pairs = causal && tuning.byhead == 3;
  if (pairs) s += "  const int64_t nqb = fusor_cdiv(M, qs * FUSOR_MR);\n" + query_block_ranges(tuning, "(nqb + 1) / 2");
  if (!causal) s += query_block_ranges(tuning);
  if (amx) {
    s += std::string("  const int lpack = ") + (local ? "nr > 0" : "0") + ";\n";
    s += "  uint16_t* kpa = NULL; unsigned char* kfa = NULL; uint16_t* vpa = NULL; unsigned char* vfla = NULL;\n";
    s += "  if (!lpack) {\n";
    s += "    kpa = (uint16_t*)fusor_scratch(0, kpn * nkv), kfa = (unsigned char*)fusor_scratch(1, kfn * nkv);\n";
    s += "    vpa = (uint16_t*)fusor_scratch(2, vpn * nkv), vfla = (unsigned char*)fusor_scratch(3, vfn * nkv);\n";
    s += "    if (!kpa || !kfa || !vpa || !vfla) return 2;\n  }\n";
  } else if (local) {
    s += "  const int lpack = nr > 0;\n";
    s += "  float* kpa = NULL;\n";
    s += "  if (!lpack && !(kpa = (float*)fusor_scratch(0, kpn * nkv))) return 2;\n";
  }
  s += trace_begin(tuning);
  s += "  " + omp_parallel("nbh * M * Nk * (D + Dv)") + "\n  {\n";
  // This thread's number, for its range (claim_query_blocks, grow_item) and its trace row.
  s += "    int me = 0;\n#ifdef _OPENMP\n    me = omp_get_thread_num();\n#endif\n";
  if (amx) {
    s += "    fusor_amx_config();\n";
    // This thread's packed K and V: every head's, shared, or with thread-local packs the head
    // of its last item (lhead).
    s += "    uint16_t* restrict kp = kpa; unsigned char* restrict kf = kfa;\n";
    s += "    uint16_t* restrict vp = vpa; unsigned char* restrict vfl = vfla;\n";
    s += "    int64_t lhead = -1;\n";
    s += "    if (lpack) {\n";
    s += "      kp = (uint16_t*)fusor_scratch(0, kpn), kf = (unsigned char*)fusor_scratch(1, kfn);\n";
    s += "      vp = (uint16_t*)fusor_scratch(2, vpn), vfl = (unsigned char*)fusor_scratch(3, vfn);\n";
    s += "    }\n";
  } else if (local) {
    // This thread's packed K: every head's, shared, or the head of its last item (lhead).
    s += "    float* restrict kp = lpack ? (float*)fusor_scratch(0, kpn) : kpa;\n";
    s += "    int64_t lhead = -1;\n";
  }
  s += trace_thread(tuning);
  // K of every KV head, packed once: [head][key panel][D][32], keys past Nk zero.
  const bool kstream = streams_k_panels(r, tuning);
  if (amx || local) s += "    if (!lpack) {\n";
  s += std::string("    #pragma omp for schedule(static)") + (kstream ? " nowait" : "") + "\n";
  s += "    for (int64_t hb = 0; hb < nkv * nkb; ++hb) {\n";
  s += "      const int64_t head = hb / nkb, n0 = (hb % nkb) * 32;\n";
  s += "      const int64_t w = Nk - n0 < 32 ? Nk - n0 : 32;\n";
  s += "      const " + T + "* restrict kh = Kt + head * Nk * D;\n";
  if (amx) {
    s += amx_attention_pack_k(r, ld, kstream, packs_prefetch(tuning));
  } else if (avx2 && !r.k_transposed()) {
    // (The ymm lane's register transpose: 8 keys x 8 features at a time.)
    s += "      float* restrict dst = kp + hb * D * 32;\n      int64_t c0 = 0;\n" + avx2_attention_pack_k(ld, kstream) +
         vector_pack_k_tail(ld);
  } else {
    s += vector_attention_pack_k(r, ld, kstream);
  }
  s += "    }\n";
  // (With streaming stores the AMX lane packs V straight after K, which it does not read, and
  // fences once after both.)
  if (kstream && !amx) s += fenced_barrier();
  if (local && !amx) s += "    }\n";
  s += trace_mark(tuning, kKPacked);
  const std::string v_to_f32 = "    #pragma omp for schedule(static)\n"
                               "    for (int64_t e = 0; e < nkv * Nk * Dv; ++e) vf[e] = " +
                               ld.load("V", "e") + ";\n";
  if (amx) {
    s += amx_attention_pack_v(ld, kstream, packs_prefetch(tuning));
    if (kstream) s += fenced_barrier();
    s += "    }\n";
    // 16-bit V in f32 only for the zmm P·V of heads whose V is not all finite.
    if (!f32)
      s += "    int vany = 0;\n    for (int64_t hp = 0; hp < nkv * ndp; ++hp) vany |= vfl[hp];\n    if (vany) {\n" +
           v_to_f32 + "    }\n";
  } else if (avx2) {
    s += avx2_attention_pack_v(ld, kstream);
  } else if (!f32) {
    // 16-bit V widened 16 at a time; streamed, as K's panels, for the same reason.
    s += "    #pragma omp for schedule(static) nowait\n";
    s += "    for (int64_t e = 0; e < nkv * Nk * Dv; e += 16) {\n";
    s += "      const int64_t left = nkv * Nk * Dv - e;\n";
    s += "      if (left >= 16)\n        _mm512_stream_ps(vf + e, " + ld.load16("(__mmask16)0xFFFF", "V + e") + ");\n";
    s += "      else\n        _mm512_mask_storeu_ps(vf + e, (__mmask16)((1u << left) - 1u), " +
         ld.load16("(__mmask16)((1u << left) - 1u)", "V + e") + ");\n    }\n";
    s += fenced_barrier();
  }
  s += trace_mark(tuning, kVPacked);
  if (!avx2) s += "    const float* restrict vall = " + std::string(f32 ? "V" : "vf") + ";\n";
  // Per thread: QS packed query blocks [QS][D][MR], their output rows [QS * MRP][Dv] and
  // running max/sum, and the scores -> probabilities of one block [MRP][NB] (rows past the
  // micro-kernel's MR stay zero).
  if (amx)
    s += "    uint16_t* qp = (uint16_t*)fusor_scratch(5, 2 * (size_t)(qs * FUSOR_NSA * Dp * 32));\n"
         "    unsigned char qfl[QS * FUSOR_MR];\n";
  else
    s += "    float* qp = (float*)fusor_scratch(5, sizeof(float) * (size_t)(qs * (D > 0 ? D : 1) * FUSOR_MR));\n";
  s += "    float* ob = (float*)fusor_scratch(6, sizeof(float) * (size_t)(qs * MRP * LDO));\n";
  // (AMX: two of them, each followed by P's bf16 parts: a block step's softmax runs while the
  // tiles compute the next step's scores and the previous step's P·V.)
  s += "    const size_t spn = (size_t)(MRP * NB" + std::string(amx ? " + FUSOR_NSP * NB * 16" : "") + ");\n";
  s += std::string("    float* sp = (float*)fusor_scratch(7, sizeof(float) * spn") + (amx ? " * 2" : "") + ");\n";
  s += "    float mall[QS * FUSOR_MR], lall[QS * FUSOR_MR];\n";
  const std::string scratch_ok = std::string("qp && ob && sp") + (amx     ? " && kp && kf && vp && vfl"
                                                                  : local ? " && kp"
                                                                          : "");
  s += "    if (!(" + scratch_ok + ")) {\n      #pragma omp atomic write\n      failed = 1;\n    } else {\n";
  // Every step writes the scores of rows below FUSOR_MR; only the padding rows are zeroed here
  // (zeroing whole buffers took 1.3 % of attention's time at S = 512).
  s += "      for (int b_ = 0; b_ < " + std::string(amx ? "2" : "1") +
       "; ++b_) memset(sp + b_ * spn + FUSOR_MR * NB, 0, sizeof(float) * (size_t)((MRP - FUSOR_MR) * NB));\n    }\n";
  if (pairs) {
    // Pair pk of a head: its items nqb - 1 - pk and pk (one when they meet), one after the other.
    s += "    for (;;) {\n";
    s += "      int64_t u = 0, qn = 0;\n";
    s += claim_query_blocks(tuning, true);
    s += "      if (qn == 0) break;\n";
    s += "      if (!(" + scratch_ok + ")) continue;\n";
    s += "      const int64_t bh = u / nqm, pk = u % nqm;\n";
    s += "      for (int64_t e = 0; e < (nqb - 1 - pk == pk ? 1 : 2); ++e) {\n";
    s += "      const int64_t q0 = (e == 0 ? nqb - 1 - pk : pk) * qs * FUSOR_MR;\n";
    s += "      qn = qs;\n";
  } else if (causal) {
    // Causal items grow with their query block: the last blocks go first, so the dynamic
    // schedule ends on small items instead of one thread finishing a large one alone. In what
    // order of heads, causal_items_by_head says.
    s += "    const int64_t nqb = fusor_cdiv(M, qs * FUSOR_MR);\n";
    s += "    const int by_head = " + causal_items_by_head(tuning) + ";\n";
    s += "    #pragma omp for schedule(dynamic, 1)\n";
    s += "    for (int64_t item = 0; item < nbh * nqb; ++item) {\n";
    s += "      if (!(" + scratch_ok + ")) continue;\n";
    s += "      const int64_t bh = by_head ? item / nqb : item % nbh;\n";
    s += "      const int64_t q0 = (nqb - 1 - (by_head ? item % nqb : item / nbh)) * qs * FUSOR_MR, qn = qs;\n";
  } else {
    // Items of up to qs query blocks within one head (claim_query_blocks).
    s += "    for (;;) {\n";
    s += "      int64_t u = 0, qn = 0;\n";
    s += claim_query_blocks(tuning, false, local);
    s += "      if (qn == 0) break;\n";
    s += "      if (!(" + scratch_ok + ")) continue;\n";
    s += "      const int64_t bh = u / nqm, q0 = (u % nqm) * FUSOR_MR;\n";
  }
  s += "      const int64_t kvh = " + kv_head_of("bh") + ";\n";
  s += "      int64_t qrows = M - q0 < qn * FUSOR_MR ? M - q0 : qn * FUSOR_MR, nsub = fusor_cdiv(qrows, FUSOR_MR);\n";
  s += "      const " + T + "* restrict qh = Q + bh * M * D;\n";
  if (amx) s += "      const " + T + "* restrict kh = Kt + kvh * Nk * D;\n";
  s += trace_item_begin(tuning);
  // The packed K (AMX: and V) of this item's head (kvp: its index among them), with local
  // packs packed here when the thread's head changes. (The AMX lane's kh is the item's.)
  if (amx || local) s += "      const int64_t kvp = lpack ? 0 : kvh;\n";
  if (local) {
    s += "      if (lpack && kvh != lhead) {\n";
    if (!amx) s += "        const " + T + "* restrict kh = Kt + kvh * Nk * D;\n";
    s += "        for (int64_t hb = 0; hb < nkb; ++hb) {\n";
    s += "          const int64_t n0 = hb * 32, w = Nk - n0 < 32 ? Nk - n0 : 32;\n";
    s += amx ? amx_attention_pack_k(r, ld, false, packs_prefetch(tuning)) : vector_attention_pack_k(r, ld, false);
    s += "        }\n";
    if (amx)
      s += "        for (int64_t hp = 0; hp < ndp; ++hp) {\n" +
           amx_attention_pack_v_panel(ld, false, packs_prefetch(tuning), "kvh") + "        }\n";
    s += "        lhead = kvh;\n";
    if (tuning.trace) s += "        trw[" + std::to_string(kLocalPacks) + "] += 1;\n";
    s += "      }\n";
  }
  s += "      for (int64_t sb = 0; sb < nsub; ++sb) {\n";
  s += "        const int64_t i0 = q0 + sb * FUSOR_MR;\n";
  if (amx) {
    s += amx_attention_pack_q(r, ld, packs_prefetch(tuning)) + "      }\n";
  } else {
    if (q_in_place) s += "        if (i0 + FUSOR_MR <= M) continue; /* read where it lies */\n";
    s += "        float* restrict dst = qp + sb * D * FUSOR_MR;\n";
    s += "        int64_t c0 = 0;\n";
    // Whole query blocks go 16 features at a time through the register transpose.
    if (!r.q_transposed() && !avx2) {
      s += "        if (i0 + FUSOR_MR <= M)\n          for (; c0 + 16 <= D; c0 += 16) {\n";
      s += transpose16_slab("qh + (i0 + r) * D + c0", "FUSOR_MR", {}, "dst + (c0 + c) * FUSOR_MR",
                            "(__mmask16)((1u << FUSOR_MR) - 1u)", "            ", false, &ld);
      s += "          }\n";
    }
    s += "        for (int64_t rr = 0; rr < FUSOR_MR; ++rr) {\n";
    s += "          const int64_t i = i0 + rr;\n";
    s += "          for (int64_t c = c0; c < D; ++c)\n";
    s += "            dst[c * FUSOR_MR + rr] = i < M ? " + ld.load("qh", r.q_transposed() ? "c * M + i" : "i * D + c") +
         " : 0.0f;\n";
    s += "        }\n      }\n";
  }
  s += trace_item(tuning, kQueryPacking);
  s += "      for (int64_t rr = 0; rr < qs * FUSOR_MR; ++rr) { mall[rr] = -INFINITY; lall[rr] = 0.0f; }\n";
  if (!avx2) s += "      const float* restrict vh = vall + kvh * Nk * Dv;\n";
  if (amx) {
    s += "      int vfin = 1;\n";
    s += "      for (int64_t p = 0; p < ndp; ++p) vfin &= !vfl[kvp * ndp + p];\n";
    s += zpv_choice(tuning, ld);
  }
  // The tile P·V of a query block's first key block starts from zero (cin = 0) and writes
  // every output row the block has, so only the zmm P·V needs zeroed rows.
  s += std::string("      ") + (amx ? "if (zv) " : "") + "memset(ob, 0, sizeof(float) * (size_t)(nsub * MRP * LDO));\n";
  // Top-left causal: query i sees keys 0..i, so a query block needs keys below i0 + rows only.
  s += std::string("      const int64_t n_all = ") + (causal ? "(q0 + qrows < Nk ? q0 + qrows : Nk)" : "Nk") + ";\n";
  // One online-softmax step per row over the block's visible keys (the statements of one
  // row rr, with lim, np and srow; `chunk_tail`, then `hook`, run after each whole 32-key
  // chunk of the exp pass, whose probabilities are e0, e1).
  // Masks of the visible keys among the 32 at j (lim of them are visible from 0).
  const std::string key_masks =
      "            const int64_t rem = lim - j;\n"
      "            const __mmask16 k0 = rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1u);\n"
      "            const __mmask16 k1 = rem >= 32 ? (__mmask16)0xFFFF : (rem > 16 ? (__mmask16)((1u << (rem - 16)) - "
      "1u) : (__mmask16)0);\n";
  // With scale > 0, max(scale * s) = scale * max(s) (rounding is monotonic): the max is taken
  // over the raw scores, the row's state is that raw max m, and e^((s - m) * scale) needs no
  // scaled copy stored. (Not scale * s - scale * m in one fmsub: scale * m rounded shifts every
  // exponent of the row by up to 2^-25 |scale * m|, out of 2^x's range from |scale * m| near
  // 2^31, and such rows came out NaN where the reference is one-hot. The subtraction is exact
  // at the max.)
  const bool fold = r.scale() > 0;
  std::string exp_vec = codegen::render_row_norm_accumulate(v, RowNorm::softmax, "@");
  std::string exp_one = codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dm");
  const bool base2 = attention_softmax_in_base2(r);
  if (base2) exp_vec = "fusor_exp2f16(@)", exp_one = "exp2f(dm)";
  const std::string vscale = base2 ? "scale * 1.44269504088896341f" : "scale";
  // Both passes run whole 32-key chunks without masks, then the one ragged chunk with them.
  const auto chunks = [&](const std::function<std::string(bool)>& step) {
    std::string t = "          int64_t j = 0;\n          for (; j + 32 <= lim; j += 32) {\n" + step(false);
    t += "          }\n          if (j < np) {\n" + key_masks + step(true) + "          }\n";
    return t;
  };
  const auto softmax_row = [&](const std::string& hook, const std::string& chunk_tail) {
    std::string t;
    t += "          const int64_t np = fusor_cdiv(lim, 32) * 32;\n";
    t += "          float* restrict srow = sp + rr * NB;\n";
    // Scaled scores and their max over visible keys; vmaxps returns its second operand when
    // either is NaN, so a NaN score never becomes the max (as the scalar renderer's comparison).
    t += "          const __m512 vs = _mm512_set1_ps(" + vscale + "), ninf = _mm512_set1_ps(-INFINITY);\n";
    t += "          __m512 mx0 = ninf, mx1 = ninf;\n";
    t += "          {\n" + chunks([&](bool masked) {
           std::string u, s0 = "_mm512_loadu_ps(srow + j)", s1 = "_mm512_loadu_ps(srow + j + 16)";
           if (!fold) {
             u += "            const __m512 s0 = _mm512_mul_ps(vs, " + s0 + ");\n";
             u += "            const __m512 s1 = _mm512_mul_ps(vs, " + s1 + ");\n";
             u += "            _mm512_storeu_ps(srow + j, s0);\n            _mm512_storeu_ps(srow + j + 16, s1);\n";
             s0 = "s0", s1 = "s1";
           }
           if (masked) {
             s0 = "_mm512_mask_blend_ps(k0, ninf, " + s0 + ")";
             s1 = "_mm512_mask_blend_ps(k1, ninf, " + s1 + ")";
           }
           u += "            mx0 = _mm512_max_ps(" + s0 + ", mx0);\n";
           u += "            mx1 = _mm512_max_ps(" + s1 + ", mx1);\n";
           return u;
         }) +
         "          }\n";
    t += "          const float bm = _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));\n";
    t += online_softmax_rescale(exp_one, fold ? vscale : "");
    // Probabilities e^(s - m) of the visible keys, 16 at a time through the table's
    // accumulate step rendered over __m512 (masked keys become 0 and never reach the sum).
    t += "          const __m512 vmn = _mm512_set1_ps(mn);\n";
    t += "          __m512 ls0 = _mm512_setzero_ps(), ls1 = _mm512_setzero_ps();\n";
    t += "          {\n" + chunks([&](bool masked) {
           std::string u;
           for (const std::string h : {"0", "1"}) {
             const std::string src = "_mm512_loadu_ps(srow + j" + std::string(h == "1" ? " + 16" : "") + ")";
             u += "            const __m512 d" + h + " = " +
                  (fold ? "_mm512_mul_ps(_mm512_sub_ps(" + src + ", vmn), vs)" : "_mm512_sub_ps(" + src + ", vmn)") +
                  ";\n";
           }
           for (const std::string h : {"0", "1"}) {
             std::string e = exp_vec;
             e.replace(e.find('@'), 1, "d" + h);
             u += "            const __m512 e" + h + " = " +
                  (masked ? "_mm512_maskz_mov_ps(k" + h + ", " + e + ")" : e) + ";\n";
           }
           // The AMX lane reads a whole chunk's probabilities back only for the zmm P·V (a head
           // whose V is not all finite); its split took them from registers.
           const std::string store =
               "_mm512_storeu_ps(srow + j, e0);\n            _mm512_storeu_ps(srow + j + 16, e1);\n";
           u += amx && !masked ? "            if (zv) {\n            " + store + "            }\n"
                               : "            " + store;
           u += "            ls0 = _mm512_add_ps(ls0, e0);\n            ls1 = _mm512_add_ps(ls1, e1);\n";
           return masked ? u : u + chunk_tail + hook;
         }) +
         "          }\n";
    t += "          const float ls = _mm512_reduce_add_ps(_mm512_add_ps(ls0, ls1));\n";
    t += "          lrow[rr] = lrow[rr] * alpha + ls;\n          mrow[rr] = mn;\n";
    if (amx) t += "          if (np < nbkp) memset(srow + np, 0, sizeof(float) * (size_t)(nbkp - np));\n";
    // (nothing to rescale before the AMX lane's first tile P·V of the rows, which starts from zero)
    t += std::string("          if (alpha != 1.0f") + (amx ? " && (n0 > 0 || zv)" : "") +
         ") {\n            float* restrict orow = obs + rr * LDO;\n";
    t += "            #pragma omp simd\n            for (int64_t c = 0; c < Dv; ++c) orow[c] *= alpha;\n          }\n";
    return t;
  };
  const std::string row_limit = std::string("          const int64_t lim = ") +
                                (causal ? "(i0 + rr + 1 - n0 < nbk ? i0 + rr + 1 - n0 : nbk)" : "nbk") + ";\n";
  // P·V per 12-row tile over the keys every row of the tile sees; on the causal diagonal each
  // row then adds its own remaining prefix alone, so masked keys never touch V (a NaN in a
  // masked V row cannot leak).
  // A last group of at most 8 rows (the AMX lane's 32-row blocks end in one) runs an 8-row
  // tile instead of 12 rows of padding.
  // (On the AMX lane the tile queue advances between its keys: fusor_pv_source.)
  const std::string queue = amx ? ", &tq, &tick, prods, den" : "";
  std::string pv;
  pv += "        for (int64_t g0 = 0; g0 < rows; g0 += FUSOR_PVR) {\n";
  pv += "          const int tr = rows - g0 <= 8 ? 8 : FUSOR_PVR;\n";
  if (causal) {
    pv += "          int64_t lim0 = i0 + g0 + 1 - n0;\n";
    pv += "          lim0 = lim0 < 0 ? 0 : (lim0 < nbk ? lim0 : nbk);\n";
    pv += "          fusor_pv(tr, 0, lim0, sp + g0 * NB, vh + n0 * Dv, Dv, obs + g0 * LDO, LDO, Dv" + queue + ");\n";
    pv += "          for (int64_t rr = g0; rr < rows && rr < g0 + FUSOR_PVR; ++rr) {\n";
    pv += "            const int64_t lim = i0 + rr + 1 - n0 < nbk ? i0 + rr + 1 - n0 : nbk;\n";
    pv += "            fusor_pv(1, lim0, lim, sp + rr * NB, vh + n0 * Dv, Dv, obs + rr * LDO, LDO, Dv" + queue + ");\n";
    pv += "          }\n";
  } else {
    pv += "          fusor_pv(tr, 0, nbk, sp + g0 * NB, vh + n0 * Dv, Dv, obs + g0 * LDO, LDO, Dv" + queue + ");\n";
  }
  pv += "        }\n";
  const std::string step_rows = "        float* restrict obs = ob + sb * MRP * LDO;\n"
                                "        float* restrict mrow = mall + sb * FUSOR_MR;\n"
                                "        float* restrict lrow = lall + sb * FUSOR_MR;\n";
  if (amx) {
    // Every row of the 32-row block is split into parts for P·V on the tiles: the exp pass
    // splits its whole chunks while they are in registers, the split loop the rest (the ragged
    // chunk, the zeros past it, rows past M, causal rows that see no key of the block). The
    // tile queue advances between chunks, and with P·V on zmm (zv) between its keys too
    // (den: the chunks and those keys).
    std::string rows_loop = "        for (int64_t rr = 0; rr < FUSOR_MR; ++rr) {\n";
    rows_loop += "         int64_t sfrom = 0; /* the chunks the exp pass split */\n";
    rows_loop += "         if (rr < rows) {\n" + row_limit;
    rows_loop += "          if (lim <= 0) { /* causal: no key of this block is visible yet */\n"
                 "            memset(sp + rr * NB, 0, sizeof(float) * (size_t)nbkp);\n          } else {\n";
    const std::string hook = "            for (tick += prods; tick >= den; tick -= den) fusor_tiles_product(&tq);\n";
    rows_loop += softmax_row(hook, "            if (!zv)\n" + amx_attention_split_chunk());
    rows_loop += "            sfrom = (lim / 32) * 32;\n";
    rows_loop += "          }\n         }\n";
    rows_loop += amx_attention_split_row(hook);
    rows_loop += "        }\n";
    s += zpv_clock_start(tuning, ld) +
         amx_attention_steps(r, ld, tuning.overlap != 0, step_rows, rows_loop, pv,
                             growing_items(tuning, local, causal) ? grow_item(r, ld, tuning) : "") +
         zpv_clock_end(tuning, ld);
    if (tuning.trace) s += "      trw[" + std::to_string(kZmmItems) + "] += zv;\n";
  } else {
    // Key blocks outside, query blocks inside: a K/V block is brought to L2 once per QS blocks.
    s += "      for (int64_t n0 = 0; n0 < n_all; n0 += NB)\n";
    s += "      for (int64_t sb = 0; sb < nsub; ++sb) {\n";
    s += "        const int64_t i0 = q0 + sb * FUSOR_MR, rows = M - i0 < FUSOR_MR ? M - i0 : FUSOR_MR;\n";
    s += std::string("        const int64_t n_end = ") + (causal ? "(i0 + rows < Nk ? i0 + rows : Nk)" : "Nk") + ";\n";
    s += "        if (n0 >= n_end) continue;\n";
    s += "        const int64_t nbk = n_end - n0 < NB ? n_end - n0 : NB;\n";
    s += step_rows;
    s += std::string("        const float* restrict kpb = kp + (") + (local ? "kvp" : "kvh") +
         " * nkb + n0 / 32) * D * 32;\n";
    if (q_in_place) {
      s += "        if (i0 + FUSOR_MR <= M)\n";
      s += "          for (int64_t pb = 0; pb < fusor_cdiv(nbk, 32); ++pb)\n";
      // A panel of at most 16 keys the block sees computes only their half (avx2_direct_ukr).
      s += "            fusor_ukr_q(D, qh + i0 * D, D, kpb + pb * D * 32, 32, sp + pb * 32, NB, NULL, 0,\n";
      s += "                        nbk - pb * 32 <= 16 ? 16 : 32);\n";
      s += "        else\n";
    }
    s += "        for (int64_t pb = 0; pb < fusor_cdiv(nbk, 32); ++pb)\n";
    // A last panel of at most 16 keys the block sees (the causal diagonal, a ragged Nk) computes
    // only their half: causal S = 512 took 0.98-0.99x the time (nobody reads the other half:
    // the softmax masks it, P·V stops at the row's last key).
    if (!avx2)
      s += "          if (nbk - pb * 32 <= 16) fusor_ukr16(D, qp + sb * D * FUSOR_MR, kpb + pb * D * 32, sp + pb * 32, "
           "NB, NULL, 0);\n          else\n  ";
    s += "          fusor_ukr(D, qp + sb * D * FUSOR_MR, kpb + pb * D * 32, sp + pb * 32, NB, NULL, 0);\n";
    s += "        for (int64_t rr = 0; rr < rows; ++rr) {\n" + row_limit;
    s += "          if (lim <= 0) continue; /* causal: no key of this block is visible yet */\n";
    s += (avx2 ? avx2_attention_softmax_row() : softmax_row("", "")) + "        }\n";
    s += avx2 ? avx2_attention_pv(causal) : pv;
    s += "      }\n";
  }
  s += trace_item(tuning, kBlockSteps);
  s += "      for (int64_t k = 0; k < qrows; ++k) {\n";
  s += "        const float rf = " +
       codegen::render_row_norm_factor(d, RowNorm::softmax, "lall[k]", "(float)Nk", "0.0f") + ";\n";
  s += "        float* restrict o = out + (bh * M + q0 + k) * Dv;\n";
  s += "        const float* restrict orow = ob + ((k / FUSOR_MR) * MRP + k % FUSOR_MR) * LDO;\n";
  s += "        #pragma omp simd\n        for (int64_t c = 0; c < Dv; ++c) o[c] = orow[c] * rf;\n";
  s += "      }\n" + trace_item(tuning, kOutputRows) + (pairs ? "      }\n" : "") + "    }\n";
  s += trace_items_done(tuning);
  if (amx) s += "    _tile_release();\n";
  s += "  }\n";
  s += trace_end(tuning);
  s += "  return failed ? 2 : 0;\n";
  return s;
}

} // namespace fusor::x86::simd
