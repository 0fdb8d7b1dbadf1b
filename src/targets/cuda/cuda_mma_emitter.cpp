// The tensor-core lanes (cuda_mma_f16, cuda_mma_bf16): mma.sync m16n8k16 with f32
// accumulation, operands staged through shared memory by multi-stage cp.async pipelines
// and read with ldmatrix. GEMM-rooted kinds run a tiled GEMM whose epilogue (gate, bias,
// activations, residual) is rendered from the op table on the accumulators; attention runs
// a flash-style kernel (online softmax, scores never leave registers).
//
// Ragged shapes: tiles past M/N/K (or past Nk, D, Dv) are zero-filled by the copies and
// never stored; rows whose length is not a multiple of 8 elements cannot use 16-byte
// copies and take a per-element load path (same kernel, chosen at run time).
#include <algorithm>
#include <array>
#include <optional>

#include "codegen/abi.hpp"
#include "codegen/c_renderer.hpp"
#include "targets/cuda/cuda_emitters.hpp"
#include "targets/cuda/cuda_source.hpp"
#include "targets/cuda/cuda_target.hpp"

namespace fusor::cuda {
namespace {

using codegen::cuda_dialect;
using codegen::float_literal;
using codegen::replace_all;

// Device helpers; @T@ is the PTX element type (bf16 or f16).
constexpr std::string_view kMmaHelpers = R"(static __device__ __forceinline__ uint32_t fusor_smem(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void fusor_cp16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
static __device__ __forceinline__ void fusor_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void fusor_cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
static __device__ __forceinline__ void fusor_ldsm4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
static __device__ __forceinline__ void fusor_ldsm4t(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
static __device__ __forceinline__ void fusor_mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.@T@.@T@.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two floats rounded to the storage type, `lo` in the low half (the lower k index) */
static __device__ __forceinline__ uint32_t fusor_pack(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.@T@x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/* ROWS x COLS halves (COLS a multiple of 8) of g (row stride cols_total) from (row0, col0)
   into s (row stride ld_s); zero outside rows_total x cols_total. vec: 16-byte async copies
   (rows are 16-byte aligned, so an 8-element chunk is wholly inside or outside). SW: the
   layout wgmma reads instead (COLS a multiple of 64): blocks of 64 columns, [ROWS][64]
   each, 16-byte chunk c of row r at chunk c ^ (r % 8) (the 128-byte swizzle). */
template <int ROWS, int COLS, int THREADS, bool SW = false>
static __device__ __forceinline__ void fusor_load_tile(uint16_t* s, int ld_s, const uint16_t* __restrict__ g,
                                                       int64_t rows_total, int64_t cols_total, int64_t row0,
                                                       int64_t col0, bool vec) {
  constexpr int CPR = COLS / 8, CHUNKS = ROWS * CPR;
#pragma unroll
  for (int i = 0; i < (CHUNKS + THREADS - 1) / THREADS; ++i) {
    const int c = (int)threadIdx.x + i * THREADS;
    if (CHUNKS % THREADS != 0 && c >= CHUNKS) break;
    const int r = c / CPR, cc = (c % CPR) * 8;
    const int64_t gr = row0 + r, gc = col0 + cc;
    uint16_t* dst = s + (SW ? (cc >> 6) * (ROWS * 64) + r * 64 + ((((cc >> 3) & 7) ^ (r & 7)) << 3) : r * ld_s + cc);
    if (vec) {
      const bool in = gr < rows_total && gc < cols_total;
      fusor_cp16(fusor_smem(dst), in ? (const void*)(g + gr * cols_total + gc) : (const void*)g, in ? 16 : 0);
    } else {
      for (int e = 0; e < 8; ++e)
        dst[e] = (gr < rows_total && gc + e < cols_total) ? g[gr * cols_total + gc + e] : (uint16_t)0;
    }
  }
}
)";

// ---- GEMM-rooted kinds ----------------------------------------------------------------

struct GemmTile {
  std::string_view name;
  int bm, bn, warps_m, warps_n;
  bool wgmma = false; // Hopper warpgroup MMA (two warpgroups of 64 rows each), else mma.sync
  int stages = 4;     // default pipeline depth
};
constexpr std::array<GemmTile, 6> kGemmTiles{{
    {"128x128", 128, 128, 2, 2},
    {"128x256", 128, 256, 2, 4},
    {"256x128", 256, 128, 4, 2},
    {"64x128", 64, 128, 2, 2},
    {"wg128x256", 128, 256, 8, 1, true, 4},
    {"wg128x128", 128, 128, 8, 1, true, 6},
}};
// Gated kernels carry two accumulator sets: half the columns per block.
constexpr std::array<GemmTile, 2> kGatedTiles{{{"128x64", 128, 64, 2, 2}, {"64x128", 64, 128, 2, 2}}};
constexpr int kWgmmaBK = 64;          // one 128-byte swizzled row of 16-bit elements
constexpr int kMaxSmemOptin = 232448; // shared memory a Hopper block may opt into
constexpr int kBK = 32;

struct GemmPlan {
  bool b_kmajor = false; // B stored [N, K] (col_major / transpose_b)
  std::vector<Op> epilogue;
  bool residual = false;
  std::optional<Op> gate;
};

// Which output tile a block computes (m0, n0), and whether 16-byte copies apply.
constexpr std::string_view kGemmTileOrigin =
    R"(  const int64_t tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int64_t pid = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
  /* grouped raster: 8 tile-rows in flight share their B panels in L2 */
  const int64_t group = 8 * tiles_n, first = (pid / group) * 8;
  if (first >= tiles_m) return;
  const int64_t gsize = tiles_m - first < 8 ? tiles_m - first : 8;
  const int64_t m0 = (first + (pid % group) % gsize) * BM, n0 = ((pid % group) / gsize) * BN;
  const bool vec = K % 8 == 0 && (B_KMAJOR || N % 8 == 0);
)";

constexpr std::string_view kGemmMain = R"(  extern __shared__ uint4 fusor_smem_raw[];
  uint16_t* smem = (uint16_t*)fusor_smem_raw;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp / WARPS_N, wn = warp % WARPS_N;
@TILE_ORIGIN@  const int64_t KT = (K + BK - 1) / BK;
  float acc[NB][MI][NI][4];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[b][mi][ni][e] = 0.0f;
  auto load = [&](int s, int64_t kt) {
    uint16_t* st = smem + s * STAGE;
    const int64_t k0 = kt * BK;
    fusor_load_tile<BM, BK, THREADS>(st, A_LD, A, M, K, m0, k0, vec);
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      if (B_KMAJOR)
        fusor_load_tile<BN, BK, THREADS>(st + A_TILE + b * B_TILE, B_LD, Bmat[b], N, K, n0, k0, vec);
      else
        fusor_load_tile<BK, BN, THREADS>(st + A_TILE + b * B_TILE, B_LD, Bmat[b], K, N, k0, n0, vec);
    }
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) load(s, s);
    fusor_cp_commit();
  }
  for (int64_t kt = 0; kt < KT; ++kt) {
    fusor_cp_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < KT) load((int)((kt + STAGES - 1) % STAGES), kt + STAGES - 1);
    fusor_cp_commit();
    const uint16_t* As = smem + (int)(kt % STAGES) * STAGE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        fusor_ldsm4(af[mi], fusor_smem(As + (wm * WTM + mi * 16 + (lane & 15)) * A_LD + kk + (lane >> 4) * 8));
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const uint16_t* Bs = As + A_TILE + b * B_TILE;
        uint32_t bf[NI][2];
