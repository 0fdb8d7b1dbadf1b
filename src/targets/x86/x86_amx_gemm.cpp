// The x86_amx lane's pieces of the GEMM body: f32 products on AMX bf16 tiles, exactly.
// Each f32 operand is split into bf16 parts that sum to it exactly (the top 8 significant
// bits, the next 8, the last 8: |m| < 2^-7 |x|, |l| < 2^-15 |x|); TDPBF16PS multiplies
// parts exactly (8 x 8 bits fit f32's 24) and accumulates in f32. By default the six part
// products of weight >= 2^-16 are computed ("bf16x6"): the three dropped (m.l, l.m, l.l)
// are below 2^-21 of the product, so a product is good to 2^-21 (f32 rounds to 2^-24) and
// sums over K keep f32-like error (the oracle's bench errors are below the zmm lane's).
// Option exact=1 computes all nine: every product exact, 1.5x the tile work. Storage with
// fewer significant bits needs fewer parts (bf16: 1, f16: 2), and then fewer products. The
// rest of the loop nest (items, K blocks, epilogue on the L1 tile, row reductions) is the
// AVX-512 lane's, x86_simd_gemm.cpp.
//
// Layouts, per K block rounded up to kcp (a multiple of 32; the pad is zero in A and B):
//   A panel (32 rows): [part][k / 32][row][32 k] bf16 - a 16-row tile is 16 x 64 bytes.
//   B panel (32 columns): [part][k / 2][column][k % 2] bf16 - the pairs TDPBF16PS reads.
// The micro-kernel holds a 32 x 32 tile of C in tmm0-3 over the whole block, A's two row
// halves in tmm4-5 and B's two column halves in tmm6-7; the products are ordered so that a
// loaded part is used by as many products as it can before the next load replaces it, and
// the largest comes last.
#include <algorithm>
#include <numeric>

#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

namespace {

struct Product {
  int a, b; // part indices
};

// The products whose weight is at least 2^-16 (a + b <= 2; all when exact), ordered to load
// fewest tiles with top x top last: the small products sum first, so the one rounding at the
// scale of the result is the last addition (otherwise each later small product rounds there
// again).
std::vector<Product> ordered_products(int nsa, int nsb, bool exact) {
  std::vector<Product> ps;
  for (int a = 0; a < nsa; ++a)
    for (int b = 0; b < nsb; ++b)
      if (exact || a + b <= 2) ps.push_back({a, b});
  std::vector<int> perm(ps.size()), best;
  std::iota(perm.begin(), perm.end(), 0);
  int best_loads = 1 << 30;
  do { // at most 9! orders
    if (ps[perm.back()].a != 0 || ps[perm.back()].b != 0) continue;
    int loads = 0, la = -1, lb = -1;
    for (int i : perm) {
      loads += (ps[i].a != la) + (ps[i].b != lb);
      la = ps[i].a, lb = ps[i].b;
    }
    if (loads < best_loads) best_loads = loads, best = perm;
  } while (std::next_permutation(perm.begin(), perm.end()));
  std::vector<Product> out;
  for (int i : best) out.push_back(ps[i]);
  return out;
}

// A tile load of part `part` into tmm4-7 (A's row halves, B's column halves) at k offset `at`.
std::string tile_load(int reg, int part, const std::string& at) {
  const std::string P = std::to_string(part);
  switch (reg) {
  case 4: return "_tile_loadd(4, a + " + at + " + " + P + " * pa, 64);";
  case 5: return "_tile_loadd(5, a + " + at + " + " + P + " * pa + 512, 64);";
  case 6: return "_tile_loadd(6, b + " + at + " + " + P + " * pb, 128);";
  default: return "_tile_loadd(7, b + " + at + " + " + P + " * pb + 32, 128);";
  }
}

// One 32-k step's tile products, software-pipelined, one string per part product: a tile is
// loaded for the next product as soon as the current one has issued its last product
// reading that register (tiles are not renamed), so loads overlap the other products
// instead of waiting for all four. The dps are ordered to free first the registers the next
// product replaces. The last product's loads are the next k step's first (at `next`, when
// `more` holds).
std::vector<std::string> k_step_products(const std::vector<Product>& ps, const std::string& more) {
  std::vector<std::string> out;
  for (size_t i = 0; i < ps.size(); ++i) {
    std::string s;
    const bool wrap = i + 1 == ps.size();
    const Product& nx = wrap ? ps[0] : ps[i + 1];
    const bool new_a = wrap || nx.a != ps[i].a, new_b = wrap || nx.b != ps[i].b;
    static const int kAFirst[4][3] = {{0, 4, 6}, {1, 4, 7}, {2, 5, 6}, {3, 5, 7}};
    static const int kBFirst[4][3] = {{0, 4, 6}, {2, 5, 6}, {1, 4, 7}, {3, 5, 7}};
    const auto& order = new_b && !new_a ? kBFirst : kAFirst;
    for (int j = 0; j < 4; ++j) {
      s += "    _tile_dpbf16ps(" + std::to_string(order[j][0]) + ", " + std::to_string(order[j][1]) + ", " +
           std::to_string(order[j][2]) + ");\n";
      for (int reg = 4; reg <= 7; ++reg) {
        const bool replaced = reg < 6 ? new_a : new_b;
        int last = -1;
        for (int u = 0; u < 4; ++u)
          if (order[u][1] == reg || order[u][2] == reg) last = u;
        if (!replaced || last != j) continue;
        const std::string l = tile_load(reg, reg < 6 ? nx.a : nx.b, wrap ? "next" : "at");
        s += wrap ? "    if (" + more + ") " + l + "\n" : "    " + l + "\n";
      }
    }
    out.push_back(s);
  }
  return out;
}

// The loads of the first product of a k step at `at`.
std::string first_loads(const std::vector<Product>& ps, const std::string& indent) {
  return indent + tile_load(4, ps[0].a, "0") + "\n" + indent + tile_load(5, ps[0].a, "0") + "\n" + indent +
         tile_load(6, ps[0].b, "0") + "\n" + indent + tile_load(7, ps[0].b, "0") + "\n";
}

std::string joined(const std::vector<std::string>& parts, const std::string& between = "") {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? between : "") + parts[i];
  return s;
}

