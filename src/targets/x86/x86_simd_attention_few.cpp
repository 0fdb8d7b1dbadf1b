// Attention with few query rows per head (decode steps: one new token against a long KV
// cache), on zmm registers (the AVX-512 and AMX lanes: a row per 32-row tile would waste 31)
// or ymm (AVX2). The flash loop of x86_simd_attention.cpp packs K once per call and computes
// 12-row query blocks per query head, so one query row paid for 12 in the products and K's
// bytes crossed memory three times (read, packed, read again): a decode step ran at a third
// of the rate at which memory could deliver K and V. Here the rows of every query head that
// shares a KV head (grouped-query attention included) are taken together, up to
// FUSOR_FQ_ROWS at a time, and K and V are read in place, once per such group (16-bit
// elements widen as they load): a score is a dot product over D (a vector's lanes, then a
// horizontal sum; with K stored transposed, a chunk of keys' scores in registers over D),
// P·V a register tile of a few vectors' columns over the block's keys. The work is then
// bound by memory, not by the arithmetic. When the (KV head, row group) items would leave
// threads idle, the keys are split too and the splits' partial softmax states merged (the
// flash-decoding scheme). The online softmax is the main loop's: the same max rule (a NaN
// score never becomes the max), 2^(s·scale·log2 e - m), the same rescale.
#include <functional>
#include <string>

#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

namespace {

// The kernel below, and the online-softmax step it shares with the x86_avx2 lane's flash loop,
// are written once over a small vector vocabulary (fusor_fq_*), which each lane defines in its
// own registers: FUSOR_FQ_W f32 lanes in a fusor_fq_v, fusor_fq_m the lanes
// a load or store touches (fusor_fq_mask(n): the first n, all when n >= W, none when n <= 0).
// P·V takes 8 vectors of columns for one or two rows (Dv = 128 f32 in one pass over the block's
// V on zmm), 4 for more (8 would spill): medians of 8 alternating rounds on Zen 5 (H = 32, Nk =
// 2048, D = 128; one / two rows per item) 1.64 / 0.79 ms against 1.82 / 0.82 with 4 on zmm,
// 1.70 / 0.85 against 1.78 / 1.06 on ymm.
const char* kSoftmaxStep =
    R"(/* The max (low = 0) or min (low = 1) of a row's n scores at s, whole vectors past n readable;
   a NaN never becomes it (vmaxps and vminps return their second operand when either is NaN). */
FUSOR_FQ_INLINE float fusor_fq_row_extreme(const float* restrict s, int64_t n, const int low) {
  const fusor_fq_v far = fusor_fq_set1(low ? INFINITY : -INFINITY);
  fusor_fq_v x0 = far, x1 = far;
  int64_t j = 0;
  for (; j + 2 * FUSOR_FQ_W <= n; j += 2 * FUSOR_FQ_W) {
    const fusor_fq_v a = fusor_fq_loadf(s + j), b = fusor_fq_loadf(s + j + FUSOR_FQ_W);
    x0 = low ? fusor_fq_min(a, x0) : fusor_fq_max(a, x0);
    x1 = low ? fusor_fq_min(b, x1) : fusor_fq_max(b, x1);
  }
  for (; j < n; j += FUSOR_FQ_W) {
    const fusor_fq_v a = fusor_fq_blend(fusor_fq_mask(n - j), far, fusor_fq_loadf(s + j));
    x0 = low ? fusor_fq_min(a, x0) : fusor_fq_max(a, x0);
  }
  return low ? fusor_fq_hmin(fusor_fq_min(x0, x1)) : fusor_fq_hmax(fusor_fq_max(x0, x1));
}
/* One online-softmax step of a row over its n scores at s (whole vectors past n readable and
   writable), vs = scale * log2 e: the running state *m is the raw scores' max (vs >= 0) or their
   min negated (vs < 0), s[j] = 2^((s[j] - e) * vs) with e that extreme (lanes past n: 0, never
   summed), *l rescaled and summed; returns the factor that rescales the row's output. The
   exponent is exact at the extreme however large the scores: vs * s[j] - vs * e in one fmsub,
   with vs * e rounded, shifted a row's exponents by up to 2^-25 |vs * e|, out of 2^x's range
   from |vs * e| near 2^31 (rows of NaN where the reference is one-hot). Two vectors per
   iteration: each pass's max or sum is a chain of dependent adds otherwise. */
FUSOR_FQ_INLINE float fusor_softmax_step(float* restrict s, int64_t n, float vs, float* restrict m, float* restrict l) {
  const float bm = vs < 0 ? -fusor_fq_row_extreme(s, n, 1) : fusor_fq_row_extreme(s, n, 0);
  const float mo = *m, mn = mo > bm ? mo : bm;
  const float dm = (mo - mn) * (vs < 0 ? -vs : vs);
  const float alpha = @RESCALE(mo|mn|exp2f(dm))@;
  const fusor_fq_v vvs = fusor_fq_set1(vs), ve = fusor_fq_set1(vs < 0 ? -mn : mn);
  fusor_fq_v ls0 = fusor_fq_zero(), ls1 = fusor_fq_zero();
  int64_t j = 0;
  for (; j + 2 * FUSOR_FQ_W <= n; j += 2 * FUSOR_FQ_W) {
    const fusor_fq_v e0 = fusor_fq_exp2(fusor_fq_mul(fusor_fq_sub(fusor_fq_loadf(s + j), ve), vvs));
    const fusor_fq_v e1 = fusor_fq_exp2(fusor_fq_mul(fusor_fq_sub(fusor_fq_loadf(s + j + FUSOR_FQ_W), ve), vvs));
    fusor_fq_storef(s + j, e0);
    fusor_fq_storef(s + j + FUSOR_FQ_W, e1);
    ls0 = fusor_fq_add(ls0, e0);
    ls1 = fusor_fq_add(ls1, e1);
  }
  for (; j < n; j += FUSOR_FQ_W) {
    const fusor_fq_v e = fusor_fq_keep(fusor_fq_mask(n - j), fusor_fq_exp2(fusor_fq_mul(fusor_fq_sub(fusor_fq_loadf(s + j), ve), vvs)));
    fusor_fq_storef(s + j, e);
    ls0 = fusor_fq_add(ls0, e);
  }
  *l = *l * alpha + fusor_fq_hsum(fusor_fq_add(ls0, ls1));
  *m = mn;
  return alpha;
}
)";

