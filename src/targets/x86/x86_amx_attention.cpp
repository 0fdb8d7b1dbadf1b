// The x86_amx lane's attention: the AVX-512 lane's flash loop (x86_simd_attention.cpp) with
// both products on AMX tiles, exact f32 products as in x86_amx_gemm.cpp. Query blocks are
// 32 rows (the tile's). Scores Q·Kᵀ: K of every KV head is packed once as bf16 parts in
// 32-key panels ([part][feature / 2][key][feature % 2]: features are the contraction), each
// query block as [part][feature / 32][row][32]. The online softmax stays on zmm. P·V: the
// block's probabilities are split into parts ([part][key / 32][row][32], keys j and j + 16
// of a panel paired) and multiplied with V packed once per KV head with the same pairing
// ([part][pair][column][2], 32-column panels),
// accumulating into output rows padded to whole 32-column tiles. The tile work of the
// neighbouring block steps runs between the softmax's chunks, so the tile unit and the
// vector units work at once (amx_attention_steps).
// Q, K and V take as many parts as their storage needs (bf16 1, f16 2, f32 3), the
// probabilities three (they are any f32), so the scores and P·V have their own products.
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

// A queue of tile jobs run one part product (four tile products) at a time
// (fusor_tiles_product), so vector work can be placed between them: a tile product occupies
// the tile unit for 16 cycles while the vector ports are free. A tile load waits for the
// products still reading its register, and the code after it waits too, so vector work
// overlaps the tiles only when it sits between the products (measured: 2 exp vectors per four
// tile products hide entirely; 12 vectors after a whole 32-k step of six products hide none).
// A job is nblk C blocks of 32 x 32; block i multiplies a with b + i * bblk into
// c + i * cblk, starting from c itself (cin) or from zero. Scores (pv = 0) and P·V (pv = 1)
// have their own part counts, so their own products (fusor_amx_product_qk / _pv) and
// micro-kernels.
const char* kTileQueue = R"(typedef struct {
  const uint16_t* a;
  const uint16_t* b;
  float* c;
  int64_t pa, pb, bblk, ldc, cblk, kc, nblk;
  int cin, pv;
} fusor_tile_job;
typedef struct {
  fusor_tile_job job[2];
  int nj, j, p;
  int64_t blk, k;
} fusor_tiles;
static inline void fusor_tiles_reset(fusor_tiles* q) { q->nj = q->j = q->p = 0, q->blk = q->k = 0; }
static inline void fusor_tiles_add(fusor_tiles* q, fusor_tile_job jb) {
  if (jb.nblk > 0 && jb.kc > 0) q->job[q->nj++] = jb;
}
static inline int64_t fusor_tiles_products(const fusor_tiles* q) {
  int64_t n = 0;
  for (int i = q->j; i < q->nj; ++i)
    n += q->job[i].nblk * (q->job[i].kc / 32) * (q->job[i].pv ? FUSOR_NPROD_pv : FUSOR_NPROD_qk);
  return n;
}
static inline __attribute__((always_inline)) void fusor_tiles_product(fusor_tiles* q) {
  if (q->j >= q->nj) return;
  const fusor_tile_job* jb = &q->job[q->j];
  float* c = jb->c + q->blk * jb->cblk;
  const uint16_t* b = jb->b + q->blk * jb->bblk;
  const int more = q->k + 32 < jb->kc;
  if (q->k == 0 && q->p == 0) fusor_amx_c_begin(jb->cin ? c : NULL, jb->ldc);
  if (jb->pv) {
    if (q->k == 0 && q->p == 0) fusor_amx_first_loads_pv(jb->a, jb->pa, b, jb->pb);
    fusor_amx_product_pv(q->p, jb->a + q->k * 32, jb->pa, b + q->k * 32, jb->pb, more);
    if (++q->p < FUSOR_NPROD_pv) return;
  } else {
    if (q->k == 0 && q->p == 0) fusor_amx_first_loads_qk(jb->a, jb->pa, b, jb->pb);
    fusor_amx_product_qk(q->p, jb->a + q->k * 32, jb->pa, b + q->k * 32, jb->pb, more);
    if (++q->p < FUSOR_NPROD_qk) return;
  }
  q->p = 0, q->k += 32;
  if (q->k >= jb->kc) {
    fusor_amx_c_end(c, jb->ldc);
    q->k = 0;
    if (++q->blk >= jb->nblk) q->blk = 0, ++q->j;
  }
}
/* The rest of the queue: whole blocks through the pipelined micro-kernels. */
static void fusor_tiles_drain(fusor_tiles* q) {
  while (q->j < q->nj && (q->k != 0 || q->p != 0)) fusor_tiles_product(q);
  for (; q->j < q->nj; ++q->j, q->blk = 0) {
    const fusor_tile_job* jb = &q->job[q->j];
    for (; q->blk < jb->nblk; ++q->blk) {
      float* c = jb->c + q->blk * jb->cblk;
      const float* cin = jb->cin ? c : NULL;
      if (jb->pv)
        fusor_amx_ukr_pv(jb->kc, jb->a, jb->pa, jb->b + q->blk * jb->bblk, jb->pb, c, jb->ldc, cin, jb->ldc);
      else
        fusor_amx_ukr_qk(jb->kc, jb->a, jb->pa, jb->b + q->blk * jb->bblk, jb->pb, c, jb->ldc, cin, jb->ldc);
    }
  }
}
/* One job, now. */
static void fusor_tiles_run(fusor_tiles* q, fusor_tile_job jb) {
  fusor_tiles_reset(q);
  fusor_tiles_add(q, jb);
  fusor_tiles_drain(q);
}
)";

} // namespace