#pragma unroll
        for (int nj = 0; nj < NI; nj += 2) {
          uint32_t r[4];
          if (B_KMAJOR)
            fusor_ldsm4(r, fusor_smem(Bs + (wn * WTN + nj * 8 + (lane & 7) + (lane >> 4) * 8) * B_LD + kk +
                                      ((lane >> 3) & 1) * 8));
          else
            fusor_ldsm4t(r, fusor_smem(Bs + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * B_LD + wn * WTN + nj * 8 +
                                       (lane >> 4) * 8));
          bf[nj][0] = r[0];
          bf[nj][1] = r[1];
          bf[nj + 1][0] = r[2];
          bf[nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) fusor_mma(acc[b][mi][ni], af[mi], bf[ni][0], bf[ni][1]);
      }
    }
  }
  fusor_cp_wait<0>();
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int64_t gm = m0 + wm * WTM + mi * 16 + (lane >> 2) + hf * 8;
        const int64_t gn = n0 + wn * WTN + ni * 8 + (lane & 3) * 2;
        if (gm >= M) continue;
        const float raw[2] = {acc[0][mi][ni][hf * 2], acc[0][mi][ni][hf * 2 + 1]};
        const float raw_up[2] = {acc[NB - 1][mi][ni][hf * 2], acc[NB - 1][mi][ni][hf * 2 + 1]};
@STORE@      }
)";

// The store of one accumulator pair (raw[0..1] at row gm, columns gn, gn + 1; raw_up the
// up-projection's pair for gated kernels): epilogue from the op table, then one store.
constexpr std::string_view kGemmStore = R"(        float vals[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t n = gn + e;
          float v = raw[e];
@EPILOGUE@          vals[e] = v;
        }
        float* o = out + gm * N + gn;
        if (gn + 1 < N && (N & 1) == 0) {
          *(float2*)o = make_float2(vals[0], vals[1]);
        } else {
          if (gn < N) o[0] = vals[0];
          if (gn + 1 < N) o[1] = vals[1];
        }
)";

// Hopper (sm_90a) GEMM: warpgroup MMA (wgmma.mma_async) reading both operands from shared
// memory through matrix descriptors. Tiles are staged by cp.async in the 128-byte swizzled
// layout wgmma reads (16-byte chunk c of a 128-byte row r sits at chunk c ^ (r % 8)), in
// blocks of 64 columns: A and a [N, K] B are K-major, a [K, N] B is N-major (transposed
// read). STAGES - 2 tiles load ahead while one wgmma group runs, so one barrier per step
// orders both the copies and the reuse of a slot two steps old.
constexpr std::string_view kWgmmaHelpers =
    R"(static __device__ __forceinline__ uint64_t fusor_wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
         ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62); /* 128-byte swizzle */
}
static __device__ __forceinline__ void fusor_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void fusor_wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void fusor_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
static __device__ __forceinline__ void fusor_proxy_fence() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
)";