const char* kFewQueriesHead = R"(#define FUSOR_FQ_ROWS 4   /* query rows an item reads K and V for */
#define FUSOR_FQ_KB 256    /* keys per online-softmax step */
#define FUSOR_FQ_AHEAD 8   /* K and V rows prefetched this many keys ahead */
#define FUSOR_FQ_LINE (64 / (int64_t)sizeof(fusor_fq_t)) /* elements per cache line */
#define FUSOR_FQ_NV(R) ((R) <= 2 ? 8 : 4) /* vectors per P·V column chunk of R rows */
/* The lanes of a chunk of NV vectors that n remaining elements fill. */
static inline __attribute__((always_inline)) void fusor_fq_chunk_masks(const int NV, int64_t n, fusor_fq_m* mk) {
  #pragma GCC unroll 8
  for (int q = 0; q < NV; ++q) mk[q] = fusor_fq_mask(n - FUSOR_FQ_W * q);
}
/* acc[r][q] += s[r * ss] * x[q] for R rows, x the NV vectors at p (lanes mk[q]), whose lines
   at pf are brought toward L1 on the way: both products' register tiles (P·V over a key, K
   transposed over a D row). */
static inline __attribute__((always_inline)) void fusor_fq_rank1(const int R, const int NV,
    const fusor_fq_t* restrict p, const fusor_fq_m* mk, const fusor_fq_t* pf, const float* restrict s, int64_t ss,
    fusor_fq_v acc[][8]) {
  fusor_fq_v x[8];
  #pragma GCC unroll 8
  for (int q = 0; q < NV; ++q) {
    if (fusor_fq_any(mk[q]) && FUSOR_FQ_W * q % FUSOR_FQ_LINE == 0)
      _mm_prefetch((const char*)(pf + FUSOR_FQ_W * q), _MM_HINT_T0);
    x[q] = fusor_fq_load(mk[q], p + FUSOR_FQ_W * q);
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const fusor_fq_v sr = fusor_fq_set1(s[r * ss]);
    #pragma GCC unroll 8
    for (int q = 0; q < NV; ++q) acc[r][q] = fusor_fq_fma(sr, x[q], acc[r][q]);
  }
}
)";

