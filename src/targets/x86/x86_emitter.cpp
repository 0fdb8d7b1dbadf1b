// Emits portable C99 + OpenMP for every region kind. Vectorisation comes from the host
// compiler (-O3 -march=native) on loops written to be vectorisable: packed f32 B panels,
// row blocks sharing each B load, epilogues applied to cache-resident tiles before the
// single store. Later lanes (AVX-512 micro-kernels) replace the GEMM core, not this ABI.
#include "targets/x86/x86_emitter.hpp"

#include "targets/x86/x86_broadcast.hpp"

#include "codegen/abi.hpp"
#include "codegen/c_renderer.hpp"
#include "fusor/region_text.hpp"

namespace fusor::x86 {
namespace {

// Loops in C99 for the host compiler to vectorise: the op table's transcendental functions
// render as the branch-free helpers of render_vector_math_helpers, which inline into the
// vector loop where libm's expf/tanhf stay scalar calls (the sigmoid/tanh DAG: 361 ms with
// libm on an AVX2 host, copy bandwidth 11 ms).
const codegen::CDialect& lane_dialect() { return codegen::c99_simd_dialect(); }
using codegen::float_literal;

constexpr int kRowBlock = 4;   // output rows sharing each packed-B load
constexpr int kColBlock = 256; // output columns per cache-resident accumulator tile

Error unsupported(RegionKind kind, const std::string& reason) {
  return make_error(ErrorCode::emit_unsupported,
                    "region " + std::string(region_kind_name(kind)) + ", target x86: " + reason);
}

// C type and load expression for an operand stored in `dtype`.
struct StorageLoad {
  std::string type;
  std::string wrap_open, wrap_close;
  std::string load(const std::string& ptr, const std::string& idx) const {
    return wrap_open + ptr + "[" + idx + "]" + wrap_close;
  }
};

Expected<StorageLoad> storage_load(DType dtype, RegionKind kind) {
  switch (dtype) {
  case DType::f32: return StorageLoad{"float", "", ""};
  case DType::f16: return StorageLoad{"uint16_t", "fusor_f16(", ")"};
  case DType::bf16: return StorageLoad{"uint16_t", "fusor_bf16(", ")"};
  case DType::fp8_e4m3:
  case DType::fp8_e5m2: break;
  }
  return unsupported(kind, "storage " + std::string(dtype_name(dtype)) +
                               " is not supported by the x86 lane (f32, f16, bf16 are)");
}

// The kernel's opening: comment, includes, helpers and the dims prologue per policy.
struct Prologue {
  std::string head; // before the entry function
  std::string dims; // first statements of the entry function
};

Expected<Prologue> make_prologue(const Region& region, const EmitOptions& options, const std::string& shape_key) {
  const RegionKind kind = region_kind(region);
  Prologue p;
  p.head = "/* fusor kernel | region: " + print_region(region) + " | lane: " + std::string(lane_tag()) +
           " | spec: " + shape_key + " */\n";
  p.head += "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n";
  p.head += codegen::render_storage_helpers(lane_dialect());
  p.head += codegen::render_vector_math_helpers(lane_dialect()) + "\n";
  const auto names = codegen::abi_dim_names(kind);
  std::vector<std::int64_t> values;
  if (options.spec != SpecPolicy::dynamic) {
    if (!options.dims)
      return unsupported(kind, "spec " + std::string(spec_policy_name(options.spec)) + " needs dims (--dims)");
    values = codegen::abi_dim_values(kind, *options.dims);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name(names[i]), arg = "dims[" + std::to_string(i) + "]";
    if (options.spec == SpecPolicy::static_dims) {
      // Baked in so the compiler specialises loops; the runner's dims must match.
      p.dims += "  const int64_t " + name + " = " + std::to_string(values[i]) + "LL;\n";
      p.dims += "  if (" + arg + " != " + name + ") return 1;\n";
    } else {
      p.dims += "  const int64_t " + name + " = " + arg + ";\n";
      if (options.spec == SpecPolicy::bucket)
        p.dims += "  if (" + name + " > " + std::to_string(dim_bucket(values[i])) + ") return 1;\n";
    }
  }
  return p;
}

std::string entry_signature() {
  return "int fusor_kernel(const void* const* operands, float* restrict out, const int64_t* dims)";
}

// ---- GEMM-rooted kinds --------------------------------------------------------------------

struct GemmPlan {
  bool a_trans = false, b_trans = false; // raw operand stored transposed (col_major)
  std::vector<Op> prologue, epilogue;
  bool residual = false;
  std::optional<RowNorm> reduction;
  double eps = 0.0;
  std::optional<Op> gate; // gated: out = gate(A@Wg) * (A@Wu)
};

std::string emit_gemm_body(const GemmPlan& plan, const StorageLoad& ld) {
  const auto& d = lane_dialect();
  const std::string T = ld.type;
  const bool gated = plan.gate.has_value();
  std::string s;
  s += "  const " + T + "* restrict A = (const " + T + "*)operands[0];\n";
  s += "  const " + T + "* restrict B = (const " + T + "*)operands[1];\n";
  int next = 2;
  if (gated) s += "  const " + T + "* restrict B2 = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  const bool has_bias = std::find(plan.epilogue.begin(), plan.epilogue.end(), Op::bias) != plan.epilogue.end();
  if (has_bias) s += "  const " + T + "* restrict bias = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  if (plan.residual)
    s += "  const " + T + "* restrict res = (const " + T + "*)operands[" + std::to_string(next++) + "];\n";
  s += "  if (M == 0 || N == 0) return 0;\n";
  // Pack B (and Wu) once as f32 row-major [K][N]: converts storage and layout so the
  // inner loop is a unit-stride, vectorisable AXPY.
  const int panels = gated ? 2 : 1;
  s += "  float* restrict bp = (float*)malloc(sizeof(float) * (size_t)(K > 0 ? K : 1) * (size_t)N * " +
       std::to_string(panels) + ");\n  if (!bp) return 2;\n";
  const std::string bidx = plan.b_trans ? "n * K + k" : "k * N + n";
  s += "  #pragma omp parallel for schedule(static)\n";
  s += "  for (int64_t k = 0; k < K; ++k)\n    for (int64_t n = 0; n < N; ++n) {\n";
  s += "      bp[k * N + n] = " + ld.load("B", bidx) + ";\n";
  if (gated) s += "      bp[K * N + k * N + n] = " + ld.load("B2", bidx) + ";\n";
  s += "    }\n";
  s += "  int failed = 0;\n";
  s += "  #pragma omp parallel\n  {\n";
  s += "    float* restrict ap = (float*)malloc(sizeof(float) * " + std::to_string(kRowBlock) +
       " * (size_t)(K > 0 ? K : 1));\n";
  s += "    float acc[" + std::to_string(kRowBlock) + "][" + std::to_string(kColBlock) + "];\n";
  if (gated) s += "    float acc2[" + std::to_string(kRowBlock) + "][" + std::to_string(kColBlock) + "];\n";
  s += "    if (!ap) {\n      #pragma omp atomic write\n      failed = 1;\n    }\n";
  s += "    #pragma omp for schedule(dynamic, 1)\n";
  s += "    for (int64_t i0 = 0; i0 < M; i0 += " + std::to_string(kRowBlock) + ") {\n";
  s += "      if (!ap) continue;\n";
  s += "      const int64_t rb = M - i0 < " + std::to_string(kRowBlock) + " ? M - i0 : " + std::to_string(kRowBlock) +
       ";\n";
  // A rows: storage → f32, layout, then the prologue, once per element.
  const std::string aidx = plan.a_trans ? "k * M + (i0 + r)" : "(i0 + r) * K + k";
  s += "      for (int64_t r = 0; r < rb; ++r)\n        for (int64_t k = 0; k < K; ++k) {\n";
  s += "          float v = " + ld.load("A", aidx) + ";\n";
  s += codegen::render_unary_chain(d, plan.prologue, "v", "", "          ");
  s += "          ap[r * K + k] = v;\n        }\n";
  s += "      for (int64_t j0 = 0; j0 < N; j0 += " + std::to_string(kColBlock) + ") {\n";
  s += "        const int64_t nb = N - j0 < " + std::to_string(kColBlock) + " ? N - j0 : " + std::to_string(kColBlock) +
       ";\n";
  s += "        for (int64_t r = 0; r < rb; ++r)\n          for (int64_t j = 0; j < nb; ++j) {\n";
  s += "            acc[r][j] = 0.0f;\n";
  if (gated) s += "            acc2[r][j] = 0.0f;\n";
  s += "          }\n";
  s += "        for (int64_t k = 0; k < K; ++k) {\n";
  s += "          const float* restrict brow = bp + k * N + j0;\n";
  if (gated) s += "          const float* restrict brow2 = bp + K * N + k * N + j0;\n";
  s += "          for (int64_t r = 0; r < rb; ++r) {\n";
  s += "            const float av = ap[r * K + k];\n";
  s += "            for (int64_t j = 0; j < nb; ++j) acc[r][j] += av * brow[j];\n";
  if (gated) s += "            for (int64_t j = 0; j < nb; ++j) acc2[r][j] += av * brow2[j];\n";
  s += "          }\n        }\n";
  // Epilogue on the cache-resident tile, then the single store.
  s += "        for (int64_t r = 0; r < rb; ++r)\n          for (int64_t j = 0; j < nb; ++j) {\n";
  s += "            float v = acc[r][j];\n";
  if (gated) s += "            float u = acc2[r][j];\n";
  s += codegen::render_gemm_epilogue(d, plan.gate, plan.epilogue, has_bias ? ld.load("bias", "j0 + j") : "",
                                     plan.residual ? ld.load("res", "(i0 + r) * N + j0 + j") : "", "            ");
  s += "            out[(i0 + r) * N + j0 + j] = v;\n          }\n";
  s += "      }\n";
  if (plan.reduction) {
    s += "      for (int64_t r = 0; r < rb; ++r) {\n        float* restrict row = out + (i0 + r) * N;\n";
    s += codegen::render_row_norm(d, *plan.reduction, "row", "N", float_literal(plan.eps), "        ");
    s += "      }\n";
  }
  s += "    }\n    free(ap);\n  }\n  free(bp);\n  return failed ? 2 : 0;\n";
  return s;
}

// ---- attention ----------------------------------------------------------------------------

std::string emit_attention_body(const AttentionRegion& r, const StorageLoad& ld) {
  const auto& d = lane_dialect();
  const std::string T = ld.type;
  std::string s;
  s += "  const " + T + "* restrict Q = (const " + T + "*)operands[0];\n";
  s += "  const " + T + "* restrict Kt = (const " + T + "*)operands[1];\n";
  s += "  const " + T + "* restrict V = (const " + T + "*)operands[2];\n";
  s += "  const int64_t group = heads / kv_heads;\n";
  s += "  const int64_t rows = batch * heads * M;\n";
  s += "  const float scale = " + float_literal(r.scale()) + ";\n";
  s += "  int failed = 0;\n";
  s += "  #pragma omp parallel\n  {\n";
  s += "    float* q = (float*)malloc(sizeof(float) * (size_t)(D > 0 ? D : 1));\n";
  s += "    float* sc = (float*)malloc(sizeof(float) * (size_t)(Nk > 0 ? Nk : 1));\n";
  s += "    float* acc = (float*)malloc(sizeof(float) * (size_t)(Dv > 0 ? Dv : 1));\n";
  s += "    if (!q || !sc || !acc) {\n      #pragma omp atomic write\n      failed = 1;\n    }\n";
  s += "    #pragma omp for schedule(dynamic, 8)\n";
  s += "    for (int64_t row = 0; row < rows; ++row) {\n";
  s += "      if (!q || !sc || !acc) continue;\n";
  s += "      const int64_t bh = row / M, i = row % M, b = bh / heads, h = bh % heads;\n";
  s += "      const int64_t kvh = b * kv_heads + h / group;\n";
  s += "      const " + T + "* restrict qb = Q + bh * M * D;\n";
  s += "      const " + T + "* restrict kb = Kt + kvh * Nk * D;\n";
  s += "      const " + T + "* restrict vb = V + kvh * Nk * Dv;\n";
  s += "      float* restrict o = out + row * Dv;\n";
  const std::string qidx = r.q_transposed() ? "c * M + i" : "i * D + c";
  const std::string kidx = r.k_transposed() ? "c * Nk + n" : "n * D + c";
  s += "      for (int64_t c = 0; c < D; ++c) q[c] = " + ld.load("qb", qidx) + ";\n";
  // Top-left causal alignment: query i sees keys 0..i.
  s += std::string("      const int64_t n_end = ") + (r.causal() ? "(i + 1 < Nk ? i + 1 : Nk)" : "Nk") + ";\n";
  s += "      for (int64_t c = 0; c < Dv; ++c) acc[c] = 0.0f;\n";
  s += "      if (n_end <= 0) { for (int64_t c = 0; c < Dv; ++c) o[c] = 0.0f; continue; }\n";
  s += "      float mx = -INFINITY;\n";
  s += "      for (int64_t n = 0; n < n_end; ++n) {\n        float dot = 0.0f;\n";
  s += "        #pragma omp simd reduction(+:dot)\n";
  s += "        for (int64_t c = 0; c < D; ++c) dot += q[c] * " + ld.load("kb", kidx) + ";\n";
  s += "        sc[n] = scale * dot;\n        mx = sc[n] > mx ? sc[n] : mx;\n      }\n";
  // Softmax from the op table's steps: accumulate e^(s - max), factor 1/Σ.
  s += "      float l = 0.0f;\n";
  s += "      for (int64_t n = 0; n < n_end; ++n) {\n        const float dd = sc[n] - mx;\n";
  s += "        const float p = " + codegen::render_row_norm_accumulate(d, RowNorm::softmax, "dd") + ";\n";
  s += "        l += p;\n";
  s += "        for (int64_t c = 0; c < Dv; ++c) acc[c] += p * " + ld.load("vb", "n * Dv + c") + ";\n      }\n";
  s += "      const float rf = " + codegen::render_row_norm_factor(d, RowNorm::softmax, "l", "(float)n_end", "0.0f") +
       ";\n";
  s += "      for (int64_t c = 0; c < Dv; ++c) o[c] = acc[c] * rf;\n";
  s += "    }\n    free(q);\n    free(sc);\n    free(acc);\n  }\n  return failed ? 2 : 0;\n";
  return s;
}

// ---- pointwise kinds ----------------------------------------------------------------------

// Pointwise inputs read their element through strides from the ABI (x86_broadcast.hpp).
std::string pointwise_helpers() { return broadcast_helpers() + "\n"; }

std::string emit_pointwise_body(const PointwiseGraphRegion& r) {
  std::string s = pointwise_setup(r.graph().input_names().size(), "1");
  // Unit-stride inputs get a loop the compiler vectorises; the index arithmetic of broadcast
  // inputs (a call with a loop) keeps the general one scalar.
  s += "  if (contiguous) {\n";
  s += "    #pragma omp parallel for simd schedule(static)\n";
  s += "    for (int64_t i = 0; i < total; ++i) {\n";
  s += codegen::render_dag(
      lane_dialect(), r.graph(), [](int in) { return "x" + std::to_string(in) + "[i]"; }, "v", "      ");
  s += "      out[i] = v;\n    }\n    return 0;\n  }\n";
  s += "  #pragma omp parallel for schedule(static)\n";
  s += "  for (int64_t i = 0; i < total; ++i) {\n";
  s += codegen::render_dag(
      lane_dialect(), r.graph(), [](int in) { return load_broadcast(in, "i"); }, "v", "    ");
  s += "    out[i] = v;\n  }\n  return 0;\n";
  return s;
}

std::string emit_pointwise_reduce_body(const PointwiseReduceRegion& r) {
  const auto& d = lane_dialect();
  std::string s = pointwise_setup(r.graph().input_names().size(), "2");
  s += "  #pragma omp parallel for schedule(static)\n";
  s += "  for (int64_t row = 0; row < rows; ++row) {\n";
  s += "    float acc = " + codegen::render_reduce_init(d, r.reduce()) + ";\n";
  s += "    for (int64_t j = 0; j < row_len; ++j) {\n";
  s += "      const int64_t i = row * row_len + j;\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_broadcast(in, "i"); }, "v", "      ");
  s += "      acc = " + codegen::render_reduce_combine(d, r.reduce(), "acc", "v") + ";\n    }\n";
  s += "    out[row] = " + codegen::render_reduce_finish(d, r.reduce(), "acc", "(float)row_len") + ";\n";
  s += "  }\n  return 0;\n";
  return s;
}

std::string emit_norm_chain_body(const NormChainRegion& r) {
  const auto& d = lane_dialect();
  std::string s;
  s += norm_chain_operand_decls(r);
  s += "  #pragma omp parallel for schedule(static)\n";
  s += "  for (int64_t row = 0; row < rows; ++row) {\n";
  s += "    float* restrict o = out + row * row_len;\n";
  s += "    for (int64_t j = 0; j < row_len; ++j) {\n      float v = x[row * row_len + j];\n";
  if (r.add_residual()) {
    s += "      const float rv = res[row * row_len + j];\n";
    s += "      v = " + codegen::render_op(d, Op::add, "v", "rv") + ";\n";
  }
  s += "      o[j] = v;\n    }\n";
  s += codegen::render_row_norm(d, r.norm(), "o", "row_len", float_literal(r.eps()), "    ");
  if (r.weight() || r.bias()) {
    s += "    for (int64_t j = 0; j < row_len; ++j) {\n      float v = o[j];\n";
    if (r.weight())
      s += "      const float g = gamma[j];\n      v = " + codegen::render_op(d, Op::mul, "v", "g") + ";\n";
    if (r.bias())
      s += "      const float bb = beta[j];\n      v = " + codegen::render_op(d, Op::add, "v", "bb") + ";\n";
    s += "      o[j] = v;\n    }\n";
  }
  s += "  }\n  return 0;\n";
  return s;
}

} // namespace

std::string_view lane_tag() { return kGenericLane; }

Expected<KernelSource> emit(const Region& region, const EmitOptions& options) {
  const RegionKind kind = region_kind(region);
  for (const auto& [key, value] : options.options)
    return unsupported(kind, "unknown option '" + key + "=" + value + "' (the x86 emitter takes none)");
  FUSOR_TRY_ASSIGN(const StorageLoad ld, storage_load(region_storage(region), kind));
  const std::string key = codegen::shape_key(kind, options.spec, options.dims);
  FUSOR_TRY_ASSIGN(const Prologue pro, make_prologue(region, options, key));

  std::string body;
  if (const auto* f = std::get_if<FusedRegion>(&region)) {
    body = emit_gemm_body({f->a_layout() == Layout::col_major, f->b_layout() == Layout::col_major, f->prologue(),
                           f->epilogue(), f->residual(), f->reduction(), f->eps(), std::nullopt},
                          ld);
  } else if (const auto* m = std::get_if<MatmulRegion>(&region)) {
    body = emit_gemm_body({m->transpose_a(), m->transpose_b(), {}, {}, false, std::nullopt, 0.0, std::nullopt}, ld);
  } else if (const auto* g = std::get_if<GatedMatmulRegion>(&region)) {
    body = emit_gemm_body({false, false, {}, {}, false, std::nullopt, 0.0, g->gate_act()}, ld);
  } else if (const auto* a = std::get_if<AttentionRegion>(&region)) {
    body = emit_attention_body(*a, ld);
  } else if (const auto* p = std::get_if<PointwiseGraphRegion>(&region)) {
    body = emit_pointwise_body(*p);
  } else if (const auto* pr = std::get_if<PointwiseReduceRegion>(&region)) {
    body = emit_pointwise_reduce_body(*pr);
  } else if (const auto* n = std::get_if<NormChainRegion>(&region)) {
    body = emit_norm_chain_body(*n);
  }
  const bool pointwise_kind = kind == RegionKind::pointwise || kind == RegionKind::pointwise_reduce;
  return codegen::kernel_source(region, options,
                                pro.head + (pointwise_kind ? pointwise_helpers() : "") + entry_signature() + " {\n" +
                                    pro.dims + body + "}\n",
                                "c", "x86", std::string(lane_tag()), key);
}

std::string norm_chain_operand_decls(const NormChainRegion& r) {
  std::string s;
  int next = 0;
  s += "  const float* restrict x = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.add_residual()) s += "  const float* restrict res = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.weight()) s += "  const float* restrict gamma = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.bias()) s += "  const float* restrict beta = (const float*)operands[" + std::to_string(next++) + "];\n";
  return s;
}

} // namespace fusor::x86