constexpr std::string_view kGemmWgmma = R"(  extern __shared__ uint4 fusor_smem_raw[];
  const uint32_t sbase = (fusor_smem(fusor_smem_raw) + 1023u) & ~1023u; /* swizzle atoms are 1024 bytes */
  uint16_t* const sgen = (uint16_t*)fusor_smem_raw + (sbase - fusor_smem(fusor_smem_raw)) / 2;
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3;
@TILE_ORIGIN@  const int KT = (int)((K + BK - 1) / BK);
  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
  /* Each thread copies the same chunks of every k-tile: chunk c = tid + i * THREADS. Their
     source pointers and swizzled offsets are computed once; tiles wholly inside the
     matrices take these unchecked copies, edge tiles the checked fusor_load_tile. */
  constexpr int A_CH = BM * BK / 8 / THREADS, B_CH = BN * BK / 8 / THREADS, B_CPR = B_KMAJOR ? BK / 8 : BN / 8;
  const bool inner_mn = vec && m0 + BM <= M && n0 + BN <= N;
  const uint16_t* a_src[A_CH];
  const uint16_t* b_src[B_CH];
  uint32_t a_dst[A_CH], b_dst[B_CH];
#pragma unroll
  for (int i = 0; i < A_CH; ++i) {
    const int c = tid + i * THREADS, r = c >> 3, ch = c & 7;
    a_src[i] = A + (m0 + r) * K + ch * 8;
    a_dst[i] = (uint32_t)(r * 128 + ((ch ^ (r & 7)) << 4));
  }
#pragma unroll
  for (int i = 0; i < B_CH; ++i) {
    const int c = tid + i * THREADS, r = c / B_CPR, ch = c % B_CPR;
    b_src[i] = B_KMAJOR ? Bmat[0] + (n0 + r) * K + ch * 8 : Bmat[0] + (int64_t)r * N + n0 + ch * 8;
    b_dst[i] = (uint32_t)(A_BYTES + (ch >> 3) * (BK * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
  }
  auto load = [&](int slot, int kt) {
    const uint32_t st = sbase + slot * STAGE_BYTES;
    const int64_t k0 = (int64_t)kt * BK;
    if (inner_mn && k0 + BK <= K) {
      const int64_t b_off = B_KMAJOR ? k0 : k0 * N;
#pragma unroll
      for (int i = 0; i < A_CH; ++i) fusor_cp16(st + a_dst[i], a_src[i] + k0, 16);
#pragma unroll
      for (int i = 0; i < B_CH; ++i) fusor_cp16(st + b_dst[i], b_src[i] + b_off, 16);
      return;
    }
    uint16_t* const sa = sgen + slot * (STAGE_BYTES / 2);
    fusor_load_tile<BM, BK, THREADS, true>(sa, 0, A, M, K, m0, k0, vec);
    if (B_KMAJOR)
      fusor_load_tile<BN, BK, THREADS, true>(sa + A_BYTES / 2, 0, Bmat[0], N, K, n0, k0, vec);
    else
      fusor_load_tile<BK, BN, THREADS, true>(sa + A_BYTES / 2, 0, Bmat[0], K, N, k0, n0, vec);
  };
  /* AHEAD tiles load ahead. One barrier a step (AHEAD = STAGES - 2): the slot refilled at
     step kt held step kt - 2, which every warpgroup finished before the barrier. Two
     barriers (AHEAD = STAGES - 1): the second, after each warpgroup waited for step kt - 1,
     frees that slot one step earlier. */
  constexpr int AHEAD = TWO_BARRIERS ? STAGES - 1 : STAGES - 2;
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    if (s < KT) load(s, s);
    fusor_cp_commit();
  }
  for (int kt = 0; kt < KT; ++kt) {
    fusor_cp_wait<AHEAD - 1>();
    fusor_proxy_fence(); /* cp.async writes, then the async proxy (wgmma) reads */
    __syncthreads();
    /* queue this step's wgmma group first, then refill a finished slot while it runs */
    const uint32_t st = sbase + (kt % STAGES) * STAGE_BYTES;
    fusor_wg_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const uint64_t da = fusor_wg_desc(st + wg * 64 * 128 + kk * 32, 16, 1024);
      const uint64_t db = B_KMAJOR ? fusor_wg_desc(st + A_BYTES + kk * 32, 16, 1024)
                                   : fusor_wg_desc(st + A_BYTES + kk * 16 * 128, BK * 128, 1024);
      fusor_wgmma(d, da, db);
    }
    fusor_wg_commit();
    if (TWO_BARRIERS) {
      fusor_wg_wait<1>();
      __syncthreads();
    }
    if (kt + AHEAD < KT) load((kt + AHEAD) % STAGES, kt + AHEAD);
    fusor_cp_commit();
    if (!TWO_BARRIERS) fusor_wg_wait<1>();
  }
  fusor_wg_wait<0>();
  fusor_cp_wait<0>();
  /* accumulator fragment: warp w of the warpgroup holds rows 16w + lane/4 (+8); pair j
     of 8 columns holds d[4j..4j+3] at columns 8j + 2(lane % 4) + {0, 1} */
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int64_t gm = m0 + wg * 64 + warp * 16 + (lane >> 2) + hf * 8;
        const int64_t gn = n0 + j * 8 + (lane & 3) * 2;
        if (gm >= M) continue;
        const float raw[2] = {d[4 * j + 2 * hf], d[4 * j + 2 * hf + 1]};
        const float* raw_up = raw;
        (void)raw_up;
@STORE@    }
)";