const char* kScoresNatural =
    R"(/* sc[r][j] = q_r . k_(n0 + j) for j < nk, K [Nk][D] (kh: the head's): every K row is read once
   for the item's R rows. */
static inline __attribute__((always_inline)) void fusor_fq_scores_rows(const int R, const float* restrict qb,
    int64_t Dq, const fusor_fq_t* restrict kh, int64_t n0, int64_t Nk, int64_t D, int64_t nk, float* restrict sc) {
  const fusor_fq_t* restrict kb = kh + n0 * D;
  (void)Nk;
  const fusor_fq_m all = fusor_fq_mask(FUSOR_FQ_W), kt = fusor_fq_mask(D % FUSOR_FQ_W);
  for (int64_t j = 0; j < nk; ++j) {
    const fusor_fq_t* restrict kj = kb + j * D;
    for (int64_t c = 0; c < D; c += FUSOR_FQ_LINE) _mm_prefetch((const char*)(kj + FUSOR_FQ_AHEAD * D + c), _MM_HINT_T0);
    fusor_fq_v acc[FUSOR_FQ_ROWS];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = fusor_fq_zero();
    int64_t c = 0;
    for (; c + FUSOR_FQ_W <= D; c += FUSOR_FQ_W) {
      const fusor_fq_v kv = fusor_fq_load(all, kj + c);
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = fusor_fq_fma(fusor_fq_loadf(qb + r * Dq + c), kv, acc[r]);
    }
    if (c < D) { /* qb is zero past D, up to Dq */
      const fusor_fq_v kv = fusor_fq_load(kt, kj + c);
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = fusor_fq_fma(fusor_fq_loadf(qb + r * Dq + c), kv, acc[r]);
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sc[r * FUSOR_FQ_KB + j] = fusor_fq_hsum(acc[r]);
  }
}
)";

const char* kScoresTransposed =
    R"(/* The same with K stored transposed, [D][Nk] (kh: the head's): a chunk of NV vectors of keys
   at a time, every score of the chunk in registers over all of D; each of D's rows of K brings
   the next chunk's part of that row toward L1 while the chunk reads its own (D rows are D
   streams, more than the hardware prefetchers follow). */
static inline __attribute__((always_inline)) void fusor_fq_scores_rows(const int R, const float* restrict qb,
    int64_t Dq, const fusor_fq_t* restrict kh, int64_t n0, int64_t Nk, int64_t D, int64_t nk, float* restrict sc) {
  const int NV = FUSOR_FQ_NV(R);
  const fusor_fq_t* restrict kb = kh + n0;
  for (int64_t j0 = 0; j0 < nk; j0 += NV * FUSOR_FQ_W) {
    fusor_fq_m mk[8];
    fusor_fq_chunk_masks(NV, nk - j0, mk);
    fusor_fq_v acc[FUSOR_FQ_ROWS][8];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 8
      for (int q = 0; q < NV; ++q) acc[r][q] = fusor_fq_zero();
    for (int64_t c = 0; c < D; ++c) {
      const fusor_fq_t* restrict kc = kb + c * Nk + j0;
      fusor_fq_rank1(R, NV, kc, mk, kc + NV * FUSOR_FQ_W, qb + c, Dq, acc);
    }
    /* Whole vectors: sc rows hold FUSOR_FQ_KB floats, a multiple of a chunk; lanes past nk are
       zero and the softmax masks them. */
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 8
      for (int q = 0; q < NV; ++q) fusor_fq_storef(sc + r * FUSOR_FQ_KB + j0 + FUSOR_FQ_W * q, acc[r][q]);
  }
}
)";