// C of the micro-kernel (tmm0-3): zeroed or loaded from cin, stored to c.
const char* kTileC =
    R"(static inline __attribute__((always_inline)) void fusor_amx_c_begin(const float* cin, int64_t ldin) {
  if (cin) {
    _tile_loadd(0, cin, ldin * 4);
    _tile_loadd(1, cin + 16, ldin * 4);
    _tile_loadd(2, cin + 16 * ldin, ldin * 4);
    _tile_loadd(3, cin + 16 * ldin + 16, ldin * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
}
static inline __attribute__((always_inline)) void fusor_amx_c_end(float* c, int64_t ldc) {
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}
)";

} // namespace

int amx_parts(DType storage, bool has_prologue) {
  if (has_prologue) return 3; // the prologue's values are any f32
  return storage == DType::bf16 ? 1 : storage == DType::f16 ? 2 : 3;
}

namespace {

// Compiled with FUSOR_AMX_EMULATE (toolchain amx_emulated: tests on CPUs without AMX), the
// tile intrinsics the lane uses act on eight tiles in thread-local memory. TDPBF16PS as Intel
// defines it: bf16 inputs denormal as zero, products exact in f32, denormal results flushed;
// each output's 32 products of one instruction are summed in double and added to it with one
// rounding (the hardware's order within an instruction is not specified; this is at least as
// accurate, so the lane's accuracy tests still bind). The rest of the kernel (packing,
// softmax, scheduling, threads) is the code the tiles would run.
std::string amx_emulation_source() {
  return R"(#ifdef FUSOR_AMX_EMULATE /* tiles in memory: fusor's tests on CPUs without AMX (FUSOR_AMX_EMULATE=1) */
typedef struct { int rows, colsb; unsigned char d[16 * 64]; } fusor_emu_tile;
static _Thread_local fusor_emu_tile fusor_emu_t[8];
static void fusor_emu_config(const void* cfg) {
  const unsigned char* c = (const unsigned char*)cfg; /* colsb: 16-bit words at 16; rows: bytes at 48 */
  for (int t = 0; t < 8; ++t) fusor_emu_t[t].colsb = c[16 + 2 * t] | c[17 + 2 * t] << 8, fusor_emu_t[t].rows = c[48 + t];
}
static void fusor_emu_loadd(int t, const void* base, long stride) {
  fusor_emu_tile* x = fusor_emu_t + t;
  memset(x->d, 0, sizeof x->d);
  for (int r = 0; r < x->rows; ++r) memcpy(x->d + r * 64, (const char*)base + r * stride, (size_t)x->colsb);
}
static void fusor_emu_stored(int t, void* base, long stride) {
  const fusor_emu_tile* x = fusor_emu_t + t;
  for (int r = 0; r < x->rows; ++r) memcpy((char*)base + r * stride, x->d + r * 64, (size_t)x->colsb);
}
static inline __m512 fusor_emu_daz(__m512i bits) { /* bf16s in the top halves, f32 denormals as zero */
  return _mm512_maskz_mov_ps(_mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x7F800000)), _mm512_castsi512_ps(bits));
}
static void fusor_emu_dpbf16ps(int c, int a, int b) {
  fusor_emu_tile *tc = fusor_emu_t + c, *ta = fusor_emu_t + a, *tb = fusor_emu_t + b;
  const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int m = 0; m < tc->rows; ++m) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int k = 0; k < ta->colsb / 4; ++k) {
      uint32_t ap;
      memcpy(&ap, ta->d + m * 64 + k * 4, 4);
      const __m512i bw = _mm512_loadu_si512(tb->d + k * 64);
      const __m512 pe = _mm512_mul_ps(fusor_emu_daz(_mm512_set1_epi32((int)(ap << 16))),
                                      fusor_emu_daz(_mm512_slli_epi32(bw, 16)));
      const __m512 po = _mm512_mul_ps(fusor_emu_daz(_mm512_set1_epi32((int)(ap & 0xFFFF0000u))),
                                      fusor_emu_daz(_mm512_and_si512(bw, top)));
      s0 = _mm512_add_pd(s0, _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(pe)),
                                           _mm512_cvtps_pd(_mm512_castps512_ps256(po))));
      s1 = _mm512_add_pd(s1, _mm512_add_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(pe, 1)),
                                           _mm512_cvtps_pd(_mm512_extractf32x8_ps(po, 1))));
    }
    const __m512 acc = _mm512_loadu_ps(tc->d + m * 64);
    const __m256 r0 = _mm512_cvtpd_ps(_mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(acc)), s0));
    const __m256 r1 = _mm512_cvtpd_ps(_mm512_add_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(acc, 1)), s1));
    const __m512 r = _mm512_insertf32x8(_mm512_castps256_ps512(r0), r1, 1);
    const __m512i rb = _mm512_castps_si512(r);
    const __m512i flushed = _mm512_mask_and_epi32(rb, _mm512_testn_epi32_mask(rb, _mm512_set1_epi32(0x7F800000)), rb,
                                                  _mm512_set1_epi32((int)0x80000000u));
    _mm512_mask_storeu_epi32(tc->d + m * 64, (__mmask16)((1u << (tc->colsb / 4)) - 1u), flushed);
  }
}
#undef _tile_loadconfig
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#undef _tile_release
#define _tile_loadconfig(cfg) fusor_emu_config(cfg)
#define _tile_loadd(t, base, stride) fusor_emu_loadd(t, base, stride)
#define _tile_stored(t, base, stride) fusor_emu_stored(t, base, stride)
#define _tile_zero(t) memset(fusor_emu_t[t].d, 0, sizeof fusor_emu_t[t].d)
#define _tile_dpbf16ps(c, a, b) fusor_emu_dpbf16ps(c, a, b)
#define _tile_release() ((void)0)
#endif
)";
}

} // namespace