std::string gemm_epilogue(const GemmPlan& plan, DType dtype) {
  const auto& d = cuda_dialect();
  const std::string in = "          ";
  std::string s;
  if (plan.gate) {
    s += in + "float u = raw_up[e];\n";
    s += codegen::render_unary_chain(d, std::vector<Op>{*plan.gate}, "v", "", in);
    s += in + "v = " + codegen::render_op(d, Op::mul, "v", "u") + ";\n";
  }
  const bool has_bias = std::find(plan.epilogue.begin(), plan.epilogue.end(), Op::bias) != plan.epilogue.end();
  if (!has_bias && plan.epilogue.empty() && !plan.residual) return s;
  s += in + "if (n < N) {\n";
  if (has_bias) s += in + "  const float bv = " + load_expr(dtype, "bias", "n") + ";\n";
  s += codegen::render_unary_chain(d, plan.epilogue, "v", "bv", in + "  ");
  if (plan.residual) {
    s += in + "  const float rv = " + load_expr(dtype, "res", "gm * N + n") + ";\n";
    s += in + "  v = " + codegen::render_op(d, Op::add, "v", "rv") + ";\n";
  }
  return s + in + "}\n";
}

// Measured on the H200 (bench/results/gpu-bench.jsonl): wgmma tiles run 1.9-2.6x the
// mma.sync ones; 128x256 with two barriers a step is fastest from M = 4096 up, 128x128
// when few row tiles exist (M = 512: 0.047 against 0.078 ms). Without known dims (dynamic
// spec) the large tile is the default. Gated kernels (two accumulator sets) use mma.sync.
std::string default_gemm_tile(bool gated, const EmitOptions& options) {
  if (gated) return "128x64";
  if (compile_arch() != "sm_90") return "128x128";
  if (options.spec != SpecPolicy::dynamic && options.dims && options.dims->M <= 1024) return "wg128x128";
  return "wg128x256";
}

// The operand pointers every GEMM kernel binds (A, B or Wg/Wu, then bias and residual).
std::string gemm_operands(const GemmPlan& plan) {
  const bool gated = plan.gate.has_value();
  std::string s = "  const uint16_t* __restrict__ A = (const uint16_t*)operands[0];\n";
  s += "  const uint16_t* Bmat[NB] = {(const uint16_t*)operands[1]" +
       std::string(gated ? ", (const uint16_t*)operands[2]" : "") + "};\n";
  int next = gated ? 3 : 2;
  if (std::find(plan.epilogue.begin(), plan.epilogue.end(), Op::bias) != plan.epilogue.end())
    s += "  const uint16_t* __restrict__ bias = (const uint16_t*)operands[" + std::to_string(next++) + "];\n";
  if (plan.residual)
    s += "  const uint16_t* __restrict__ res = (const uint16_t*)operands[" + std::to_string(next++) + "];\n";
  return s;
}

// wgmma.mma_async m64nNk16 with f32 accumulators d[0..N/2) and both operands in shared
// memory; `trans_b` reads B N-major.
std::string wgmma_instruction(int n, bool trans_b, DType dtype) {
  const int regs = n / 2;
  std::string regs_list;
  for (int i = 0; i < regs; ++i) regs_list += (i ? ", %" : "%") + std::to_string(i);
  std::string s = "static __device__ __forceinline__ void fusor_wgmma(float* d, uint64_t da, uint64_t db) {\n";
  s += "  asm volatile(\"wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k16.f32." +
       std::string(dtype == DType::f16 ? "f16.f16" : "bf16.bf16") + " {" + regs_list + "}, %" + std::to_string(regs) +
       ", %" + std::to_string(regs + 1) + ", 1, 1, 1, 0, " + (trans_b ? "1" : "0") + ";\\n\"\n               : ";
  for (int i = 0; i < regs; ++i) s += (i ? ", " : "") + std::string("\"+f\"(d[") + std::to_string(i) + "])";
  s += "\n               : \"l\"(da), \"l\"(db));\n}\n";
  return s;
}

// The kernel's entry, its operands and `body` (the mma.sync or wgmma main loop) with the
// shared tile origin, store and epilogue filled in, closed.
Expected<std::string> gemm_entry_and_body(const Region& region, const GemmPlan& plan, DType dtype,
                                          const EmitOptions& options, int threads, std::string_view lane,
                                          std::string_view main_loop) {
  FUSOR_TRY_ASSIGN(std::string open, entry_open(region, options, threads, lane));
  std::string body(main_loop);
  replace_all(body, "@TILE_ORIGIN@", kGemmTileOrigin);
  replace_all(body, "@STORE@", kGemmStore);
  replace_all(body, "@EPILOGUE@", gemm_epilogue(plan, dtype));
  return open + gemm_operands(plan) + body + "}\n";
}