const char* kFewQueries =
    R"(/* o[r][c0, c0 + NV * W) += sum_j p[r][j] v_j over the block's nk keys, for every column chunk. */
static inline __attribute__((always_inline)) void fusor_fq_pv_rows(const int R, const float* restrict sc,
    const fusor_fq_t* restrict vb, int64_t Dv, int64_t nk, float* restrict o, int64_t ldo) {
  const int NV = FUSOR_FQ_NV(R);
  for (int64_t c0 = 0; c0 < Dv; c0 += NV * FUSOR_FQ_W) {
    fusor_fq_m mk[8];
    fusor_fq_chunk_masks(NV, Dv - c0, mk);
    fusor_fq_v acc[FUSOR_FQ_ROWS][8];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 8
      for (int q = 0; q < NV; ++q) acc[r][q] = fusor_fq_loadfm(mk[q], o + r * ldo + c0 + FUSOR_FQ_W * q);
    for (int64_t j = 0; j < nk; ++j) {
      const fusor_fq_t* restrict vj = vb + j * Dv + c0;
      fusor_fq_rank1(R, NV, vj, mk, vj + FUSOR_FQ_AHEAD * Dv, sc + j, FUSOR_FQ_KB, acc);
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 8
      for (int q = 0; q < NV; ++q) fusor_fq_storefm(o + r * ldo + c0 + FUSOR_FQ_W * q, mk[q], acc[r][q]);
  }
}
/* Keys [n_lo, n_hi) of one KV head for R query rows (qb: [R][Dq], zero past D): the rows'
   unnormalised outputs o[R][ldo], running maxima m (base 2) and sums l. */
static inline __attribute__((always_inline)) void fusor_fq_rows(const int R, const float* restrict qb, int64_t Dq,
    const fusor_fq_t* restrict kh, const fusor_fq_t* restrict vh, int64_t n_lo, int64_t n_hi, int64_t Nk, int64_t D,
    int64_t Dv, float vs, float* restrict sc, float* restrict o, int64_t ldo, float* restrict m, float* restrict l) {
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    memset(o + r * ldo, 0, sizeof(float) * (size_t)Dv);
  }
  for (int64_t n0 = n_lo; n0 < n_hi; n0 += FUSOR_FQ_KB) {
    const int64_t nk = n_hi - n0 < FUSOR_FQ_KB ? n_hi - n0 : FUSOR_FQ_KB;
    fusor_fq_scores_rows(R, qb, Dq, kh, n0, Nk, D, nk, sc);
    for (int r = 0; r < R; ++r) {
      /* (sc rows hold whole vectors up to FUSOR_FQ_KB: no load faults) */
      const float alpha = fusor_softmax_step(sc + r * FUSOR_FQ_KB, nk, vs, m + r, l + r);
      if (alpha != 1.0f)
        for (int64_t c = 0; c < Dv; ++c) o[r * ldo + c] *= alpha;
    }
    fusor_fq_pv_rows(R, sc, vh + n0 * Dv, Dv, nk, o, ldo);
  }
}
/* fusor_fq_rows with R a constant: the row loops unroll and the accumulators stay in registers. */
static void fusor_fq_item(int R, const float* restrict qb, int64_t Dq, const fusor_fq_t* restrict kh,
                          const fusor_fq_t* restrict vh, int64_t n_lo, int64_t n_hi, int64_t Nk, int64_t D, int64_t Dv, float vs,
                          float* restrict sc, float* restrict o, int64_t ldo, float* restrict m, float* restrict l) {
  switch (R) {
  case 4: fusor_fq_rows(4, qb, Dq, kh, vh, n_lo, n_hi, Nk, D, Dv, vs, sc, o, ldo, m, l); break;
  case 3: fusor_fq_rows(3, qb, Dq, kh, vh, n_lo, n_hi, Nk, D, Dv, vs, sc, o, ldo, m, l); break;
  case 2: fusor_fq_rows(2, qb, Dq, kh, vh, n_lo, n_hi, Nk, D, Dv, vs, sc, o, ldo, m, l); break;
  default: fusor_fq_rows(1, qb, Dq, kh, vh, n_lo, n_hi, Nk, D, Dv, vs, sc, o, ldo, m, l); break;
  }
}
/* The whole call: items (KV head, group of R rows, key split); with several splits a second
   pass merges each row's partial states. vs = scale * log2 e (either sign). causal: top-left,
   so query m sees keys 0..m (an item is then one row, its keys cut at m + 1). */