std::string amx_source(int nsa, int nsb) {
  std::string s = "#define FUSOR_MR 32\n#define FUSOR_NSA " + std::to_string(nsa) + "\n#define FUSOR_NSB " +
                  std::to_string(nsb) + "\n";
  s += amx_emulation_source();
  // Tile data is off until the process asks (Linux 5.16+): arch_prctl(ARCH_REQ_XCOMP_PERM,
  // XFEATURE_XTILEDATA), once per process.
  s += R"(static int fusor_amx_permit(void) {
#ifdef FUSOR_AMX_EMULATE
  return 1;
#endif
  static int state; /* 0 unknown, 1 granted, -1 denied; asking twice is harmless */
  int st = __atomic_load_n(&state, __ATOMIC_RELAXED);
  if (st == 0) {
    st = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
    __atomic_store_n(&state, st, __ATOMIC_RELAXED);
  }
  return st > 0;
}

/* Per thread: eight tiles of 16 rows x 64 bytes. */
static void fusor_amx_config(void) {
  struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } __attribute__((packed, aligned(64))) cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; ++i) cfg.rows[i] = 16, cfg.colsb[i] = 64;
  _tile_loadconfig(&cfg);
}

/* x = h + m + l exactly for finite x, each part a bf16 in the top half of a 32-bit lane (low
   half zero): truncation leaves a remainder that f32 holds exactly, twice. A NaN stays a NaN
   (its quiet bit, set here, is in the top half), an infinity is its own top part. Returns
   the lanes that are not finite. */
