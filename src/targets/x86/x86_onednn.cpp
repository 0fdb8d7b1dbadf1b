#include "targets/x86/x86_onednn.hpp"

#include "codegen/abi.hpp"
#include "fusor/region_text.hpp"

namespace fusor::x86 {
namespace {

// Our epilogue op → oneDNN eltwise algorithm (alpha), where oneDNN's formula is ours.
std::optional<std::pair<std::string, std::string>> eltwise(Op op) {
  switch (op) {
  // Not relu: oneDNN's relu maps NaN to 0 where SPEC §2 keeps NaN (the oracle's special
  // probes caught it), so relu epilogues decline.
  case Op::gelu: return std::pair{"dnnl_eltwise_gelu_tanh", "0.0f"}; // tanh saturates before our ±30 clamp
  case Op::gelu_erf: return std::pair{"dnnl_eltwise_gelu_erf", "0.0f"};
  case Op::sigmoid: return std::pair{"dnnl_eltwise_logistic", "0.0f"};
  case Op::tanh: return std::pair{"dnnl_eltwise_tanh", "0.0f"};
  case Op::silu: return std::pair{"dnnl_eltwise_swish", "1.0f"}; // x·sigmoid(alpha·x)
  default: return std::nullopt;
  }
}

} // namespace

std::optional<std::string> onednn_declines(const Region& region) {
  const auto* f = std::get_if<FusedRegion>(&region);
  if (!f) return "oneDNN lane covers fused regions only";
  if (f->storage() != DType::f32) return "oneDNN lane runs f32 storage only";
  if (!f->prologue().empty()) return "oneDNN matmul has no prologue on A";
  if (f->reduction()) return "oneDNN matmul post-ops have no row reduction";
  for (size_t i = 0; i < f->epilogue().size(); ++i) {
    const Op op = f->epilogue()[i];
    if (op == Op::bias && i != 0) return "oneDNN adds bias before every post-op; this epilogue applies an op first";
    if (op == Op::relu) return "oneDNN's relu turns NaN into 0; SPEC keeps NaN";
    if (op != Op::bias && !eltwise(op)) return "no exact oneDNN eltwise for " + std::string(op_info(op).name);
  }
  return std::nullopt;
}

Expected<KernelSource> emit_onednn(const Region& region, const EmitOptions& options) {
  if (auto why = onednn_declines(region))
    return make_error(ErrorCode::emit_unsupported,
                      "region " + std::string(region_kind_name(region_kind(region))) + ", target x86: " + *why);
  if (options.spec != SpecPolicy::dynamic || !options.options.empty())
    return make_error(ErrorCode::emit_unsupported, "region fused, target x86: the oneDNN lane takes dynamic dims "
                                                   "and no options");
  const auto& f = std::get<FusedRegion>(region);
  const bool bias = f.has_bias();
  const bool col_a = f.a_layout() == Layout::col_major, col_b = f.b_layout() == Layout::col_major;
  std::string post_ops;
  for (Op op : f.epilogue())
    if (op != Op::bias) {
      const auto e = *eltwise(op);
      post_ops += "    ok = ok && dnnl_post_ops_append_eltwise(po, 1.0f, " + e.first + ", " + e.second +
                  ", 0.0f) == dnnl_success;\n";
    }
  const int residual_index = static_cast<int>(f.epilogue().size()) - (bias ? 1 : 0);
  if (f.residual())
    post_ops += "    ok = ok && dnnl_post_ops_append_binary(po, dnnl_binary_add, &c_md) == dnnl_success;\n";

  std::string s = "/* fusor kernel | region: " + print_region(region) + " | lane: " + std::string(kOneDnnLane) +
                  " | spec: " + codegen::shape_key(RegionKind::fused, SpecPolicy::dynamic, std::nullopt) + " */\n";
  s += R"(#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>

/* Primitives per process, one per dims seen (the oldest of FUSOR_PRIMS is rebuilt for a
   new shape): creating one costs far more than a call, and one model calls the same kernel
   at several shapes (a transformer's projections and its MLP). */
#define FUSOR_PRIMS 8
typedef struct {
  int64_t dims[3];
  dnnl_primitive_t prim;
  dnnl_memory_t mem[5];
} fusor_prim;
static pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine_;
static dnnl_stream_t stream_;
static fusor_prim prims_[FUSOR_PRIMS];
static int next_;

static int build(fusor_prim* p, int64_t M, int64_t N, int64_t K) {
  if (!engine_ && (dnnl_engine_create(&engine_, dnnl_cpu, 0) != dnnl_success ||
                   dnnl_stream_create(&stream_, engine_, dnnl_stream_default_flags) != dnnl_success))
    return 0;
  if (p->prim) { dnnl_primitive_destroy(p->prim); p->prim = 0; }
  for (int i = 0; i < 5; ++i) if (p->mem[i]) { dnnl_memory_destroy(p->mem[i]); p->mem[i] = 0; }
  p->dims[0] = p->dims[1] = p->dims[2] = -1;
  dnnl_memory_desc_t a_md, b_md, bias_md, c_md;
  dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, bias_dims = {1, N}, c_dims = {M, N};
)";
  s += std::string("  dnnl_dims_t a_strides = ") + (col_a ? "{1, M}" : "{K, 1}") +
       ", b_strides = " + (col_b ? "{1, K}" : "{N, 1}") + ", bias_strides = {N, 1}, c_strides = {N, 1};\n";
  s += R"(  int ok = dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_f32, a_strides) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_f32, b_strides) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&bias_md, 2, bias_dims, dnnl_f32, bias_strides) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides) == dnnl_success;
  dnnl_matmul_desc_t desc;
)";
  s += std::string("  ok = ok && dnnl_matmul_desc_init(&desc, &a_md, &b_md, ") + (bias ? "&bias_md" : "NULL") +
       ", &c_md) == dnnl_success;\n";
  s += R"(  dnnl_post_ops_t po = 0;
  dnnl_primitive_attr_t attr = 0;
  dnnl_primitive_desc_t pd = 0;
  ok = ok && dnnl_post_ops_create(&po) == dnnl_success;
  if (ok) {
)" + post_ops +
       R"(  }
  ok = ok && dnnl_primitive_attr_create(&attr) == dnnl_success &&
       dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
       dnnl_primitive_desc_create(&pd, &desc, attr, engine_, NULL) == dnnl_success &&
       dnnl_primitive_create(&p->prim, pd) == dnnl_success;
  ok = ok && dnnl_memory_create(&p->mem[0], &a_md, engine_, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&p->mem[1], &b_md, engine_, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&p->mem[2], &bias_md, engine_, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&p->mem[3], &c_md, engine_, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&p->mem[4], &c_md, engine_, DNNL_MEMORY_NONE) == dnnl_success;
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (po) dnnl_post_ops_destroy(po);
  if (ok) { p->dims[0] = M; p->dims[1] = N; p->dims[2] = K; }
  return ok;
}