static int fusor_attention_few(const fusor_fq_t* restrict Q, const fusor_fq_t* restrict K, const fusor_fq_t* restrict V,
                               float* restrict out, int64_t batch, int64_t heads, int64_t kv_heads, int64_t M,
                               int64_t Nk, int64_t D, int64_t Dv, float vs, int causal, int q_transposed) {
  const int64_t group = heads / kv_heads, nkv = batch * kv_heads, rows_kv = group * M;
  const int R = causal ? 1 : FUSOR_FQ_ROWS;
  const int64_t ngr = fusor_cdiv(rows_kv, R), Dq = fusor_cdiv(D > 0 ? D : 1, 16) * 16;
  int nthreads = 1;
#ifdef _OPENMP
  nthreads = omp_get_max_threads();
#endif
  /* Keys split so that every thread has two items or more, a split no shorter than a step. */
  int64_t ns = fusor_cdiv(2 * (int64_t)nthreads, nkv * ngr);
  const int64_t steps = fusor_cdiv(Nk, FUSOR_FQ_KB);
  ns = ns < 1 ? 1 : (ns > steps ? steps : ns);
  const int64_t nks = fusor_cdiv(steps, ns) * FUSOR_FQ_KB;
  ns = fusor_cdiv(Nk, nks);
  const int64_t nitems = nkv * ngr * ns, pstride = (int64_t)R * (Dv + 2);
  float* restrict part = NULL; /* [item][R rows of Dv, then R maxima, then R sums] */
  if (ns > 1) {
    part = (float*)fusor_scratch(0, sizeof(float) * (size_t)(nitems * pstride));
    if (!part) return 2;
  }
  int failed = 0;
  #pragma omp parallel if (parallel: (double)(nkv * rows_kv * Nk * (D + Dv)) >= FUSOR_SERIAL_BELOW)
  {
    float* qb = (float*)fusor_scratch(5, sizeof(float) * (size_t)(R * Dq));
    float* sc = (float*)fusor_scratch(7, sizeof(float) * (size_t)(R * FUSOR_FQ_KB));
    /* An item's output rows, maxima and sums: in `part` when keys are split, else here. */
    float* ob = part ? part : (float*)fusor_scratch(6, sizeof(float) * (size_t)pstride);
    if (!(qb && sc && ob)) {
      #pragma omp atomic write
      failed = 1;
    }
    #pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < nitems; ++it) {
      if (!(qb && sc && ob)) continue;
      const int64_t kvh = it / (ngr * ns), t0 = (it / ns) % ngr * R, split = it % ns;
      const int64_t b = kvh / kv_heads, hk = kvh % kv_heads;
      const int rn = (int)(rows_kv - t0 < R ? rows_kv - t0 : R);
      int64_t lim = Nk;
      for (int r = 0; r < rn; ++r) {
        const int64_t t = t0 + r, mq = t % M;
        const fusor_fq_t* restrict qh = Q + ((b * heads + hk * group + t / M) * M) * D;
        for (int64_t c = 0; c < D; ++c) qb[r * Dq + c] = fusor_fq_elem(qh, q_transposed ? c * M + mq : mq * D + c);
        for (int64_t c = D; c < Dq; ++c) qb[r * Dq + c] = 0.0f;
        if (causal) lim = mq + 1 < Nk ? mq + 1 : Nk;
      }
      const int64_t n_lo = split * nks, n_hi = n_lo + nks < lim ? n_lo + nks : lim;
      float* restrict o = part ? part + it * pstride : ob;
      fusor_fq_item(rn, qb, Dq, K + kvh * Nk * D, V + kvh * Nk * Dv, n_lo, n_hi, Nk, D, Dv, vs, sc, o, Dv,
                    o + R * Dv, o + R * Dv + R);
      if (part) continue;
      for (int r = 0; r < rn; ++r) {
        const int64_t t = t0 + r;
        float* restrict dst = out + ((b * heads + hk * group + t / M) * M + t % M) * Dv;
        const float rf = @FACTOR(o[R * Dv + R + r])@;
        for (int64_t c = 0; c < Dv; ++c) dst[c] = o[r * Dv + c] * rf;
      }
    }
    if (part) {
      /* Each row: the splits' states rescaled to their common maximum and summed. */
      #pragma omp for schedule(static)
      for (int64_t u = 0; u < nkv * rows_kv; ++u) {
        const int64_t kvh = u / rows_kv, t = u % rows_kv, r = t % R;
        const float* restrict p0 = part + (kvh * ngr + t / R) * ns * pstride;
        float mm = -INFINITY, ls = 0.0f;
        for (int64_t s = 0; s < ns; ++s) {
          const float ms = p0[s * pstride + R * Dv + r];
          mm = ms > mm ? ms : mm;
        }
        float* restrict dst =
            out + (((kvh / kv_heads) * heads + (kvh % kv_heads) * group + t / M) * M + t % M) * Dv;
        memset(dst, 0, sizeof(float) * (size_t)Dv);
        for (int64_t s = 0; s < ns; ++s) {
          const float* restrict ps = p0 + s * pstride;
          const float ms = ps[R * Dv + r];
          const float w = @RESCALE(ms|mm|exp2f((ms - mm) * (vs < 0 ? -vs : vs)))@;
          ls += w * ps[R * Dv + R + r];
          for (int64_t c = 0; c < Dv; ++c) dst[c] += w * ps[r * Dv + c];
        }
        const float rf = @FACTOR(ls)@;
        for (int64_t c = 0; c < Dv; ++c) dst[c] *= rf;
      }
    }
  }
  return failed ? 2 : 0;
}
)";