static inline __mmask16 fusor_split16(__m512 x, __m512i* h, __m512i* m, __m512i* l) {
  const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
  const __mmask16 special = _mm512_fpclass_ps_mask(x, 0x99); /* NaN or +-inf */
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  __m512i hb = _mm512_and_si512(_mm512_castps_si512(x), top);
  hb = _mm512_mask_or_epi32(hb, nan, hb, _mm512_set1_epi32(0x00400000));
  const __m512 r = _mm512_maskz_sub_ps((__mmask16)~special, x, _mm512_castsi512_ps(hb));
  const __m512i mb = _mm512_and_si512(_mm512_castps_si512(r), top);
  *h = hb;
  *m = mb;
  *l = _mm512_and_si512(_mm512_castps_si512(_mm512_sub_ps(r, _mm512_castsi512_ps(mb))), top);
  return special;
}

/* fusor_split16 for values that are finite or NaN: a NaN's three parts are NaN (its quiet
   bit is in the top half, and NaN - NaN is NaN), so nothing needs handling apart. */
static inline void fusor_split16_fn(__m512 x, __m512i* h, __m512i* m, __m512i* l) {
  const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
  const __m512i hb = _mm512_and_si512(_mm512_castps_si512(x), top);
  const __m512 r = _mm512_sub_ps(x, _mm512_castsi512_ps(hb));
  const __m512i mb = _mm512_and_si512(_mm512_castps_si512(r), top);
  *h = hb;
  *m = mb;
  *l = _mm512_castps_si512(_mm512_sub_ps(r, _mm512_castsi512_ps(mb))); /* 8 bits: exact in bf16 */
}

/* Lanes [0, n) of 16 (n may be <= 0 or >= 16). */
static inline __mmask16 fusor_mask16(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* One part of 16 + 16 values as 16 pairs (lo[j], hi[j]): a part is a bf16 in the top half of
   its lane, so a shift and one ternary-logic op ((hi & top) | lo >> 16) pack two. The mask
   matters: fusor_split16_fn's last part is denormal in f32 (its low half not zero) for values
   near FLT_MIN, and would write into its neighbour's bf16. */
static inline __m512i fusor_pair_halves(__m512i lo, __m512i hi) {
  return _mm512_ternarylogic_epi32(hi, _mm512_set1_epi32((int)0xFFFF0000u), _mm512_srli_epi32(lo, 16), 0xEA);
}

/* Every part's pairs (fusor_pair_halves), parts stride apart. */
static inline void fusor_store_halves(const __m512i* lo, const __m512i* hi, uint16_t* dst, int64_t stride, int ns) {
  for (int s = 0; s < ns; ++s) _mm512_storeu_si512(dst + s * stride, fusor_pair_halves(lo[s], hi[s]));
}

/* fusor_store_halves with streaming stores (dst and stride whole 64-byte lines). */
static inline void fusor_stream_halves(const __m512i* lo, const __m512i* hi, uint16_t* dst, int64_t stride, int ns) {
  for (int s = 0; s < ns; ++s) _mm512_stream_si512((__m512i*)(dst + s * stride), fusor_pair_halves(lo[s], hi[s]));
}

/* Rows k (x0) and k + 1 (x1) of 16 columns as the pairs TDPBF16PS multiplies: part s of
   column j at dst[s * stride + 2j] (row k) and dst[s * stride + 2j + 1]. Returns the
   columns holding a value that is not finite. stream: with streaming stores
   (fusor_stream_halves). */
static inline __mmask16 fusor_store_pairs(__m512 x0, __m512 x1, uint16_t* dst, int64_t stride, int ns, int stream) {
  __m512i p0[3], p1[3];
  const __mmask16 bad = fusor_split16(x0, &p0[0], &p0[1], &p0[2]) | fusor_split16(x1, &p1[0], &p1[1], &p1[2]);
  if (stream)
    fusor_stream_halves(p0, p1, dst, stride, ns);
  else
    fusor_store_halves(p0, p1, dst, stride, ns);
  return bad;
}

/* 32 consecutive values' parts (lo: the first 16, hi: the next 16) as one 64-byte run per
   part, parts stride apart. Parts are exact bf16, so the rounding conversion is exact. */
static inline void fusor_store_runs(const __m512i* lo, const __m512i* hi, uint16_t* dst, int64_t stride, int ns) {
  for (int s = 0; s < ns; ++s)
    _mm512_storeu_si512(dst + s * stride,
                        (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi[s]), _mm512_castsi512_ps(lo[s])));
}