Expected<std::pair<std::string, LaunchSpec>> wgmma_gemm_kernel(const Region& region, const GemmPlan& plan, DType dtype,
                                                               const EmitOptions& options, std::string_view lane,
                                                               const GemmTile& tile, int stages, bool two_barriers) {
  const RegionKind kind = region_kind(region);
  if (const std::string arch = compile_arch(); arch != "sm_90")
    return unsupported(
        kind, lane, "tile " + std::string(tile.name) + " uses wgmma, which needs sm_90 (compiling for " + arch + ")");
  if (stages < 3) return unsupported(kind, lane, "tile " + std::string(tile.name) + " needs stages >= 3");
  const int threads = 256; // two warpgroups, 64 rows each
  const int stage_bytes = (tile.bm + tile.bn) * kWgmmaBK * 2;
  const int smem = stages * stage_bytes + 1024; // + alignment of the first swizzle atom
  if (smem > kMaxSmemOptin)
    return unsupported(kind, lane,
                       "tile " + std::string(tile.name) + " with " + std::to_string(stages) + " stages needs " +
                           std::to_string(smem) + " bytes of shared memory");
  const LaunchSpec launch{LaunchSpec::Rule::gemm, threads, tile.bm, tile.bn, smem};
  std::string s = wgmma_instruction(tile.bn, !plan.b_kmajor, dtype);
  s += "constexpr int BM = " + std::to_string(tile.bm) + ", BN = " + std::to_string(tile.bn) +
       ", BK = " + std::to_string(kWgmmaBK) + ", STAGES = " + std::to_string(stages) + ", THREADS = 256, NB = 1;\n";
  s += std::string("constexpr bool B_KMAJOR = ") + (plan.b_kmajor ? "true" : "false") + ";\n";
  s += std::string("constexpr bool TWO_BARRIERS = ") + (two_barriers ? "true" : "false") + ";\n";
  s += "constexpr int A_BYTES = BM * BK * 2, STAGE_BYTES = (BM + BN) * BK * 2;\n\n";
  FUSOR_TRY_ASSIGN(std::string kernel, gemm_entry_and_body(region, plan, dtype, options, threads, lane, kGemmWgmma));
  s += kernel;
  return std::pair{std::string(kArchLine) + "sm_90a\n" + std::string(kWgmmaHelpers) + s, launch};
}

Expected<std::pair<std::string, LaunchSpec>> gemm_kernel(const Region& region, const GemmPlan& plan, DType dtype,
                                                         const EmitOptions& options, std::string_view lane) {
  const RegionKind kind = region_kind(region);
  const bool gated = plan.gate.has_value();
  std::string tile_name = default_gemm_tile(gated, options);
  int stages = 0; // 0: the tile's default
  std::optional<bool> two_barriers;
  for (const auto& [key, value] : options.options) {
    if (key == "tile") {
      tile_name = value;
    } else if (key == "barriers") {
      if (value != "1" && value != "2") return unsupported(kind, lane, "option barriers=" + value + " (1 or 2)");
      two_barriers = value == "2";
    } else if (key == "stages") {
      stages = value.size() == 1 && value[0] >= '2' && value[0] <= '6' ? value[0] - '0' : 0;
      if (!stages) return unsupported(kind, lane, "option stages=" + value + " (2..6 are allowed)");
    } else {
      return unsupported(kind, lane, "unknown option '" + key + "=" + value + "' (tile, stages, barriers are known)");
    }
  }
  const GemmTile* tile = nullptr;
  std::string known;
  for (const auto& t : gated ? std::span<const GemmTile>(kGatedTiles) : std::span<const GemmTile>(kGemmTiles)) {
    known += (known.empty() ? "" : ", ") + std::string(t.name);
    if (t.name == tile_name) tile = &t;
  }
  if (!tile) return unsupported(kind, lane, "option tile=" + tile_name + " (known: " + known + ")");
  if (stages == 0) stages = tile->stages;
  if (tile->wgmma)
    return wgmma_gemm_kernel(region, plan, dtype, options, lane, *tile, stages, two_barriers.value_or(true));
  if (two_barriers) return unsupported(kind, lane, "option barriers applies to the wgmma (wg*) tiles");
  const int threads = tile->warps_m * tile->warps_n * 32;
  const int nb = gated ? 2 : 1;
  const int a_tile = tile->bm * (kBK + 8);
  const int b_tile = plan.b_kmajor ? tile->bn * (kBK + 8) : kBK * (tile->bn + 8);
  const int smem = stages * (a_tile + nb * b_tile) * 2;
  const LaunchSpec launch{LaunchSpec::Rule::gemm, threads, tile->bm, tile->bn, smem};

  std::string s;
  s += "constexpr int BM = " + std::to_string(tile->bm) + ", BN = " + std::to_string(tile->bn) +
       ", BK = " + std::to_string(kBK) + ", WARPS_M = " + std::to_string(tile->warps_m) +
       ", WARPS_N = " + std::to_string(tile->warps_n) + ", STAGES = " + std::to_string(stages) + ";\n";
  s += "constexpr int THREADS = WARPS_M * WARPS_N * 32, WTM = BM / WARPS_M, WTN = BN / WARPS_N;\n";
  s += "constexpr int MI = WTM / 16, NI = WTN / 8, NB = " + std::to_string(nb) + ";\n";
  s += std::string("constexpr bool B_KMAJOR = ") + (plan.b_kmajor ? "true" : "false") + ";\n";
  s += "constexpr int A_LD = BK + 8, B_LD = B_KMAJOR ? BK + 8 : BN + 8; /* padded rows: conflict-free ldmatrix */\n";
  s += "constexpr int A_TILE = BM * A_LD, B_TILE = B_KMAJOR ? BN * B_LD : BK * B_LD, STAGE = A_TILE + NB * B_TILE;\n\n";
  FUSOR_TRY_ASSIGN(std::string kernel, gemm_entry_and_body(region, plan, dtype, options, threads, lane, kGemmMain));
  s += kernel;
  return std::pair{s, launch};
}

