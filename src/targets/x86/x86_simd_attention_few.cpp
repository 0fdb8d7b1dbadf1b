// Attention with few query rows per head (decode steps: one new token against a long KV
// cache) on the AVX-512 lane. The flash loop of x86_simd_attention.cpp packs K once per call
// and computes 12-row query blocks per query head, so one query row paid for 12 in the
// products and K's bytes crossed memory three times (read, packed, read again): a decode step
// ran at a third of the rate at which memory could deliver K and V. Here the rows of every
// query head that shares a KV head (grouped-query attention included) are taken together, up
// to FUSOR_FQ_ROWS at a time, and K and V are read in place, once per such group (16-bit
// elements widen as they load): a score is a dot product over D (16 lanes, then a horizontal
// sum), P·V a 64-column register tile over the block's keys. The work is then bound by
// memory, not by the arithmetic. When the (KV head, row group) items would leave threads
// idle, the keys are split too and the splits' partial softmax states merged (the
// flash-decoding scheme). The online softmax is the main loop's: the same
// max rule (a NaN score never becomes the max), 2^(s·scale·log2 e - m), the same rescale.
#include <functional>
#include <string>

#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

namespace {

const char* kFewQueries = R"(#define FUSOR_FQ_ROWS 4   /* query rows an item reads K and V for */
#define FUSOR_FQ_KB 256    /* keys per online-softmax step */
#define FUSOR_FQ_AHEAD 8   /* K and V rows prefetched this many keys ahead */
#define FUSOR_FQ_LINE (64 / (int64_t)sizeof(fusor_fq_t)) /* elements per cache line */
/* sc[r][j] = q_r . k_(n0 + j) for j < nk: every K row is read once for the item's R rows. */
static inline __attribute__((always_inline)) void fusor_fq_scores_rows(const int R, const float* restrict qb,
    int64_t Dq, const fusor_fq_t* restrict kb, int64_t D, int64_t nk, float* restrict sc) {
  const __mmask16 kt = (__mmask16)((1u << (D % 16)) - 1u);
  for (int64_t j = 0; j < nk; ++j) {
    const fusor_fq_t* restrict kj = kb + j * D;
    for (int64_t c = 0; c < D; c += FUSOR_FQ_LINE) _mm_prefetch((const char*)(kj + FUSOR_FQ_AHEAD * D + c), _MM_HINT_T0);
    __m512 acc[FUSOR_FQ_ROWS];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= D; c += 16) {
      const __m512 kv = fusor_fq_load((__mmask16)0xFFFF, kj + c);
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_load_ps(qb + r * Dq + c), kv, acc[r]);
    }
    if (c < D) {
      const __m512 kv = fusor_fq_load(kt, kj + c);
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_load_ps(qb + r * Dq + c), kv, acc[r]);
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sc[r * FUSOR_FQ_KB + j] = _mm512_reduce_add_ps(acc[r]);
  }
}
/* o[r][c0, c0 + 64) += sum_j p[r][j] v_j over the block's nk keys, for every 64-column chunk. */
static inline __attribute__((always_inline)) void fusor_fq_pv_rows(const int R, const float* restrict sc,
    const fusor_fq_t* restrict vb, int64_t Dv, int64_t nk, float* restrict o, int64_t ldo) {
  for (int64_t c0 = 0; c0 < Dv; c0 += 64) {
    __mmask16 mk[4];
    #pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const int64_t rem = Dv - c0 - 16 * q;
      mk[q] = rem >= 16 ? (__mmask16)0xFFFF : (rem > 0 ? (__mmask16)((1u << rem) - 1u) : (__mmask16)0);
    }
    __m512 acc[FUSOR_FQ_ROWS][4];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_maskz_loadu_ps(mk[q], o + r * ldo + c0 + 16 * q);
    for (int64_t j = 0; j < nk; ++j) {
      const fusor_fq_t* restrict vj = vb + j * Dv + c0;
      __m512 vv[4];
      #pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        if (mk[q] && 16 * q % FUSOR_FQ_LINE == 0)
          _mm_prefetch((const char*)(vj + FUSOR_FQ_AHEAD * Dv + 16 * q), _MM_HINT_T0);
        vv[q] = fusor_fq_load(mk[q], vj + 16 * q);
      }
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 pb = _mm512_set1_ps(sc[r * FUSOR_FQ_KB + j]);
        #pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_fmadd_ps(pb, vv[q], acc[r][q]);
      }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) _mm512_mask_storeu_ps(o + r * ldo + c0 + 16 * q, mk[q], acc[r][q]);
  }
}
/* Keys [n_lo, n_hi) of one KV head for R query rows (qb: [R][Dq], zero past D): the rows'
   unnormalised outputs o[R][ldo], running maxima m (base 2) and sums l. */