/* fusor_split16 for one value. */
static inline void fusor_split1(float x, uint16_t* h, uint16_t* m, uint16_t* l) {
  uint32_t xb, hb, mb, lb;
  memcpy(&xb, &x, 4);
  hb = (xb & 0xFFFF0000u) | (x != x ? 0x00400000u : 0u);
  float hf, mf, r = 0.0f;
  memcpy(&hf, &hb, 4);
  if (isfinite(x)) r = x - hf;
  memcpy(&mb, &r, 4);
  mb &= 0xFFFF0000u;
  memcpy(&mf, &mb, 4);
  r -= mf;
  memcpy(&lb, &r, 4);
  *h = (uint16_t)(hb >> 16), *m = (uint16_t)(mb >> 16), *l = (uint16_t)(lb >> 16);
}

/* Stores parts [0, FUSOR_NS*) of x at p, p + stride, p + 2 stride. */
static inline void fusor_store_parts(float x, uint16_t* p, int64_t stride, int ns) {
  uint16_t q[3];
  fusor_split1(x, &q[0], &q[1], &q[2]);
  for (int s = 0; s < ns; ++s) p[s * stride] = q[s];
}

)";
  s += kTileC;
  return s;
}

std::string amx_ukr_source(int nsa, int nsb, bool exact, const std::string& name) {
  // c[32][32] (rows ldc floats apart) = cin + a . b over kc (a multiple of 32) for packed
  // panels a, b (layouts above; their parts pa and pb elements apart).
  const std::vector<Product> ps = ordered_products(nsa, nsb, exact);
  std::string s = "static void " + name +
                  "(int64_t kc, const uint16_t* restrict a, int64_t pa, const uint16_t* restrict b, int64_t pb, "
                  "float* c, int64_t ldc, const float* cin, int64_t ldin) {\n";
  s += "  fusor_amx_c_begin(cin, ldin);\n";
  s += first_loads(ps, "  ");
  s += "  for (int64_t k = 0; k < kc; k += 32) {\n";
  s += "    const int64_t at = k * 32, next = at + 1024;\n"; // a k step of a part: 32 x 32
  s += joined(k_step_products(ps, "k + 32 < kc"));
  s += "  }\n";
  s += "  fusor_amx_c_end(c, ldc);\n}\n\n";
  return s;
}

std::string amx_product_source(int nsa, int nsb, bool exact, const std::string& suffix) {
  // The micro-kernel's products one at a time, C left in tmm0-3 between them so that vector
  // work can run between the products: product p of the k step at a, b (its tiles loaded)
  // loads the next product's as the micro-kernel does; the last, the next k step's first
  // (at a + 1024, b + 1024) when `more`.
  const std::vector<Product> ps = ordered_products(nsa, nsb, exact);
  std::string s = "#define FUSOR_NPROD" + suffix + " " + std::to_string(ps.size()) + "\n";
  s += "static inline __attribute__((always_inline)) void fusor_amx_first_loads" + suffix +
       "(const uint16_t* restrict a, int64_t pa, const uint16_t* restrict b, int64_t pb) {\n" + first_loads(ps, "  ") +
       "}\n";
  s += "static inline __attribute__((always_inline)) void fusor_amx_product" + suffix +
       "(int p, const uint16_t* restrict a, int64_t pa, const uint16_t* restrict b, int64_t pb, int more) {\n";
  s += "  const int64_t at = 0, next = 1024;\n  switch (p) {\n";
  const std::vector<std::string> products = k_step_products(ps, "more");
  for (size_t i = 0; i < products.size(); ++i)
    s += "  case " + std::to_string(i) + ":\n" + products[i] + "    break;\n";
  s += "  }\n}\n\n";
  return s;
}