// ---- attention --------------------------------------------------------------------------

// 128 query rows (8 warps) a block: K/V tiles are shared by twice the rows of 64, 0.52 of
// FA2 against 0.43 at B8 H16 S4096 D128 on the H200 (bench/results/gpu-bench.jsonl).
constexpr int kAttnBr = 128, kAttnMaxD = 128;

constexpr std::string_view kAttention = R"(constexpr int BC = 64;

/* One block: BR query rows of one (batch, head) against all visible keys, BC keys a step,
   K/V double-buffered. Each warp owns 16 query rows; DP is D and Dv padded with zeros. */
template <int DP>
static __device__ __forceinline__ void fusor_attention_block(const uint16_t* __restrict__ Q,
                                                             const uint16_t* __restrict__ Kp,
                                                             const uint16_t* __restrict__ Vp, float* __restrict__ O,
                                                             int64_t M, int64_t Nk, int64_t D, int64_t Dv, int64_t q0,
                                                             uint16_t* smem, bool vec) {
  constexpr int LD = DP + 8;
  uint16_t* Qs = smem;
  uint16_t* Ks = Qs + BR * (128 + 8); /* Q's tile is the largest size so it can hold BR x BC floats later */
  uint16_t* Vs = Ks + 2 * BC * LD;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = lane & 3;
  const float scale = @SCALE@;
  const int64_t last_row = (q0 + BR < M ? q0 + BR : M) - 1;
  int64_t n_tiles = (Nk + BC - 1) / BC;
  if (CAUSAL && last_row / BC + 1 < n_tiles) n_tiles = last_row / BC + 1;
  fusor_load_tile<BR, DP, THREADS>(Qs, LD, Q, M, D, q0, 0, vec);
  if (n_tiles > 0) {
    fusor_load_tile<BC, DP, THREADS>(Ks, LD, Kp, Nk, D, 0, 0, vec);
    fusor_load_tile<BC, DP, THREADS>(Vs, LD, Vp, Nk, Dv, 0, 0, vec);
  }
  fusor_cp_commit();
  fusor_cp_wait<0>();
  __syncthreads();
  uint32_t qf[DP / 16][4];
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks)
    fusor_ldsm4(qf[ks], fusor_smem(Qs + (warp * 16 + (lane & 15)) * LD + ks * 16 + (lane >> 4) * 8));
  const int64_t row0 = q0 + warp * 16 + (lane >> 2), row1 = row0 + 8;
  float o[DP / 8][4];
#pragma unroll
  for (int i = 0; i < DP / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
  for (int64_t j = 0; j < n_tiles; ++j) {
    const int st = (int)(j & 1);
    if (j + 1 < n_tiles) {
      fusor_load_tile<BC, DP, THREADS>(Ks + (st ^ 1) * BC * LD, LD, Kp, Nk, D, (j + 1) * BC, 0, vec);
      fusor_load_tile<BC, DP, THREADS>(Vs + (st ^ 1) * BC * LD, LD, Vp, Nk, Dv, (j + 1) * BC, 0, vec);
    }
    fusor_cp_commit();
    fusor_cp_wait<1>();
    __syncthreads();
    const uint16_t* Kt = Ks + st * BC * LD;
    const uint16_t* Vt = Vs + st * BC * LD;
    const int64_t kbase = j * BC;
    /* S = Q K^T: K rows are [key][d], the col-major B operand */
    float s[BC / 8][4];
#pragma unroll
    for (int i = 0; i < BC / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < DP / 16; ++ks)
#pragma unroll
      for (int np = 0; np < BC / 16; ++np) {
        uint32_t b[4];
        fusor_ldsm4(b, fusor_smem(Kt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + ks * 16 + ((lane >> 3) & 1) * 8));
        fusor_mma(s[2 * np], qf[ks], b[0], b[1]);
        fusor_mma(s[2 * np + 1], qf[ks], b[2], b[3]);
      }
    /* scale, mask (keys past Nk; causal: key > query), row max over visible keys */
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = kbase + nt * 8 + 2 * t + (e & 1), row = (e >> 1) ? row1 : row0;
        const bool vis = key < Nk && (!CAUSAL || key <= row);
        const float x = s[nt][e] * scale;
        s[nt][e] = x;
        if (vis) tmax[e >> 1] = x > tmax[e >> 1] ? x : tmax[e >> 1];
      }
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, tmax[h], off);
        tmax[h] = w > tmax[h] ? w : tmax[h];
      }
      const float m_new = tmax[h] > m_r[h] ? tmax[h] : m_r[h];
      /* rescale what was accumulated under the old max (1 when the max did not move,
         which also keeps rows that have seen only masked keys at exactly 0) */
      const float dm = m_r[h] - m_new;
      corr[h] = m_new == m_r[h] ? 1.0f : @EXP_DM@;
      m_r[h] = m_new;
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = kbase + nt * 8 + 2 * t + (e & 1), row = (e >> 1) ? row1 : row0;
        const bool vis = key < Nk && (!CAUSAL || key <= row);
        const float dd = s[nt][e] - m_r[e >> 1];
        const float p = vis ? @EXP_DD@ : 0.0f;
        s[nt][e] = p;
        rs[e >> 1] += p;
      }
    l_r[0] = l_r[0] * corr[0] + rs[0];
    l_r[1] = l_r[1] * corr[1] + rs[1];