static inline __attribute__((always_inline)) void fusor_fq_rows(const int R, const float* restrict qb, int64_t Dq,
    const fusor_fq_t* restrict kh, const fusor_fq_t* restrict vh, int64_t n_lo, int64_t n_hi, int64_t D, int64_t Dv,
    float vs, float* restrict sc, float* restrict o, int64_t ldo, float* restrict m, float* restrict l) {
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    memset(o + r * ldo, 0, sizeof(float) * (size_t)Dv);
  }
  const __m512 vvs = _mm512_set1_ps(vs), ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t n0 = n_lo; n0 < n_hi; n0 += FUSOR_FQ_KB) {
    const int64_t nk = n_hi - n0 < FUSOR_FQ_KB ? n_hi - n0 : FUSOR_FQ_KB;
    fusor_fq_scores_rows(R, qb, Dq, kh + n0 * D, D, nk, sc);
    for (int r = 0; r < R; ++r) {
      float* restrict s = sc + r * FUSOR_FQ_KB;
      __m512 mx = ninf;
      for (int64_t j = 0; j < nk; j += 16) {
        const __mmask16 k = nk - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nk - j)) - 1u);
        mx = _mm512_max_ps(_mm512_mask_blend_ps(k, ninf, _mm512_loadu_ps(s + j)), mx);
      }
      const float bm = vs * _mm512_reduce_max_ps(mx);
      const float mo = m[r], mn = mo > bm ? mo : bm;
      const float dm = mo - mn;
      const float alpha = @RESCALE(mo|mn|exp2f(dm))@;
      const __m512 vmn = _mm512_set1_ps(mn);
      __m512 ls = _mm512_setzero_ps();
      for (int64_t j = 0; j < nk; j += 16) {
        const __mmask16 k = nk - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nk - j)) - 1u);
        const __m512 e = _mm512_maskz_mov_ps(k, fusor_exp2f16(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), vvs, vmn)));
        _mm512_storeu_ps(s + j, e);
        ls = _mm512_add_ps(ls, e);
      }
      l[r] = l[r] * alpha + _mm512_reduce_add_ps(ls);
      m[r] = mn;
      if (alpha != 1.0f)
        for (int64_t c = 0; c < Dv; ++c) o[r * ldo + c] *= alpha;
    }
    fusor_fq_pv_rows(R, sc, vh + n0 * Dv, Dv, nk, o, ldo);
  }
}
/* fusor_fq_rows with R a constant: the row loops unroll and the accumulators stay in registers. */
static void fusor_fq_item(int R, const float* restrict qb, int64_t Dq, const fusor_fq_t* restrict kh,
                          const fusor_fq_t* restrict vh, int64_t n_lo, int64_t n_hi, int64_t D, int64_t Dv, float vs,
                          float* restrict sc, float* restrict o, int64_t ldo, float* restrict m, float* restrict l) {
  switch (R) {
  case 4: fusor_fq_rows(4, qb, Dq, kh, vh, n_lo, n_hi, D, Dv, vs, sc, o, ldo, m, l); break;
  case 3: fusor_fq_rows(3, qb, Dq, kh, vh, n_lo, n_hi, D, Dv, vs, sc, o, ldo, m, l); break;
  case 2: fusor_fq_rows(2, qb, Dq, kh, vh, n_lo, n_hi, D, Dv, vs, sc, o, ldo, m, l); break;
  default: fusor_fq_rows(1, qb, Dq, kh, vh, n_lo, n_hi, D, Dv, vs, sc, o, ldo, m, l); break;
  }
}
/* The whole call: items (KV head, group of R rows, key split); with several splits a second
   pass merges each row's partial states. vs = scale * log2 e (> 0). causal: top-left, so query
   m sees keys 0..m (an item is then one row, its keys cut at m + 1). */
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
    float* ob = (float*)fusor_scratch(6, sizeof(float) * (size_t)pstride);
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
      fusor_fq_item(rn, qb, Dq, K + kvh * Nk * D, V + kvh * Nk * Dv, n_lo, n_hi, D, Dv, vs, sc, o, Dv,
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
          const float w = @RESCALE(ms|mm|exp2f(ms - mm))@;
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

} // namespace

bool attention_reads_few_queries(const AttentionRegion& r, const Tuning& tuning) {
  return tuning.fq > 0 && !tuning.amx && !tuning.avx2 && !r.k_transposed() && attention_softmax_in_base2(r);
}

std::string attention_few_queries_source(const StorageLoad& ld) {
  // The storage's element type and its widening loads (f32 as is; bf16 and f16 exactly).
  std::string s = "typedef " + ld.type + " fusor_fq_t;\n";
  s += "static inline __m512 fusor_fq_load(__mmask16 m, const fusor_fq_t* p) { return " + ld.load16("m", "p") + "; }\n";
  s += "static inline float fusor_fq_elem(const fusor_fq_t* p, int64_t i) { return " + ld.load("p", "i") + "; }\n";
  s += kFewQueries;
  // The op table's softmax factor 1/s, as the flash loop renders it; its rescale rule.
  s = expand(s, "FACTOR", [](const std::string& sum) {
    return codegen::render_row_norm_factor(codegen::c99_simd_dialect(), RowNorm::softmax, sum, "(float)Nk", "0.0f");
  });
  return expand(s, "RESCALE", [](const std::string& args) {
    const size_t a = args.find('|'), b = args.find('|', a + 1);
    return rescale_factor(args.substr(0, a), args.substr(a + 1, b - a - 1), args.substr(b + 1));
  });
}

std::string attention_few_queries_dispatch(const AttentionRegion& r, const Tuning& tuning) {
  return "  if (M <= " + std::to_string(tuning.fq) +
         ") /* few query rows per head: K and V read in place (x86_simd_attention_few.cpp) */\n"
         "    return fusor_attention_few(Q, Kt, V, out, batch, heads, kv_heads, M, Nk, D, Dv, scale * "
         "1.44269504088896341f, " +
         std::string(r.causal() ? "1" : "0") + ", " + (r.q_transposed() ? "1" : "0") + ");\n";
}

} // namespace fusor::x86::simd