std::string amx_packing_ukr_source(int nsa, int nsb, bool exact, const StorageLoad& ld) {
  const std::vector<Product> ps = ordered_products(nsa, nsb, exact);
  // B ([K, N], not transposed) packed one unit at a time: rows k and k + 1 of one 16-column
  // half of one panel, their parts interleaved into one 32-bit lane per column (row k in the
  // low half), the pair TDPBF16PS multiplies. k outer: each row of B is read in one run
  // across the block's panels, which the prefetcher follows.
  const std::string T = ld.type;
  std::string s = "typedef struct {\n  const " + T + "* b;\n  const " + T + "* b2;" +
                  R"( /* a gated region's second weight (panels of 16 | 16 columns), else NULL */
  uint16_t* bp;
  uint16_t* cf;
  int64_t n, pc, kc, kcp, pb, pn, k, pp;
  int h;
} fusor_bpack;
static inline __attribute__((always_inline)) void fusor_bpack_unit(fusor_bpack* u) {
  if (u->k >= u->kcp) return;
  const int64_t k = u->k, pp = u->pp, cw = u->b2 ? 16 : 32;
  const int h = u->h;
  const int64_t c0 = (u->pb + pp) * cw, w = u->n - c0 < cw ? u->n - c0 : cw;
)" + "  const " + T +
                  R"(* src = u->b2 && h ? u->b2 : u->b;
  const int64_t j0 = u->b2 ? c0 : c0 + h * 16, left = u->b2 ? w : w - h * 16;
  const __mmask16 cm = fusor_mask16(left);
  /* Rows 16 ahead toward L1: spread between tile products, the prefetcher's streams lag. */
  _mm_prefetch((const char*)(src + (u->pc + k + 16) * u->n + j0), _MM_HINT_T0);
  _mm_prefetch((const char*)(src + (u->pc + k + 17) * u->n + j0), _MM_HINT_T0);
  const __m512 x0 = )" +
                  ld.load16("k < u->kc ? cm : 0", "src + (u->pc + k) * u->n + j0") + R"(;
  const __m512 x1 = )" +
                  ld.load16("k + 1 < u->kc ? cm : 0", "src + (u->pc + k + 1) * u->n + j0") + R"(;
  uint16_t* dk = u->bp + pp * FUSOR_NSB * u->kcp * 32 + k * 32 + h * 32;
  u->cf[pp * 2 + h] |= fusor_store_pairs(x0, x1, dk, u->kcp * 32, FUSOR_NSB, 0);
  if (++u->h == 2) {
    u->h = 0;
    if (++u->pp == u->pn) u->pp = 0, u->k += 2;
  }
}
static void fusor_bpack_all(fusor_bpack* u) {
  while (u->k < u->kcp) fusor_bpack_unit(u);
}
)";
  // fusor_amx_ukr's contract, packing one unit of u after each product; the pipelined
  // micro-kernel once nothing is left to pack.
  s += "static void fusor_amx_ukr_packing(int64_t kc, const uint16_t* restrict a, int64_t pa, "
       "const uint16_t* restrict b, int64_t pb, fusor_bpack* u, float* c, int64_t ldc, const float* cin, "
       "int64_t ldin) {\n";
  s += "  if (u->k >= u->kcp) {\n    fusor_amx_ukr(kc, a, pa, b, pb, c, ldc, cin, ldin);\n    return;\n  }\n";
  s += "  fusor_amx_c_begin(cin, ldin);\n";
  s += first_loads(ps, "  ");
  s += "  for (int64_t k = 0; k < kc; k += 32) {\n";
  s += "    const int64_t at = k * 32, next = at + 1024;\n";
  s += joined(k_step_products(ps, "k + 32 < kc"), "    fusor_bpack_unit(u);\n");
  s += "    fusor_bpack_unit(u);\n  }\n";
  s += "  fusor_amx_c_end(c, ldc);\n}\n\n";
  return s;
}