// `s` with every `@NAME(args)@` replaced by expand(args).
std::string expand(std::string s, const std::string& name, const std::function<std::string(const std::string&)>& fn) {
  const std::string open = "@" + name + "(";
  for (size_t at = s.find(open); at != std::string::npos; at = s.find(open, at)) {
    const size_t close = s.find(")@", at);
    const std::string text = fn(s.substr(at + open.size(), close - at - open.size()));
    s.replace(at, close + 2 - at, text);
    at += text.size();
  }
  return s;
}

// The rescale rule of the flash loop's steps (rescale_factor) at every @RESCALE(from|to|exp)@.
std::string expand_rescale(const std::string& s) {
  return expand(s, "RESCALE", [](const std::string& args) {
    const size_t a = args.find('|'), b = args.find('|', a + 1);
    return rescale_factor(args.substr(0, a), args.substr(a + 1, b - a - 1), args.substr(b + 1));
  });
}

// The vocabulary on zmm registers: lane masks are mask registers, 16-bit storage widens in
// the load (StorageLoad::load16), e^x is fusor_exp2f16.
std::string zmm_vocabulary(const StorageLoad& ld) {
  std::string s = "typedef __m512 fusor_fq_v;\ntypedef __mmask16 fusor_fq_m;\n#define FUSOR_FQ_W 16\n";
  s += "FUSOR_FQ_INLINE fusor_fq_m fusor_fq_mask(int64_t n) {\n"
       "  return n >= 16 ? (__mmask16)0xFFFF : (n > 0 ? (__mmask16)((1u << n) - 1u) : (__mmask16)0);\n}\n";
  s += "FUSOR_FQ_INLINE int fusor_fq_any(fusor_fq_m m) { return m != 0; }\n";
  s += "FUSOR_FQ_INLINE fusor_fq_v fusor_fq_load(fusor_fq_m m, const fusor_fq_t* p) { return " + ld.load16("m", "p") +
       "; }\n";
  s += "#define fusor_fq_loadf _mm512_loadu_ps\n#define fusor_fq_storef _mm512_storeu_ps\n";
  s += "#define fusor_fq_loadfm(m, p) _mm512_maskz_loadu_ps(m, p)\n";
  s += "#define fusor_fq_storefm _mm512_mask_storeu_ps\n";
  s += "#define fusor_fq_zero _mm512_setzero_ps\n#define fusor_fq_set1 _mm512_set1_ps\n";
  s += "#define fusor_fq_fma _mm512_fmadd_ps\n#define fusor_fq_sub _mm512_sub_ps\n#define fusor_fq_mul _mm512_mul_ps\n";
  s += "#define fusor_fq_add _mm512_add_ps\n#define fusor_fq_max _mm512_max_ps\n";
  s += "#define fusor_fq_min _mm512_min_ps\n";
  s += "#define fusor_fq_hsum _mm512_reduce_add_ps\n#define fusor_fq_hmax _mm512_reduce_max_ps\n";
  s += "#define fusor_fq_hmin _mm512_reduce_min_ps\n";
  s += "#define fusor_fq_blend _mm512_mask_blend_ps /* (m, a, b): b where m, else a */\n";
  s += "#define fusor_fq_keep _mm512_maskz_mov_ps  /* (m, v): v where m, else 0 */\n";
  return s + "#define fusor_fq_exp2 fusor_exp2f16\n";
}