#pragma unroll
    for (int i = 0; i < DP / 8; ++i) {
      o[i][0] *= corr[0];
      o[i][1] *= corr[0];
      o[i][2] *= corr[1];
      o[i][3] *= corr[1];
    }
    /* A tile where some row cannot see some key: 0 * NaN from V would leak into that row
       on the tensor cores, so a tile holding a non-finite V takes an exact per-key path. */
    bool slow = false;
    if (CAUSAL && kbase + BC - 1 > q0) {
      bool bad = false;
      for (int i = threadIdx.x; i < BC * DP; i += THREADS) {
        const int r = i / DP, c = i % DP;
        if (kbase + r < Nk && c < Dv) bad |= (Vt[r * LD + c] & @EXP_MASK@) == @EXP_MASK@;
      }
      slow = __syncthreads_or(bad);
    }
    if (!slow) {
#pragma unroll
      for (int kk = 0; kk < BC / 16; ++kk) {
        uint32_t pa[4] = {fusor_pack(s[2 * kk][0], s[2 * kk][1]), fusor_pack(s[2 * kk][2], s[2 * kk][3]),
                          fusor_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                          fusor_pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < DP / 16; ++dp) {
          uint32_t b[4];
          fusor_ldsm4t(b, fusor_smem(Vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                                     (lane >> 4) * 8));
          fusor_mma(o[2 * dp], pa, b[0], b[1]);
          fusor_mma(o[2 * dp + 1], pa, b[2], b[3]);
        }
      }
    } else {
      /* Q lives in registers now: its tile holds this warp's probabilities */
      float* P = (float*)Qs + warp * 16 * BC;
#pragma unroll
      for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) P[((lane >> 2) + (e >> 1) * 8) * BC + nt * 8 + 2 * t + (e & 1)] = s[nt][e];
      __syncwarp();
#pragma unroll 1
      for (int kn = 0; kn < BC; ++kn) {
        const float p0 = P[(lane >> 2) * BC + kn], p1 = P[((lane >> 2) + 8) * BC + kn];
        const int64_t key = kbase + kn;
        const bool v0 = key < Nk && key <= row0, v1 = key < Nk && key <= row1;
#pragma unroll
        for (int i = 0; i < DP / 8; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float vv = @LOADV@(Vt[kn * LD + i * 8 + 2 * t + e]);
            if (v0) o[i][e] += p0 * vv;
            if (v1) o[i][2 + e] += p1 * vv;
          }
      }
      __syncwarp();
    }
    __syncthreads();
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_r[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int64_t row = h ? row1 : row0;
    if (row >= M) continue;
    /* a row that sees no key at all (Nk == 0) outputs zeros */
    const int64_t visible = CAUSAL ? (row + 1 < Nk ? row + 1 : Nk) : Nk;
    const float rf = @FACTOR@;
#pragma unroll
    for (int i = 0; i < DP / 8; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t c = i * 8 + 2 * t + e;
        if (c < Dv) O[row * Dv + c] = visible > 0 ? o[i][h * 2 + e] * rf : 0.0f;
      }
  }
}

)";

constexpr std::string_view kAttentionEntry = R"(  if (D > 128 || Dv > 128) {
    if (threadIdx.x == 0) *status = 3; /* head dims past this lane's registers */
    return;
  }
  extern __shared__ uint4 fusor_smem_raw[];
  const int64_t bh = blockIdx.y, b = bh / heads, h = bh % heads;
  const int64_t kvh = b * kv_heads + h / (heads / kv_heads);
  /* causal blocks further down see more keys: start those first */
  const int64_t qb = CAUSAL ? (int64_t)gridDim.x - 1 - blockIdx.x : (int64_t)blockIdx.x;
  const uint16_t* Q = (const uint16_t*)operands[0] + bh * M * D;
  const uint16_t* Kp = (const uint16_t*)operands[1] + kvh * Nk * D;
  const uint16_t* Vp = (const uint16_t*)operands[2] + kvh * Nk * Dv;
  float* O = out + bh * M * Dv;
  const bool vec = D % 8 == 0 && Dv % 8 == 0;
  if (D <= 64 && Dv <= 64)
    fusor_attention_block<64>(Q, Kp, Vp, O, M, Nk, D, Dv, qb * BR, (uint16_t*)fusor_smem_raw, vec);
  else
    fusor_attention_block<128>(Q, Kp, Vp, O, M, Nk, D, Dv, qb * BR, (uint16_t*)fusor_smem_raw, vec);
}
)";

