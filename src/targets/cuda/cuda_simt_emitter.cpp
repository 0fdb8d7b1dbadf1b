// The generic CUDA lane (cuda_simt): every region kind as plain SIMT CUDA C++ rendered
// through the CUDA dialect of the shared C-family renderer. Operands are converted to f32
// on load and all arithmetic is f32, like the x86 lane, so its budget is the f32 one.
#include "codegen/abi.hpp"
#include "codegen/c_renderer.hpp"
#include "targets/cuda/cuda_emitters.hpp"
#include "targets/cuda/cuda_source.hpp"

namespace fusor::cuda {
namespace {

using codegen::cuda_dialect;
using codegen::float_literal;

constexpr int kGemmTile = 64, kGemmK = 16, kGemmThreads = 256;

// ---- row normalisation, one warp (or block) per row, from the op table's four steps ----

// `scope` is "warp" or "block": which reduction helpers combine the partial results.
std::string parallel_row_norm(RowNorm norm, const std::string& row, const std::string& n, const std::string& eps,
                              const std::string& lane, const std::string& stride, bool block, const std::string& in) {
  const auto& d = cuda_dialect();
  const RowNormInfo& info = row_norm_info(norm);
  const std::string sum = block ? "fusor_block_sum(" : "fusor_warp_sum(";
  const std::string mx = block ? "fusor_block_max(" : "fusor_warp_max(";
  const std::string tail = block ? ", red_)" : ")";
  const std::string loop = "for (int64_t j_ = " + lane + "; j_ < " + n + "; j_ += " + stride + ")";
  std::string s = in + "{\n" + in + "  float c_ = 0.0f;\n";
  if (info.centre == RowCentre::mean) {
    s += in + "  float p_ = 0.0f;\n" + in + "  " + loop + " p_ += " + row + "[j_];\n";
    s += in + "  c_ = " + sum + "p_" + tail + " / (float)" + n + ";\n";
  } else if (info.centre == RowCentre::max) {
    s += in + "  float p_ = -INFINITY;\n" + in + "  " + loop + " p_ = " + row + "[j_] > p_ ? " + row + "[j_] : p_;\n";
    s += in + "  c_ = " + mx + "p_" + tail + ";\n";
  }
  s += in + "  float s_ = 0.0f;\n";
  s += in + "  " + loop + " { const float d_ = " + row +
       "[j_] - c_; s_ += " + codegen::render_row_norm_accumulate(d, norm, "d_") + "; }\n";
  s += in + "  s_ = " + sum + "s_" + tail + ";\n";
  s += in + "  const float r_ = " + codegen::render_row_norm_factor(d, norm, "s_", "(float)" + n, eps) + ";\n";
  s += in + "  " + loop + " { const float d_ = " + row + "[j_] - c_; " + row +
       "[j_] = " + codegen::render_row_norm_output(d, norm, "d_", "r_") + "; }\n";
  return s + in + "}\n";
}

// ---- GEMM-rooted kinds: 64×64 tiles, 256 threads, 4×4 outputs per thread ---------------

struct GemmPlan {
  bool a_trans = false, b_trans = false;
  std::vector<Op> prologue, epilogue;
  bool residual = false;
  std::optional<RowNorm> reduction;
  double eps = 0.0;
  std::optional<Op> gate;
};

std::string gemm_body(const GemmPlan& plan, DType dtype) {
  const auto& d = cuda_dialect();
  const std::string T = storage_type(dtype);
  const bool gated = plan.gate.has_value();
  const bool has_bias = std::find(plan.epilogue.begin(), plan.epilogue.end(), Op::bias) != plan.epilogue.end();
  auto ld = [&](const std::string& p, const std::string& i) { return load_expr(dtype, p, i); };
  std::string s;
  int next = 0;
  auto bind = [&](const std::string& name) {
    s += "  const " + T + "* __restrict__ " + name + " = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  };
  bind("A");
  bind("B");
  if (gated) bind("B2");
  if (has_bias) bind("bias");
  if (plan.residual) bind("res");
  const std::string t = std::to_string(kGemmTile), tk = std::to_string(kGemmK);
  s += "  __shared__ float As[" + tk + "][" + t + " + 4];\n  __shared__ float Bs[" + tk + "][" + t + " + 4];\n";
  if (gated) s += "  __shared__ float Bs2[" + tk + "][" + t + " + 4];\n";
  s += "  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;\n";
  s += "  const int64_t tiles_n = (N + " + t + " - 1) / " + t + ";\n";
  s += "  const int64_t pid = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;\n";
  const bool rows = plan.reduction.has_value(); // a block owns whole rows so it can normalise them
  s += std::string("  const int64_t m0 = ") + (rows ? "pid" : "(pid / tiles_n)") + " * " + t + ";\n";
  s += "  if (m0 >= M) return;\n";
  s += std::string("  for (int64_t n0 = ") + (rows ? "0" : "(pid % tiles_n) * " + t) +
       "; n0 < N; n0 += " + (rows ? t : "N") + ") {\n";
  s += "    float acc[4][4];\n";
  if (gated) s += "    float acc2[4][4];\n";
  s += "    for (int i = 0; i < 4; ++i)\n      for (int j = 0; j < 4; ++j) {\n        acc[i][j] = 0.0f;\n";
  if (gated) s += "        acc2[i][j] = 0.0f;\n";
  s += "      }\n";
  s += "    for (int64_t k0 = 0; k0 < K; k0 += " + tk + ") {\n";
  const std::string aidx = plan.a_trans ? "gk * M + gm" : "gm * K + gk";
  s += "      for (int e = tid; e < " + std::to_string(kGemmTile * kGemmK) + "; e += " + std::to_string(kGemmThreads) +
       ") {\n";
  s += "        const int r = e / " + tk + ", kk = e % " + tk + ";\n";
  s += "        const int64_t gm = m0 + r, gk = k0 + kk;\n        float v = 0.0f;\n";
  s += "        if (gm < M && gk < K) {\n          v = " + ld("A", aidx) + ";\n";
  s += codegen::render_unary_chain(d, plan.prologue, "v", "", "          ");
  s += "        }\n        As[kk][r] = v;\n      }\n";
  const std::string bidx = plan.b_trans ? "gn * K + gk" : "gk * N + gn";
  s += "      for (int e = tid; e < " + std::to_string(kGemmTile * kGemmK) + "; e += " + std::to_string(kGemmThreads) +
       ") {\n";
  s += "        const int kk = e / " + t + ", c = e % " + t + ";\n";
  s += "        const int64_t gk = k0 + kk, gn = n0 + c;\n        const bool in = gk < K && gn < N;\n";
  s += "        Bs[kk][c] = in ? " + ld("B", bidx) + " : 0.0f;\n";
  if (gated) s += "        Bs2[kk][c] = in ? " + ld("B2", bidx) + " : 0.0f;\n";
  s += "      }\n      __syncthreads();\n";
  s += "      #pragma unroll\n      for (int kk = 0; kk < " + tk + "; ++kk) {\n";
  s += "        float a[4], b[4];\n";
  if (gated) s += "        float b2[4];\n";
  s += "        for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];\n";
  s += "        for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];\n";
  if (gated) s += "        for (int j = 0; j < 4; ++j) b2[j] = Bs2[kk][tx * 4 + j];\n";
  s += "        for (int i = 0; i < 4; ++i)\n          for (int j = 0; j < 4; ++j) {\n";
  s += "            acc[i][j] += a[i] * b[j];\n";
  if (gated) s += "            acc2[i][j] += a[i] * b2[j];\n";
  s += "          }\n      }\n      __syncthreads();\n    }\n";
  s += "    for (int i = 0; i < 4; ++i)\n      for (int j = 0; j < 4; ++j) {\n";
  s += "        const int64_t gm = m0 + ty * 4 + i, gn = n0 + tx * 4 + j;\n";
  s += "        if (gm >= M || gn >= N) continue;\n        float v = acc[i][j];\n";
  if (gated) s += "        float u = acc2[i][j];\n";
  s += codegen::render_gemm_epilogue(d, plan.gate, plan.epilogue, has_bias ? ld("bias", "gn") : "",
                                     plan.residual ? ld("res", "gm * N + gn") : "", "        ");
  s += "        out[gm * N + gn] = v;\n      }\n  }\n";
  if (rows) {
    // Every row of this block is complete in `out`: normalise it, one warp per row.
    s += "  __syncthreads();\n";
    s += "  const int warp = tid / 32, lane = tid % 32;\n";
    s += "  for (int r = warp; r < " + t + "; r += " + std::to_string(kGemmThreads / 32) + ") {\n";
    s += "    const int64_t gm = m0 + r;\n    if (gm >= M) break;\n";
    s += "    float* __restrict__ row = out + gm * N;\n";
    s += parallel_row_norm(*plan.reduction, "row", "N", float_literal(plan.eps), "lane", "32", false, "    ");
    s += "  }\n";
  }
  return s;
}

// ---- attention: one warp per query row ------------------------------------------------

constexpr int kAttnWarps = 8;

std::string attention_body(const AttentionRegion& r, DType dtype) {
  const auto& d = cuda_dialect();
  const std::string T = storage_type(dtype);
  auto ld = [&](const std::string& p, const std::string& i) { return load_expr(dtype, p, i); };
  std::string s;
  s += "  const " + T + "* __restrict__ Q = (const " + T + "*)operands[0];\n";
  s += "  const " + T + "* __restrict__ Kt = (const " + T + "*)operands[1];\n";
  s += "  const " + T + "* __restrict__ V = (const " + T + "*)operands[2];\n";
  s += "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n";
  s += "  const int64_t i = (int64_t)blockIdx.x * " + std::to_string(kAttnWarps) + " + warp;\n";
  s += "  if (i >= M) return;\n";
  s += "  const int64_t bh = blockIdx.y, b = bh / heads, h = bh % heads;\n";
  s += "  const int64_t kvh = b * kv_heads + h / (heads / kv_heads);\n";
  s += "  const " + T + "* __restrict__ qb = Q + bh * M * D;\n";
  s += "  const " + T + "* __restrict__ kb = Kt + kvh * Nk * D;\n";
  s += "  const " + T + "* __restrict__ vb = V + kvh * Nk * Dv;\n";
  s += "  float* __restrict__ o = out + (bh * M + i) * Dv;\n";
  s += "  const float scale = " + float_literal(r.scale()) + ";\n";
  // Top-left causal alignment: query i sees keys 0..i.
  s += std::string("  const int64_t n_end = ") + (r.causal() ? "(i + 1 < Nk ? i + 1 : Nk)" : "Nk") + ";\n";
  s += "  if (n_end <= 0) {\n    for (int64_t c = lane; c < Dv; c += 32) o[c] = 0.0f;\n    return;\n  }\n";
  const std::string qidx = r.q_transposed() ? "c * M + i" : "i * D + c";
  const std::string kidx = r.k_transposed() ? "c * Nk + n" : "n * D + c";
  // The same statements twice give bit-identical scores in both passes.
  const std::string score =
      "      float dot = 0.0f;\n      for (int64_t c = lane; c < D; c += 32) dot += " + ld("qb", qidx) + " * " +
      ld("kb", kidx) + ";\n      const float sc = scale * fusor_warp_sum(dot);\n";
  s += "  float mx = -INFINITY;\n  for (int64_t n = 0; n < n_end; ++n) {\n" + score;
  s += "    mx = sc > mx ? sc : mx;\n  }\n";
  s += "  for (int64_t c0 = 0; c0 < Dv; c0 += 128) {\n";
  s += "    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n    float l = 0.0f;\n";
  s += "    for (int64_t n = 0; n < n_end; ++n) {\n" + score;
  s += "      const float dd = sc - mx;\n";
  s += "      const float p = " + codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dd") + ";\n";
  s += "      l += p;\n";
  s += "      for (int u = 0; u < 4; ++u) {\n        const int64_t c = c0 + u * 32 + lane;\n";
  s += "        if (c < Dv) acc[u] += p * " + ld("vb", "n * Dv + c") + ";\n      }\n    }\n";
  s += "    const float rf = " + codegen::render_row_norm_factor(d, RowNorm::softmax, "l", "(float)n_end", "0.0f") +
       ";\n";
  s += "    for (int u = 0; u < 4; ++u) {\n      const int64_t c = c0 + u * 32 + lane;\n";
  s += "      if (c < Dv) o[c] = acc[u] * rf;\n    }\n  }\n";
  return s;
}

// ---- pointwise kinds ----------------------------------------------------------------------

std::string pointwise_helpers() {
  return "/* 0: contiguous, 1: one element for all, 2: general strides */\n"
         "static __device__ int fusor_bcast_mode(int64_t rank, const int64_t* shape, const int64_t* st) {\n"
         "  int contiguous = 1, scalar = 1;\n  int64_t stride = 1;\n"
         "  for (int64_t d = rank - 1; d >= 0; --d) {\n"
         "    if (shape[d] != 1 && st[d] != stride) contiguous = 0;\n"
         "    if (shape[d] != 1 && st[d] != 0) scalar = 0;\n    stride *= shape[d];\n  }\n"
         "  return contiguous ? 0 : (scalar ? 1 : 2);\n}\n"
         "static __device__ __forceinline__ int64_t fusor_bcast_index(int64_t i, int64_t rank, const int64_t* shape, "
         "const int64_t* st) {\n"
         "  int64_t idx = 0;\n"
         "  for (int64_t d = rank - 1; d >= 0; --d) { idx += (i % shape[d]) * st[d]; i /= shape[d]; }\n"
         "  return idx;\n}\n\n";
}

std::string pointwise_setup(size_t n_inputs, const std::string& dims_base) {
  std::string s;
  s += "  const int64_t rank = dims[" + dims_base + "];\n";
  s += "  const int64_t* shape = dims + " + dims_base + " + 1;\n";
  for (size_t i = 0; i < n_inputs; ++i) {
    const std::string n = std::to_string(i);
    s += "  const float* __restrict__ x" + n + " = (const float*)operands[" + n + "];\n";
    s += "  const int64_t* st" + n + " = shape + rank * " + std::to_string(i + 1) + ";\n";
    s += "  const int mode" + n + " = fusor_bcast_mode(rank, shape, st" + n + ");\n";
  }
  return s;
}

std::string load_broadcast(int i, const std::string& index) {
  const std::string n = std::to_string(i);
  return "x" + n + "[mode" + n + " == 0 ? " + index + " : (mode" + n + " == 1 ? 0 : fusor_bcast_index(" + index +
         ", rank, shape, st" + n + "))]";
}

std::string pointwise_body(const PointwiseGraphRegion& r) {
  std::string s = pointwise_setup(r.graph().input_names().size(), "1");
  s += "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * "
       "blockDim.x) {\n";
  s += codegen::render_dag(
      cuda_dialect(), r.graph(), [](int in) { return load_broadcast(in, "i"); }, "v", "    ");
  s += "    out[i] = v;\n  }\n";
  return s;
}

constexpr int kReduceWarps = 8;

std::string pointwise_reduce_body(const PointwiseReduceRegion& r) {
  const auto& d = cuda_dialect();
  std::string s = pointwise_setup(r.graph().input_names().size(), "2");
  s += "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n";
  s += "  for (int64_t row = (int64_t)blockIdx.x * " + std::to_string(kReduceWarps) +
       " + warp; row < rows; row += (int64_t)gridDim.x * " + std::to_string(kReduceWarps) + ") {\n";
  s += "    float acc = " + codegen::render_reduce_init(d, r.reduce()) + ";\n";
  s += "    for (int64_t j = lane; j < row_len; j += 32) {\n      const int64_t i = row * row_len + j;\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_broadcast(in, "i"); }, "v", "      ");
  s += "      acc = " + codegen::render_reduce_combine(d, r.reduce(), "acc", "v") + ";\n    }\n";
  s += "    for (int o_ = 16; o_ > 0; o_ >>= 1) {\n";
  s += "      const float w = __shfl_xor_sync(0xffffffffu, acc, o_);\n";
  s += "      acc = " + codegen::render_reduce_combine(d, r.reduce(), "acc", "w") + ";\n    }\n";
  s += "    if (lane == 0) out[row] = " + codegen::render_reduce_finish(d, r.reduce(), "acc", "(float)row_len") + ";\n";
  s += "  }\n";
  return s;
}

constexpr int kNormThreads = 512;

// One block per row; the row makes three passes through `out` (x [+ res], statistics,
// normalise [* gamma] [+ beta]), the later two from L2. Each thread revisits only the
// elements it wrote, so no barrier is needed between passes.
std::string norm_chain_body(const NormChainRegion& r) {
  const auto& d = cuda_dialect();
  const RowNormInfo& info = row_norm_info(r.norm());
  std::string s;
  int next = 0;
  s += "  const float* __restrict__ x = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.add_residual())
    s += "  const float* __restrict__ res = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.weight()) s += "  const float* __restrict__ gamma = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.bias()) s += "  const float* __restrict__ beta = (const float*)operands[" + std::to_string(next++) + "];\n";
  s += "  __shared__ float red_[32];\n";
  s += "  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {\n";
  s += "    float* __restrict__ o = out + row * row_len;\n";
  s += "    const int64_t base = row * row_len;\n";
  const std::string loop = "    for (int64_t j = threadIdx.x; j < row_len; j += blockDim.x)";
  // Pass 1: the input row, its sum for a mean centre, its max for a max centre.
  // A zero centre makes d = x: its statistics accumulate in the first pass already.
  const bool fold = info.centre == RowCentre::zero;
  s += "    float p_ = " + std::string(info.centre == RowCentre::max ? "-INFINITY" : "0.0f") + ";\n";
  s += "    float s_ = 0.0f;\n";
  s += loop + " {\n      float v = x[base + j];\n";
  if (r.add_residual()) {
    s += "      const float rv = res[base + j];\n";
    s += "      v = " + codegen::render_op(d, Op::add, "v", "rv") + ";\n";
  }
  s += "      o[j] = v;\n";
  if (info.centre == RowCentre::mean) s += "      p_ += v;\n";
  if (info.centre == RowCentre::max) s += "      p_ = v > p_ ? v : p_;\n";
  if (fold)
    s += "      const float d_ = v;\n      s_ += " + codegen::render_row_norm_accumulate(d, r.norm(), "d_") + ";\n";
  s += "    }\n";
  if (info.centre == RowCentre::mean)
    s += "    const float c_ = fusor_block_sum(p_, red_) / (float)row_len;\n";
  else if (info.centre == RowCentre::max)
    s += "    const float c_ = fusor_block_max(p_, red_);\n";
  else
    s += "    const float c_ = 0.0f;\n    (void)p_;\n";
  if (!fold)
    s += loop + " {\n      const float d_ = o[j] - c_;\n      s_ += " +
         codegen::render_row_norm_accumulate(d, r.norm(), "d_") + ";\n    }\n";
  s += "    s_ = fusor_block_sum(s_, red_);\n";
  s += "    const float r_ = " +
       codegen::render_row_norm_factor(d, r.norm(), "s_", "(float)row_len", float_literal(r.eps())) + ";\n";
  s += loop + " {\n      const float d_ = o[j] - c_;\n";
  s += "      float v = " + codegen::render_row_norm_output(d, r.norm(), "d_", "r_") + ";\n";
  if (r.weight()) s += "      const float g = gamma[j];\n      v = " + codegen::render_op(d, Op::mul, "v", "g") + ";\n";
  if (r.bias()) s += "      const float bb = beta[j];\n      v = " + codegen::render_op(d, Op::add, "v", "bb") + ";\n";
  s += "      o[j] = v;\n    }\n  }\n";
  return s;
}

} // namespace

Expected<KernelSource> emit_simt(const Region& region, const EmitOptions& options) {
  const RegionKind kind = region_kind(region);
  for (const auto& [key, value] : options.options)
    return unsupported(kind, kSimtLane,
                       "unknown option '" + key + "=" + value + "' (the cuda_simt emitter takes none)");
  const DType dtype = region_storage(region);
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    return unsupported(kind, kSimtLane,
                       "storage " + std::string(dtype_name(dtype)) + " is not supported (f32, f16, bf16 are)");
  const std::string key = codegen::shape_key(kind, options.spec, options.dims);

  LaunchSpec launch;
  std::string body, helpers;
  if (const auto* f = std::get_if<FusedRegion>(&region)) {
    launch = {LaunchSpec::Rule::gemm, kGemmThreads, kGemmTile, f->reduction() ? 0 : kGemmTile, 0};
    body = gemm_body({f->a_layout() == Layout::col_major, f->b_layout() == Layout::col_major, f->prologue(),
                      f->epilogue(), f->residual(), f->reduction(), f->eps(), std::nullopt},
                     dtype);
  } else if (const auto* m = std::get_if<MatmulRegion>(&region)) {
    launch = {LaunchSpec::Rule::gemm, kGemmThreads, kGemmTile, kGemmTile, 0};
    body = gemm_body({m->transpose_a(), m->transpose_b(), {}, {}, false, std::nullopt, 0.0, std::nullopt}, dtype);
  } else if (const auto* g = std::get_if<GatedMatmulRegion>(&region)) {
    launch = {LaunchSpec::Rule::gemm, kGemmThreads, kGemmTile, kGemmTile, 0};
    body = gemm_body({false, false, {}, {}, false, std::nullopt, 0.0, g->gate_act()}, dtype);
  } else if (const auto* a = std::get_if<AttentionRegion>(&region)) {
    launch = {LaunchSpec::Rule::attention, kAttnWarps * 32, kAttnWarps, 0, 0};
    body = attention_body(*a, dtype);
  } else if (const auto* p = std::get_if<PointwiseGraphRegion>(&region)) {
    launch = {LaunchSpec::Rule::elementwise, 256, 1, 0, 0};
    helpers = pointwise_helpers();
    body = pointwise_body(*p);
  } else if (const auto* pr = std::get_if<PointwiseReduceRegion>(&region)) {
    launch = {LaunchSpec::Rule::rows, kReduceWarps * 32, kReduceWarps, 0, 0};
    helpers = pointwise_helpers();
    body = pointwise_reduce_body(*pr);
  } else if (const auto* n = std::get_if<NormChainRegion>(&region)) {
    launch = {LaunchSpec::Rule::rows, kNormThreads, 1, 0, 0};
    body = norm_chain_body(*n);
  }
  FUSOR_TRY_ASSIGN(const std::string open, entry_open(region, options, launch.threads, kSimtLane));
  std::string source = kernel_header(region, kSimtLane, key, launch) + helpers + open + body + "}\n";
  return make_source(region, options, std::move(source), std::string(kSimtLane), key);
}

} // namespace fusor::cuda