std::string amx_attention_pack_k(const AttentionRegion& r, const StorageLoad& ld, bool stream, bool prefetch) {
  std::string s;
  s += "      uint16_t* restrict dst = kp + hb * FUSOR_NSB * Dp * 32;\n";
  s += "      unsigned char* restrict kfl = kf + hb * 32;\n";
  s += "      memset(kfl, 0, 32);\n";
  s += "      int64_t c0 = 0;\n";
  if (!r.k_transposed()) {
    // 16 keys x 16 features through the register transpose; feature pairs (c, c + 1) of a
    // key interleave into one 32-bit lane, 16 keys per store.
    s += "      if (w == 32)\n        for (; c0 + 16 <= D; c0 += 16)\n";
    s += "          for (int64_t jh = 0; jh < 32; jh += 16) {\n";
    s += "            __m512 t_[16];\n";
    s += "            for (int r = 0; r < 16; ++r) t_[r] = " +
         ld.load16("(__mmask16)0xFFFF", "kh + (n0 + jh + r) * D + c0") + ";\n";
    // The same lines of the next panel's keys: the transpose reads 32 rows at once, a line of
    // each, a pattern the hardware prefetchers do not follow from memory or a far cache.
    if (prefetch)
      s += "            if (ppf && n0 + 64 <= Nk)\n              for (int r = 0; r < 16; ++r) "
           "_mm_prefetch((const char*)(kh + (n0 + 32 + jh + r) * D + c0), _MM_HINT_T0);\n";
    s += "            fusor_transpose16(t_);\n";
    s += "            __mmask16 bad = 0;\n";
    s += "            for (int c = 0; c < 16; c += 2)\n";
    s += "              bad |= fusor_store_pairs(t_[c], t_[c + 1], dst + ((c0 + c) / 2) * 64 + jh * 2, Dp * 32, "
         "FUSOR_NSB, " +
         std::string(stream ? "1" : "0") + ");\n";
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

std::string amx_attention_pack_q(const AttentionRegion& r, const StorageLoad& ld, bool prefetch) {
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
  if (prefetch) c.prefetch = "qh + (i + 4) * D + k0", c.prefetch_if = "ppf && i + 4 < M";
  c.valid = "D - k0";
  c.dst = "dst";
  c.part_stride = "Dp * 32";
  c.parts = "FUSOR_NSA";
  c.flag = "qfl[sb * FUSOR_MR + rr]";
  s += amx_pack_row_chunk(c, ld, "            ");
  s += "          }\n        }\n";
  return s;
}

std::string amx_attention_queue_source(int nq, int nk, int nv, bool exact) {
  // Scores: Q (nq parts) x K (nk); P·V: the probabilities (any f32, three parts) x V (nv).
  return "#define FUSOR_NSP 3\n#define FUSOR_NSV " + std::to_string(nv) + "\n" +
         amx_ukr_source(nq, nk, exact, "fusor_amx_ukr_qk") + amx_ukr_source(3, nv, exact, "fusor_amx_ukr_pv") +
         amx_product_source(nq, nk, exact, "_qk") + amx_product_source(3, nv, exact, "_pv") + kTileQueue;
}

std::string amx_attention_step_source() {
  return R"(/* A block step of a work item: key block n0 (outer) x query block sb (inner), its rows and
   the keys they see (nbk, padded to whole 32-key panels in nbkp). */
typedef struct {
  int64_t n0, sb, i0, rows, nbk, nbkp;
} fusor_att_step;
/* The first step after t that sees a key (causal blocks see none past their last row);
   nsteps when there is none. */
static inline int64_t fusor_att_next(int64_t t, int64_t nsteps, int64_t nsub, int64_t q0, int64_t M, int64_t Nk,
                                     int64_t NB, int causal, fusor_att_step* st) {
  for (++t; t < nsteps; ++t) {
    st->n0 = (t / nsub) * NB, st->sb = t % nsub, st->i0 = q0 + st->sb * FUSOR_MR;
    st->rows = M - st->i0 < FUSOR_MR ? M - st->i0 : FUSOR_MR;
    const int64_t n_end = causal && st->i0 + st->rows < Nk ? st->i0 + st->rows : Nk;
    if (st->n0 >= n_end) continue;
    st->nbk = n_end - st->n0 < NB ? n_end - st->n0 : NB;
    st->nbkp = fusor_cdiv(st->nbk, 32) * 32;
    return t;
  }
  return nsteps;
}
)";
}

std::string amx_attention_split_row(const std::string& hook) {
  // Row rr's probabilities (0 past its keys) from chunk sfrom on as bf16 parts
  // [part][key / 32][row][32], keys j and j + 16 of the panel paired (pair_halves).
  std::string s;
  s += "          for (int64_t k0 = sfrom; k0 < nbkp; k0 += 32) {\n";
  s += hook;
  s += "            if (zv) continue; /* P·V on zmm: no parts */\n";
  AmxRowChunk c;
  c.source = "sp";
  c.element = "rr * NB + k0 + t";
  c.contiguous = "sp + rr * NB + k0";
  c.valid = "nbkp - k0";
  c.dst = "pp + k0 * 32 + rr * 32";
  c.part_stride = "nbkp * 32";
  c.parts = "FUSOR_NSP";
  c.finite_or_nan = true;
  c.pair_halves = true;
  s += amx_pack_row_chunk(c, StorageLoad{"float", "", ""}, "            ");
  s += "          }\n";
  return s;
}

std::string amx_attention_split_chunk() {
  // The exp pass's whole chunk at j (e0, e1) as parts, as amx_attention_split_row stores them.
  return "            {\n"
         "              __m512i q0[3], q1[3];\n"
         "              fusor_split16_fn(e0, &q0[0], &q0[1], &q0[2]);\n"
         "              fusor_split16_fn(e1, &q1[0], &q1[1], &q1[2]);\n"
         "              fusor_store_halves(q0, q1, pp + j * 32 + rr * 32, nbkp * 32, FUSOR_NSP);\n"
         "            }\n";
}

namespace {

// The recomputation of the scores of flagged query rows and keys as f32 dot products.
std::string score_fixup(const AttentionRegion& r, const StorageLoad& ld) {
  std::string s;
  s += "        {\n";
  s += "          const unsigned char* restrict kfl = kf + (kvp * nkb + n0 / 32) * 32;\n";
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

// Tile jobs: the scores of step `st` into buffer `buf`, and P·V of step `st` (its parts in
// `parts`) added into its output rows, or written there by the first key block.
std::string scores_job(const std::string& st, const std::string& buf) {
  return "(fusor_tile_job){.a = qp + " + st + ".sb * FUSOR_NSA * Dp * 32, .pa = Dp * 32, .b = kp + (kvp * nkb + " + st +
         ".n0 / 32) * FUSOR_NSB * Dp * 32, .pb = Dp * 32, .bblk = FUSOR_NSB * Dp * 32, .c = " + buf +
         ", .ldc = NB, .cblk = 32, .kc = Dp, .nblk = fusor_cdiv(" + st + ".nbk, 32), .cin = 0, .pv = 0}";
}

std::string pv_job(const std::string& st, const std::string& parts) {
  return "(fusor_tile_job){.a = " + parts + ", .pa = " + st + ".nbkp * 32, .b = vp + (kvp * ndp * FUSOR_NSV * Nkp + " +
         st + ".n0) * 32, .pb = Nkp * 32, .bblk = FUSOR_NSV * Nkp * 32, .c = ob + " + st +
         ".sb * MRP * LDO, .ldc = LDO, .cblk = 32, .kc = " + st + ".nbkp, .nblk = ndp, .cin = " + st +
         ".n0 > 0, .pv = 1}";
}

} // namespace

std::string amx_attention_steps(const AttentionRegion& r, const StorageLoad& ld, bool overlap,
                                const std::string& step_rows, const std::string& rows_loop, const std::string& zmm_pv,
                                const std::string& grow) {
  // Block steps in order (key block outer: a K/V block reaches L2 once per QS query blocks),
  // software-pipelined over the two units: while the vector units run step t's softmax and
  // split its probabilities, the tile unit computes the scores of step t + 1 and P·V of step
  // t - 1, a part product at a time between the 32-key chunks. P·V of t - 1 runs first, alone,
  // when it adds into the rows that t's softmax rescales (one query block per item). Scores
  // and parts alternate between two buffers (par).
  std::string s;
  s += "      float* const spb[2] = {sp, sp + spn};\n";
  s += "      uint16_t* const ppb[2] = {(uint16_t*)(sp + MRP * NB), (uint16_t*)(sp + spn + MRP * NB)};\n";
  s += "      int64_t nsteps = fusor_cdiv(n_all, NB) * nsub;\n";
  s += "      const int causal = " + std::string(r.causal() ? "1" : "0") + ";\n";
  s += "      fusor_att_step cur, nxt = {0}, prv = {0}; /* (nxt is read only when it was set) */\n";
  s += "      fusor_tiles tq;\n";
  s += "      int par = 0, have_prv = 0;\n";
  s += "      int64_t t = fusor_att_next(-1, nsteps, nsub, q0, M, Nk, NB, causal, &cur);\n";
  s += "      if (t < nsteps) fusor_tiles_run(&tq, " + scores_job("cur", "spb[0]") + ");\n";
  s += "      while (t < nsteps) {\n" + grow;
  s += "        const int64_t tn = fusor_att_next(t, nsteps, nsub, q0, M, Nk, NB, causal, &nxt);\n";
  s += "        fusor_tiles_reset(&tq);\n";
  s += "        if (have_prv) {\n";
  s += "          fusor_tiles_add(&tq, " + pv_job("prv", "ppb[par ^ 1]") + ");\n";
  s += "          if (prv.sb == cur.sb) fusor_tiles_drain(&tq);\n";
  s += "        }\n";
  s += "        if (tn < nsteps) fusor_tiles_add(&tq, " + scores_job("nxt", "spb[par ^ 1]") + ");\n";
  s += "        {\n";
  s += "        const int64_t n0 = cur.n0, sb = cur.sb, i0 = cur.i0, rows = cur.rows, nbk = cur.nbk, nbkp = "
       "cur.nbkp;\n";
  s += "        float* restrict sp = spb[par];\n";
  s += "        uint16_t* restrict pp = ppb[par];\n";
  s += step_rows;
  s += score_fixup(r, ld);
  // The tile queue's products spread evenly over the 32-key chunks of the rows (each chunk
  // passes through the exp pass or the split loop).
  s += "        const int64_t chunks = FUSOR_MR * (nbkp / 32), prods = " +
       std::string(overlap ? "fusor_tiles_products(&tq)" : "0") + ";\n";
  // (zmm P·V: each 12-row tile's keys for each 32 columns, the ticks fusor_pv takes)
  s += "        const int64_t den = chunks + (zv ? fusor_cdiv(rows, FUSOR_PVR) * fusor_cdiv(Dv, 32) * nbk : 0);\n";
  s += "        int64_t tick = 0;\n";
  s += rows_loop;
  // P·V on zmm (zv): heads whose V is not all finite (masked keys never touch V there), and
  // items that take it for speed (Tuning::zpv).
  s += "        if (zv) {\n" + zmm_pv + "        }\n";
  s += "        }\n";
  s += "        fusor_tiles_drain(&tq);\n";
  s += "        have_prv = !zv, prv = cur, cur = nxt, par ^= 1, t = tn;\n";
  s += "      }\n";
  s += "      if (have_prv) fusor_tiles_run(&tq, " + pv_job("prv", "ppb[par ^ 1]") + ");\n";
  return s;
}

std::string amx_attention_pack_v_panel(const StorageLoad& ld, bool stream, bool prefetch, const std::string& head) {
  // Keys ka and ka + 16 of each 32-key panel (the probabilities' pairing, pair_halves), 16
  // columns at a time, interleave into one 32-bit lane per column (the pair TDPBF16PS
  // multiplies); keys past Nk and columns past Dv are zero.
  std::string s;
  s += "      const int64_t c0 = (hp % ndp) * 32, w = Dv - c0 < 32 ? Dv - c0 : 32;\n";
  s += "      const " + ld.type + "* restrict vh = V + (" + head + ") * Nk * Dv;\n";
  s += "      uint16_t* restrict dst = vp + hp * FUSOR_NSV * Nkp * 32;\n";
  s += "      __mmask16 bad = 0;\n";
  s += "      for (int64_t k = 0; k < Nkp; k += 2)\n";
  s += "        for (int h = 0; h < 2; ++h) {\n";
  s += "          const int64_t left = w - h * 16;\n";
  s += "          const __mmask16 cm = fusor_mask16(left);\n";
  s += "          const int64_t ka = (k & ~(int64_t)31) + (k & 31) / 2, kb = ka + 16;\n";
  if (prefetch) // (the next panel's keys: this panel's lines arrive late from memory otherwise)
    s += "          if (ppf && kb + 32 < Nk) _mm_prefetch((const char*)(vh + (ka + 32) * Dv + c0 + h * 16), "
         "_MM_HINT_T0),\n"
         "                                   _mm_prefetch((const char*)(vh + (kb + 32) * Dv + c0 + h * 16), "
         "_MM_HINT_T0);\n";
  s += "          const __m512 x0 = " + ld.load16("ka < Nk ? cm : 0", "vh + ka * Dv + c0 + h * 16") + ";\n";
  s += "          const __m512 x1 = " + ld.load16("kb < Nk ? cm : 0", "vh + kb * Dv + c0 + h * 16") + ";\n";
  s += "          bad |= fusor_store_pairs(x0, x1, dst + k * 32 + h * 32, Nkp * 32, FUSOR_NSV, " +
       std::string(stream ? "1" : "0") + ");\n";
  s += "        }\n";
  s += "      vfl[hp] = bad != 0;\n";
  return s;
}

std::string amx_attention_pack_v(const StorageLoad& ld, bool stream, bool prefetch) {
  std::string s;
  s += std::string("    #pragma omp for schedule(static)") + (stream ? " nowait" : "") + "\n";
  s += "    for (int64_t hp = 0; hp < nkv * ndp; ++hp) {\n";
  s += amx_attention_pack_v_panel(ld, stream, prefetch, "hp / ndp");
  s += "    }\n";
  return s;
}

} // namespace fusor::x86::simd