// The same on ymm registers (AVX2 + FMA; F16C, which every AVX2 core has, for f16): a lane
// mask is the count of lanes it keeps, turned into a vector mask only at a partial vector,
// and 16-bit elements of a partial vector go through a zeroed copy (AVX2 has no 16-bit masked
// load). e^x is fusor_exp2f8.
std::string ymm_vocabulary(const StorageLoad& ld) {
  std::string s = "typedef __m256 fusor_fq_v;\ntypedef int fusor_fq_m;\n#define FUSOR_FQ_W 8\n";
  s += "FUSOR_FQ_INLINE fusor_fq_m fusor_fq_mask(int64_t n) { return n >= 8 ? 8 : (n > 0 ? (int)n : 0); }\n";
  s += "FUSOR_FQ_INLINE int fusor_fq_any(fusor_fq_m m) { return m != 0; }\n";
  s += "FUSOR_FQ_INLINE __m256i fusor_fq_lanes(fusor_fq_m m) {\n"
       "  return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));\n}\n";
  s += "#define fusor_fq_loadf _mm256_loadu_ps\n#define fusor_fq_storef _mm256_storeu_ps\n";
  s += "FUSOR_FQ_INLINE fusor_fq_v fusor_fq_loadfm(fusor_fq_m m, const float* p) {\n"
       "  return m == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, fusor_fq_lanes(m));\n}\n";
  s += "FUSOR_FQ_INLINE void fusor_fq_storefm(float* p, fusor_fq_m m, fusor_fq_v v) {\n"
       "  if (m == 8) _mm256_storeu_ps(p, v);\n  else _mm256_maskstore_ps(p, fusor_fq_lanes(m), v);\n}\n";
  if (ld.dtype == DType::f32) {
    s += "#define fusor_fq_load fusor_fq_loadfm\n";
  } else {
    s += "FUSOR_FQ_INLINE fusor_fq_v fusor_fq_load(fusor_fq_m m, const fusor_fq_t* p) {\n";
    s += "  if (m == 8) return " + ld.load8("p") + ";\n";
    s += "  fusor_fq_t t[8] = {0};\n  memcpy(t, p, sizeof(fusor_fq_t) * (size_t)m);\n";
    s += "  return " + ld.load8("t") + ";\n}\n";
  }
  s += "#define fusor_fq_zero _mm256_setzero_ps\n#define fusor_fq_set1 _mm256_set1_ps\n";
  s += "#define fusor_fq_fma _mm256_fmadd_ps\n#define fusor_fq_sub _mm256_sub_ps\n#define fusor_fq_mul _mm256_mul_ps\n";
  s += "#define fusor_fq_add _mm256_add_ps\n#define fusor_fq_max _mm256_max_ps\n";
  s += "FUSOR_FQ_INLINE float fusor_fq_hsum(fusor_fq_v v) {\n"
       "  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));\n"
       "  h = _mm_add_ps(h, _mm_movehl_ps(h, h));\n  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));\n}\n";
  s += "#define fusor_fq_min _mm256_min_ps\n";
  for (const std::string op : {"max", "min"})
    s += "FUSOR_FQ_INLINE float fusor_fq_h" + op + "(fusor_fq_v v) {\n  __m128 h = _mm_" + op +
         "_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));\n  h = _mm_" + op +
         "_ps(h, _mm_movehl_ps(h, h));\n  return _mm_cvtss_f32(_mm_" + op + "_ss(h, _mm_movehdup_ps(h)));\n}\n";
  s += "FUSOR_FQ_INLINE fusor_fq_v fusor_fq_blend(fusor_fq_m m, fusor_fq_v a, fusor_fq_v b) {\n"
       "  return m == 8 ? b : _mm256_blendv_ps(a, b, _mm256_castsi256_ps(fusor_fq_lanes(m)));\n}\n";
  s += "FUSOR_FQ_INLINE fusor_fq_v fusor_fq_keep(fusor_fq_m m, fusor_fq_v v) {\n"
       "  return m == 8 ? v : _mm256_and_ps(v, _mm256_castsi256_ps(fusor_fq_lanes(m)));\n}\n";
  return s + "#define fusor_fq_exp2 fusor_exp2f8\n";
}

} // namespace

