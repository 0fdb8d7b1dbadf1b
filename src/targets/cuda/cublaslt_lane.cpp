#include "targets/cuda/cublaslt_lane.hpp"

#include <algorithm>
#include <cstring>

#include "codegen/abi.hpp"
#include "fusor/region_text.hpp"
#include "targets/cuda/cuda_launch.hpp"
#include "targets/cuda/cuda_source.hpp"

namespace fusor::cuda {
namespace {

constexpr std::string_view kPlanPrefix = "plan ";

std::string_view act_name(CublasPlan::Act a) {
  switch (a) {
  case CublasPlan::Act::none: return "none";
  case CublasPlan::Act::relu: return "relu";
  case CublasPlan::Act::gelu: return "gelu";
  }
  return "?";
}

cudaDataType_t data_type(DType d) {
  switch (d) {
  case DType::f16: return CUDA_R_16F;
  case DType::bf16: return CUDA_R_16BF;
  default: return CUDA_R_32F;
  }
}

cublasLtEpilogue_t epilogue_of(const CublasPlan& p) {
  switch (p.act) {
  case CublasPlan::Act::relu: return p.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  case CublasPlan::Act::gelu: return p.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  case CublasPlan::Act::none: break;
  }
  return p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

Error plan_error(const std::string& why) { return make_error(ErrorCode::internal, "cuBLASLt plan: " + why); }

} // namespace

std::optional<std::string> cublaslt_declines(const Region& region) {
  const auto* f = std::get_if<FusedRegion>(&region);
  if (!f) return "cuBLASLt lane covers fused regions only";
  const DType s = f->storage();
  if (s != DType::f32 && s != DType::f16 && s != DType::bf16)
    return "cuBLASLt lane takes f32, f16 or bf16 storage, not " + std::string(dtype_name(s));
  if (!f->prologue().empty()) return "cuBLASLt has no prologue on A";
  if (f->reduction()) return "cuBLASLt epilogues have no row reduction";
  int acts = 0;
  for (size_t i = 0; i < f->epilogue().size(); ++i) {
    const Op op = f->epilogue()[i];
    if (op == Op::bias) {
      if (i != 0) return "cuBLASLt adds the bias before its activation; this epilogue applies an op first";
      continue;
    }
    if (op == Op::gelu_erf) return "cuBLASLt's GELU epilogue is the tanh approximation; gelu_erf would be approximated";
    if (op != Op::relu && op != Op::gelu)
      return "cuBLASLt has no epilogue for " + std::string(op_info(op).name) + " (BIAS, RELU and GELU exist)";
    if (++acts > 1) return "cuBLASLt applies one activation; this epilogue has several";
  }
  // D = act(A·B + C + bias): the library adds C before its activation, the region adds
  // the residual after it.
  if (f->residual() && acts > 0) return "cuBLASLt adds C before its activation; the region adds the residual after";
  return std::nullopt;
}

std::string CublasPlan::text() const {
  return std::string(kPlanPrefix) + "storage=" + std::string(dtype_name(storage)) +
         " a=" + (a_col_major ? "col" : "row") + " b=" + (b_col_major ? "col" : "row") + " bias=" + (bias ? "1" : "0") +
         " act=" + std::string(act_name(act)) + " residual=" + (residual ? "1" : "0");
}

Expected<CublasPlan> parse_plan(std::string_view source) {
  size_t at = source.find("\n" + std::string(kPlanPrefix));
  if (at == std::string_view::npos) return plan_error("no plan line");
  std::string_view line = source.substr(at + 1 + kPlanPrefix.size());
  line = line.substr(0, line.find('\n'));
  CublasPlan p;
  int seen = 0;
  while (!line.empty()) {
    const size_t sp = line.find(' ');
    const std::string_view word = line.substr(0, sp);
    line = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
    if (word.empty()) continue;
    const size_t eq = word.find('=');
    if (eq == std::string_view::npos) return plan_error("'" + std::string(word) + "' is not key=value");
    const std::string_view key = word.substr(0, eq), v = word.substr(eq + 1);
    ++seen;
    if (key == "storage") {
      auto d = dtype_from_name(v);
      if (!d) return plan_error("unknown storage '" + std::string(v) + "'");
      p.storage = *d;
    } else if (key == "a" || key == "b") {
      if (v != "row" && v != "col") return plan_error("layout must be row or col: " + std::string(word));
      (key == "a" ? p.a_col_major : p.b_col_major) = v == "col";
    } else if (key == "bias" || key == "residual") {
      if (v != "0" && v != "1") return plan_error("flag must be 0 or 1: " + std::string(word));
      (key == "bias" ? p.bias : p.residual) = v == "1";
    } else if (key == "act") {
      bool known = false;
      for (auto a : {CublasPlan::Act::none, CublasPlan::Act::relu, CublasPlan::Act::gelu})
        if (v == act_name(a)) p.act = a, known = true;
      if (!known) return plan_error("unknown act '" + std::string(v) + "'");
    } else {
      return plan_error("unknown key '" + std::string(key) + "'");
    }
  }
  if (seen != 6) return plan_error("expected 6 fields, found " + std::to_string(seen));
  return p;
}

Expected<KernelSource> emit_cublaslt(const Region& region, const EmitOptions& options) {
  const RegionKind kind = region_kind(region);
  if (auto why = cublaslt_declines(region)) return unsupported(kind, kCublasLtLane, *why);
  if (!options.options.empty())
    return unsupported(kind, kCublasLtLane,
                       "unknown option '" + options.options.begin()->first + "' (the cuBLASLt lane has none)");
  const auto& f = std::get<FusedRegion>(region);
  CublasPlan p;
  p.storage = f.storage();
  p.a_col_major = f.a_layout() == Layout::col_major;
  p.b_col_major = f.b_layout() == Layout::col_major;
  p.bias = f.has_bias();
  p.residual = f.residual();
  for (Op op : f.epilogue())
    if (op == Op::relu || op == Op::gelu) p.act = op == Op::relu ? CublasPlan::Act::relu : CublasPlan::Act::gelu;
  const std::string key = codegen::shape_key(kind, options.spec, options.dims);
  // The row-major problem runs as its column-major transpose: D^T[N x M] = B^T · A^T, so
  // the per-column bias of the region is cuBLASLt's per-row bias of D^T.
  std::string source = "// fusor kernel: " + print_region(region) + " | lane " + std::string(kCublasLtLane) + " | " +
                       key + "\n" + launch_line(LaunchSpec{LaunchSpec::Rule::library, 1, 1, 0, 0}) +
                       "\n// cublasLtMatmul, compute f32, D^T[N x M] = epilogue(op(B) . op(A) (+ C = residual^T))\n" +
                       p.text() + "\n";
  KernelSource src = make_source(region, options, std::move(source), std::string(kCublasLtLane), key);
  src.lang = "cublaslt";
  src.entry = "cublasLtMatmul";
  return src;
}

std::vector<ByteBuffer> plan_operands(const CublasPlan& plan, std::span<const ByteBuffer> operand_bytes) {
  std::vector<ByteBuffer> out(operand_bytes.begin(), operand_bytes.end());
  if (plan.storage != DType::f16 && plan.storage != DType::bf16) return out;
  for (size_t i = 2; i < out.size(); ++i) { // A and B stay in storage; bias / residual widen
    const ByteBuffer& in = operand_bytes[i];
    ByteBuffer wide(in.size() * 2);
    for (size_t e = 0; e < in.size() / 2; ++e) {
      std::uint16_t bits = 0;
      std::memcpy(&bits, in.data() + 2 * e, 2);
      const float v = plan.storage == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
      std::memcpy(wide.data() + 4 * e, &v, 4);
    }
    out[i] = std::move(wide);
  }
  return out;
}

Expected<PlanCall> PlanCall::make(const CublasLt& lt, const CublasPlan& plan, std::int64_t M, std::int64_t N,
                                  std::int64_t K, size_t workspace_bytes) {
  const auto& api = lt.api;
  PlanCall c(lt, plan);
  auto ok = [&](cublasStatus_t rc, const char* what) -> Status {
    if (rc == CUBLAS_STATUS_SUCCESS) return {};
    return make_error(ErrorCode::internal, std::string(what) + ": " + cublas_status_text(lt, rc));
  };
  FUSOR_TRY(ok(api.desc_create(&c.desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate"));
  const cublasOperation_t ta = plan.b_col_major ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLAS's A is our B
  const cublasOperation_t tb = plan.a_col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = epilogue_of(plan);
  FUSOR_TRY(ok(api.desc_set(c.desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA"));
  FUSOR_TRY(ok(api.desc_set(c.desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB"));
  FUSOR_TRY(ok(api.desc_set(c.desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "set EPILOGUE"));
  const cudaDataType_t in = data_type(plan.storage);
  const auto m = static_cast<uint64_t>(N), n = static_cast<uint64_t>(M), k = static_cast<uint64_t>(K);
  FUSOR_TRY(ok(plan.b_col_major ? api.layout_create(&c.x_, in, k, m, static_cast<int64_t>(k))
                                : api.layout_create(&c.x_, in, m, k, static_cast<int64_t>(m)),
               "cublasLtMatrixLayoutCreate(B)"));
  FUSOR_TRY(ok(plan.a_col_major ? api.layout_create(&c.y_, in, n, k, static_cast<int64_t>(n))
                                : api.layout_create(&c.y_, in, k, n, static_cast<int64_t>(k)),
               "cublasLtMatrixLayoutCreate(A)"));
  FUSOR_TRY(ok(api.layout_create(&c.d_, CUDA_R_32F, m, n, static_cast<int64_t>(m)), "cublasLtMatrixLayoutCreate(D)"));
  // The heuristic depends on the bias pointer's alignment; cuMemAlloc gives 256 bytes.
  const void* aligned = reinterpret_cast<const void*>(std::uintptr_t{256});
  if (plan.bias)
    FUSOR_TRY(ok(api.desc_set(c.desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &aligned, sizeof aligned), "set BIAS"));
  cublasLtMatmulPreference_t pref = nullptr;
  FUSOR_TRY(ok(api.pref_create(&pref), "cublasLtMatmulPreferenceCreate"));
  struct PrefGuard {
    const CublasLtApi& api;
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { api.pref_destroy(p); }
  } guard{api, pref};
  FUSOR_TRY(ok(api.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes),
               "set MAX_WORKSPACE_BYTES"));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  FUSOR_TRY(ok(api.heuristic(lt.handle, c.desc_, c.x_, c.y_, c.d_, c.d_, pref, 1, &result, &found),
               "cublasLtMatmulAlgoGetHeuristic"));
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    return make_error(ErrorCode::runner_unavailable, "lane cuda_cublaslt: no cuBLASLt algorithm for " + plan.text() +
                                                         " at M=" + std::to_string(M) + ", N=" + std::to_string(N) +
                                                         ", K=" + std::to_string(K));
  c.algo_ = result.algo;
  c.workspace_ = result.workspaceSize;
  return c;
}

PlanCall::PlanCall(PlanCall&& o) noexcept
    : lt_(o.lt_), plan_(o.plan_), desc_(std::exchange(o.desc_, nullptr)), x_(std::exchange(o.x_, nullptr)),
      y_(std::exchange(o.y_, nullptr)), d_(std::exchange(o.d_, nullptr)), algo_(o.algo_), workspace_(o.workspace_) {}

PlanCall::~PlanCall() {
  if (desc_) lt_->api.desc_destroy(desc_);
  for (auto l : {x_, y_, d_})
    if (l) lt_->api.layout_destroy(l);
}

cublasStatus_t PlanCall::launch(std::span<const CUdeviceptr> operands, CUdeviceptr out, CUdeviceptr workspace) const {
  auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); };
  size_t next = 2;
  if (plan_.bias) {
    const void* bias = ptr(operands[next++]);
    if (cublasStatus_t rc = lt_->api.desc_set(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        rc != CUBLAS_STATUS_SUCCESS)
      return rc;
  }
  const float alpha = 1.0f, beta = plan_.residual ? 1.0f : 0.0f;
  const void* c = plan_.residual ? ptr(operands[next]) : ptr(out);
  return lt_->api.matmul(lt_->handle, desc_, &alpha, ptr(operands[1]), x_, ptr(operands[0]), y_, &beta, c, d_, ptr(out),
                         d_, &algo_, ptr(workspace), workspace_, nullptr);
}

} // namespace fusor::cuda