std::string amx_pack_row_chunk(const AmxRowChunk& c, const StorageLoad& ld, const std::string& indent) {
  const std::string& I = indent;
  const auto& v16 = codegen::c99_avx512_dialect();
  const bool vector_prologue =
      std::all_of(c.prologue.begin(), c.prologue.end(), [&](Op op) { return codegen::renders_in(v16, op); });
  std::string s;
  if (!c.contiguous.empty() && vector_prologue) {
    // 32 k: two vectors, the prologue over __m512, zero past the valid count (after the
    // prologue: its value at 0 need not be 0, nor finite).
    s += I + "__m512i p[2][3];\n";
    s += I + "for (int h = 0; h < 2; ++h) {\n";
    s += I + "  const int64_t left = " + c.valid + " - h * 16;\n";
    s += I + "  const __mmask16 km = fusor_mask16(left);\n";
    if (!c.prefetch.empty())
      s += I + "  if (" + c.prefetch_if + ") _mm_prefetch((const char*)(" + c.prefetch + " + h * 16), _MM_HINT_T0);\n";
    s += I + "  __m512 v = " + ld.load16("km", c.contiguous + " + h * 16") + ";\n";
    if (!c.prologue.empty()) {
      s += codegen::render_unary_chain(v16, c.prologue, "v", "", I + "  ");
      s += I + "  v = _mm512_maskz_mov_ps(km, v);\n";
    }
    s += c.finite_or_nan ? I + "  fusor_split16_fn(v, &p[h][0], &p[h][1], &p[h][2]);\n"
                         : I + "  if (fusor_split16(v, &p[h][0], &p[h][1], &p[h][2])) " + c.flag + " = 1;\n";
    s += I + "}\n";
    s += I + (c.pair_halves ? "fusor_store_halves" : "fusor_store_runs") + "(p[0], p[1], " + c.dst + ", " +
         c.part_stride + ", " + c.parts + ");\n";
  } else {
    s += I + "for (int64_t t = 0; t < 32; ++t) {\n";
    s += I + "  float v = 0.0f;\n";
    s += I + "  if (t < " + c.valid + ") {\n";
    s += I + "    v = " + ld.load(c.source, c.element) + ";\n";
    s += codegen::render_unary_chain(codegen::c99_simd_dialect(), c.prologue, "v", "", I + "    ");
    s += I + "  }\n";
    if (!c.finite_or_nan) s += I + "  if (!isfinite(v)) " + c.flag + " = 1;\n";
    s += I + "  fusor_store_parts(v, " + c.dst + (c.pair_halves ? " + (t & 15) * 2 + (t >> 4)" : " + t") + ", " +
         c.part_stride + ", " + c.parts + ");\n";
    s += I + "}\n";
  }
  return s;
}

std::string amx_pack_a(const GemmPlan& plan, const StorageLoad& ld, const std::string& indent) {
  const std::string& I = indent;
  std::string s;
  s += I + "for (int64_t q = 0; q < nq; ++q) {\n";
  s += I + "  const int64_t i = i0 + q * FUSOR_MR, rows = iend - i < FUSOR_MR ? iend - i : FUSOR_MR;\n";
  s += I + "  uint16_t* restrict base = ap + q * FUSOR_NSA * kcp * 32;\n";
  s += I + "  for (int64_t r = 0; r < FUSOR_MR; ++r)\n";
  s += I + "    for (int64_t k0 = 0; k0 < kcp; k0 += 32) {\n";
  s += I + "      uint16_t* restrict dst = base + k0 * 32 + r * 32;\n";
  s += I + "      if (r >= rows) {\n";
  s += I + "        for (int s = 0; s < FUSOR_NSA; ++s) memset(dst + s * kcp * 32, 0, 64);\n";
  s += I + "        continue;\n      }\n";
  AmxRowChunk c;
  c.source = "A";
  c.element = plan.a_trans ? "(pc + k0 + t) * M + i + r" : "(i + r) * K + pc + k0 + t";
  if (!plan.a_trans) c.contiguous = "A + (i + r) * K + pc + k0";
  c.valid = "kc - k0";
  c.prologue = plan.prologue;
  c.dst = "dst";
  c.part_stride = "kcp * 32";
  c.parts = "FUSOR_NSA";
  c.flag = "rf[q * FUSOR_MR + r]";
  s += amx_pack_row_chunk(c, ld, I + "      ");
  s += I + "    }\n" + I + "}\n";
  return s;
}