int fusor_kernel(const void* const* operands, float* out, const int64_t* dims) {
  const int64_t M = dims[0], N = dims[1], K = dims[2];
  if (M == 0 || N == 0) return 0;
  if (K == 0) return 2; /* oneDNN rejects empty contractions; the arbiter then uses another lane */
  pthread_mutex_lock(&lock_);
  fusor_prim* p = 0;
  for (int i = 0; i < FUSOR_PRIMS && !p; ++i)
    if (prims_[i].prim && prims_[i].dims[0] == M && prims_[i].dims[1] == N && prims_[i].dims[2] == K) p = &prims_[i];
  int ok = p != 0;
  if (!p) {
    p = &prims_[next_];
    next_ = (next_ + 1) % FUSOR_PRIMS;
    ok = build(p, M, N, K);
  }
  if (ok) {
    dnnl_memory_set_data_handle(p->mem[0], (void*)operands[0]);
    dnnl_memory_set_data_handle(p->mem[1], (void*)operands[1]);
    dnnl_memory_set_data_handle(p->mem[3], out);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, p->mem[0]}, {DNNL_ARG_WEIGHTS, p->mem[1]}, {DNNL_ARG_DST, p->mem[3]}};
    int n = 3;
)";
  if (bias)
    s += "    dnnl_memory_set_data_handle(p->mem[2], (void*)operands[2]);\n    args[n].arg = DNNL_ARG_BIAS; "
         "args[n++].memory = p->mem[2];\n";
  if (f.residual())
    s += "    dnnl_memory_set_data_handle(p->mem[4], (void*)operands[" + std::to_string(bias ? 3 : 2) +
         "]);\n    args[n].arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(" + std::to_string(residual_index) +
         ") | DNNL_ARG_SRC_1; args[n++].memory = p->mem[4];\n";
  s +=
      R"(    ok = dnnl_primitive_execute(p->prim, stream_, n, args) == dnnl_success && dnnl_stream_wait(stream_) == dnnl_success;
  }
  pthread_mutex_unlock(&lock_);
  return ok ? 0 : 2;
}
)";
  // One dynamic f32 kernel serves every shape (oneDNN picks its own implementation).
  KernelSource src = codegen::kernel_source(region, EmitOptions{}, std::move(s), "c", "x86", std::string(kOneDnnLane),
                                            codegen::shape_key(RegionKind::fused, SpecPolicy::dynamic, std::nullopt));
  src.link_libs = {"dnnl"};
#ifdef FUSOR_HAVE_DNNL // where the build found oneDNN, which need not be where the compiler looks
  src.include_dirs = {FUSOR_DNNL_INCLUDE_DIR};
  src.library_dirs = {FUSOR_DNNL_LIBRARY_DIR};
#endif
  src.dtype = DType::f32;
  return src;
}

} // namespace fusor::x86