Expected<std::pair<std::string, LaunchSpec>> attention_kernel(const Region& region, const AttentionRegion& a,
                                                              DType dtype, const EmitOptions& options,
                                                              std::string_view lane) {
  int rows = kAttnBr; // query rows a block: 16 a warp
  for (const auto& [key, value] : options.options) {
    if (key == "rows" && (value == "64" || value == "128")) {
      rows = std::stoi(value);
      continue;
    }
    return unsupported(RegionKind::attention, lane, "unknown option '" + key + "=" + value + "' (rows=64|128)");
  }
  const auto& d = cuda_dialect();
  const int threads = rows / 16 * 32;
  const int smem = (rows + 4 * 64) * (kAttnMaxD + 8) * 2;
  const LaunchSpec launch{LaunchSpec::Rule::attention, threads, rows, 0, smem};
  std::string body = "constexpr int BR = " + std::to_string(rows) + ", THREADS = " + std::to_string(threads) + ";\n" +
                     std::string(kAttention);
  replace_all(body, "@SCALE@", float_literal(a.scale()));
  replace_all(body, "@EXP_DM@", codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dm"));
  // The probabilities feed f16/bf16 MMAs: the hardware exp (__expf, ex2.approx based: a few
  // ulp) is far inside those budgets and costs one instruction where expf costs a dozen.
  std::string exp_dd = codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dd");
  replace_all(exp_dd, "expf(", "__expf(");
  replace_all(body, "@EXP_DD@", exp_dd);
  replace_all(body, "@FACTOR@", codegen::render_row_norm_factor(d, RowNorm::softmax, "l", "(float)visible", "0.0f"));
  replace_all(body, "@EXP_MASK@", dtype == DType::bf16 ? "0x7f80" : "0x7c00"); // all-ones exponent: inf or NaN
  replace_all(body, "@LOADV@", dtype == DType::bf16 ? "fusor_bf16" : "fusor_f16");
  std::string s = std::string("constexpr bool CAUSAL = ") + (a.causal() ? "true" : "false") + ";\n" + body;
  FUSOR_TRY_ASSIGN(std::string open, entry_open(region, options, threads, lane));
  s += open + std::string(kAttentionEntry);
  return std::pair{s, launch};
}

std::string_view lane_of(DType dtype) { return dtype == DType::f16 ? kMmaF16Lane : kMmaBf16Lane; }

} // namespace

std::optional<std::string> mma_declines(const Region& region, DType dtype) {
  const std::string lane(lane_of(dtype));
  const DType storage = region_storage(region);
  if (storage != dtype)
    return lane + " runs " + std::string(dtype_name(dtype)) + " storage; the region stores " +
           std::string(dtype_name(storage));
  if (const auto* f = std::get_if<FusedRegion>(&region)) {
    if (!f->prologue().empty()) return lane + " applies no prologue ops (cuda_simt does)";
    if (f->reduction()) return lane + " applies no row reduction (cuda_simt does)";
    if (f->a_layout() == Layout::col_major) return lane + " reads A row-major only";
    return std::nullopt;
  }
  if (const auto* m = std::get_if<MatmulRegion>(&region))
    return m->transpose_a() ? std::optional<std::string>(lane + " reads A row-major only") : std::nullopt;
  if (const auto* a = std::get_if<AttentionRegion>(&region)) {
    if (a->q_transposed() || a->k_transposed()) return lane + " reads Q and K in natural [rows, D] order only";
    return std::nullopt;
  }
  if (std::holds_alternative<GatedMatmulRegion>(region)) return std::nullopt;
  return lane + " covers fused, matmul, attention and gated regions";
}

Expected<KernelSource> emit_mma(const Region& region, const EmitOptions& options, DType dtype) {
  const RegionKind kind = region_kind(region);
  const std::string_view lane = lane_of(dtype);
  if (dtype != DType::f16 && dtype != DType::bf16)
    return unsupported(kind, lane, "tensor-core lanes take f16 or bf16 storage, not " + std::string(dtype_name(dtype)));
  if (auto why = mma_declines(region, dtype)) return unsupported(kind, lane, *why);
  const std::string key = codegen::shape_key(kind, options.spec, options.dims);
  Expected<std::pair<std::string, LaunchSpec>> kernel = make_error(ErrorCode::internal, "no kernel");
  if (const auto* f = std::get_if<FusedRegion>(&region))
    kernel = gemm_kernel(region, {f->b_layout() == Layout::col_major, f->epilogue(), f->residual(), std::nullopt},
                         dtype, options, lane);
  else if (const auto* m = std::get_if<MatmulRegion>(&region))
    kernel = gemm_kernel(region, {m->transpose_b(), {}, false, std::nullopt}, dtype, options, lane);
  else if (const auto* g = std::get_if<GatedMatmulRegion>(&region))
    kernel = gemm_kernel(region, {false, {}, false, g->gate_act()}, dtype, options, lane);
  else if (const auto* a = std::get_if<AttentionRegion>(&region))
    kernel = attention_kernel(region, *a, dtype, options, lane);
  if (!kernel) return kernel.error();
  std::string helpers(kMmaHelpers);
  replace_all(helpers, "@T@", dtype == DType::f16 ? "f16" : "bf16");
  std::string source = kernel_header(region, lane, key, kernel->second) + helpers + kernel->first;
  return make_source(region, options, std::move(source), std::string(lane), key);
}

std::optional<std::string> mma_dims_decline(const KernelSource& source, const ProblemShape& shape) {
  if (source.lane != kMmaF16Lane && source.lane != kMmaBf16Lane) return std::nullopt;
  auto launch = parse_launch(source.source);
  if (launch && launch->rule == LaunchSpec::Rule::attention && (shape.D > kAttnMaxD || shape.Dv > kAttnMaxD))
    return source.lane + " handles attention head dims up to " + std::to_string(kAttnMaxD) +
           "; given D=" + std::to_string(shape.D) + ", Dv=" + std::to_string(shape.Dv);
  return std::nullopt;
}

} // namespace fusor::cuda