std::string amx_pack_b(const GemmPlan& plan, const StorageLoad& ld, const std::string& indent) {
  const std::string& I = indent;
  const bool gated = plan.gate.has_value();
  const std::string CW = gated ? "16" : "32";
  std::string s;
  if (!plan.b_trans) {
    // fusor_bpack's units (amx_packing_ukr_source), all at once.
    s += I + "{\n";
    s += I + "  fusor_bpack u = {B, " + std::string(gated ? "B2" : "NULL") +
         ", bcur, cf + (pb - p_lo) * 2, N, pc, kc, kcp, pb, pn, 0, 0, 0};\n";
    s += I + "  fusor_bpack_all(&u);\n";
    s += I + "}\n";
    return s;
  }
  s += I + "for (int64_t pp = 0; pp < pn; ++pp) {\n";
  s += I + "  uint16_t* restrict base = bp + pp * FUSOR_NSB * kcp * 32;\n";
  s += I + "  const int64_t c0 = (pb + pp) * " + CW + ", w = N - c0 < " + CW + " ? N - c0 : " + CW + ";\n";
  // A transposed B: element by element.
  {
    const std::string b_index = plan.b_trans ? "(c0 + j) * K + pc + k" : "(pc + k) * N + c0 + j";
    std::string value = ld.load("B", b_index);
    if (gated)
      value = "j < 16 ? " + ld.load("B", "(pc + k) * N + c0 + j") + " : " + ld.load("B2", "(pc + k) * N + c0 + j - 16");
    s += I + "  for (int64_t k = 0; k < kcp; ++k)\n";
    s += I + "    for (int64_t j = 0; j < 32; ++j) {\n";
    s += I + "      const int64_t col = " + std::string(gated ? "j & 15" : "j") + ";\n";
    s += I + "      const float v = k < kc && col < w ? (float)(" + value + ") : 0.0f;\n";
    s += I + "      if (!isfinite(v)) cf[(pb + pp - p_lo) * 2 + j / 16] |= (uint16_t)(1u << (j & 15));\n";
    s += I + "      fusor_store_parts(v, base + (k / 2) * 64 + j * 2 + (k & 1), kcp * 32, FUSOR_NSB);\n";
    s += I + "    }\n";
  }
  s += I + "}\n";
  return s;
}

std::string amx_special_fixup(const GemmPlan& plan, const StorageLoad& ld, const std::string& indent) {
  const std::string& I = indent;
  const bool gated = plan.gate.has_value();
  const std::string a_index = plan.a_trans ? "k * M + r0 + r" : "(r0 + r) * K + k";
  std::string b_value;
  if (gated)
    b_value = "j < 16 ? " + ld.load("B", "k * N + c0 + j") + " : " + ld.load("B2", "k * N + c0 + j - 16");
  else
    b_value = ld.load("B", plan.b_trans ? "(c0 + j) * K + k" : "k * N + c0 + j");
  std::string s;
  s += I + "{\n";
  s += I + "  int any = cf[(p - p_lo) * 2] | cf[(p - p_lo) * 2 + 1];\n";
  s += I + "  for (int64_t r = 0; r < rows; ++r) any |= rf[r0 - i0 + r];\n";
  s += I + "  if (any)\n";
  s += I + "    for (int64_t r = 0; r < rows; ++r)\n";
  s += I + "      for (int64_t j = 0; j < 32; ++j) {\n";
  s += I + "        if ((" + std::string(gated ? "j & 15" : "j") + ") >= cols) continue;\n";
  s += I + "        if (!rf[r0 - i0 + r] && !((cf[(p - p_lo) * 2 + j / 16] >> (j & 15)) & 1)) continue;\n";
  s += I + "        float sum = 0.0f;\n";
  s += I + "        for (int64_t k = 0; k < K; ++k) {\n";
  s += I + "          float v = " + ld.load("A", a_index) + ";\n";
  s += codegen::render_unary_chain(codegen::c99_simd_dialect(), plan.prologue, "v", "", I + "          ");
  s += I + "          sum = fmaf(v, " + b_value + ", sum);\n";
  s += I + "        }\n";
  s += I + "        tile[r * 32 + j] = sum;\n";
  s += I + "      }\n";
  s += I + "}\n";
  return s;
}

} // namespace fusor::x86::simd