bool attention_reads_few_queries(const Tuning& tuning) {
  return tuning.fq > 0 && softmax_exp_is_expf(); // (any scale, K layout and storage)
}

std::string attention_vector_source(const StorageLoad& ld, bool avx2) {
  std::string s = "typedef " + ld.type + " fusor_fq_t;\n";
  s += "#define FUSOR_FQ_INLINE static inline __attribute__((always_inline))\n";
  s += avx2 ? ymm_vocabulary(ld) : zmm_vocabulary(ld);
  return expand_rescale(s + kSoftmaxStep);
}

std::string attention_few_queries_source(const AttentionRegion& r, const StorageLoad& ld) {
  std::string s =
      "static inline float fusor_fq_elem(const fusor_fq_t* p, int64_t i) { return " + ld.load("p", "i") + "; }\n";
  s += kFewQueriesHead;
  s += r.k_transposed() ? kScoresTransposed : kScoresNatural;
  s += kFewQueries;
  // The op table's softmax factor 1/s, as the flash loop renders it.
  s = expand(s, "FACTOR", [](const std::string& sum) {
    return codegen::render_row_norm_factor(codegen::c99_simd_dialect(), RowNorm::softmax, sum, "(float)Nk", "0.0f");
  });
  return expand_rescale(s);
}

std::string attention_few_queries_dispatch(const AttentionRegion& r, const Tuning& tuning) {
  return "  if (M <= " + std::to_string(tuning.fq) +
         ") /* few query rows per head: K and V read in place (x86_simd_attention_few.cpp) */\n"
         "    return fusor_attention_few(Q, Kt, V, out, batch, heads, kv_heads, M, Nk, D, Dv, scale * "
         "1.44269504088896341f, " +
         std::string(r.causal() ? "1" : "0") + ", " + (r.q_transposed() ? "1" : "0") + ");\n";
}

} // namespace fusor::x86::simd
