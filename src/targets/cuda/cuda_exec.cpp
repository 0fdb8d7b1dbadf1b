#include "targets/cuda/cuda_exec.hpp"

#include <algorithm>
#include <cstring>

namespace fusor::cuda {
namespace {

// Words around the output: a write past either end changes them.
constexpr std::uint32_t kGuardBits = 0x7fb0a4d1;
constexpr size_t kGuardWords = 4096; // 16 KiB each side

// An owned device allocation.
class DeviceBuffer {
public:
  DeviceBuffer(const Driver& d) : d_(&d) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept : d_(o.d_), ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  DeviceBuffer(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) d_->api.cuMemFree(ptr_); // nothing useful to do with a failure here
  }
  Status alloc(size_t bytes, const std::string& what) {
    bytes_ = std::max<size_t>(bytes, 4);
    return check(*d_, d_->api.cuMemAlloc(&ptr_, bytes_),
                 "cuMemAlloc(" + std::to_string(bytes_) + " bytes, " + what + ")");
  }
  CUdeviceptr ptr() const { return ptr_; }

private:
  const Driver* d_;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

class Event {
public:
  explicit Event(const Driver& d) : d_(d) {}
  ~Event() {
    if (e_) d_.api.cuEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Status create() { return check(d_, d_.api.cuEventCreate(&e_, CU_EVENT_DEFAULT), "cuEventCreate"); }
  CUevent get() const { return e_; }

private:
  const Driver& d_;
  CUevent e_ = nullptr;
};

} // namespace

Expected<std::shared_ptr<LoadedKernel>> LoadedKernel::load(const Driver& d, const std::string& image,
                                                           const std::string& entry, const LaunchSpec& spec) {
  if (spec.rule == LaunchSpec::Rule::library) {
    FUSOR_TRY_ASSIGN(CublasPlan plan, parse_plan(image));
    FUSOR_TRY_ASSIGN(const CublasLt* lt, cuda::cublaslt());
    std::shared_ptr<LoadedKernel> k(new LoadedKernel(d, nullptr, nullptr, spec));
    k->plan_ = plan;
    k->lt_ = lt;
    FUSOR_TRY(check(d, d.api.cuMemAlloc(&k->workspace_, kWorkspaceBytes), "cuMemAlloc(cuBLASLt workspace)"));
    return k;
  }
  CUmodule m = nullptr;
  FUSOR_TRY(check(d, d.api.cuModuleLoadData(&m, image.data()), "cuModuleLoadData"));
  CUfunction f = nullptr;
  if (Status s = check(d, d.api.cuModuleGetFunction(&f, m, entry.c_str()), "cuModuleGetFunction(" + entry + ")"); !s) {
    d.api.cuModuleUnload(m);
    return s.error();
  }
  if (spec.smem > 48 * 1024) {
    if (spec.smem > d.device.max_smem_optin) {
      d.api.cuModuleUnload(m);
      return make_error(ErrorCode::runner_unavailable, "target cuda: kernel '" + entry + "' needs " +
                                                           std::to_string(spec.smem) + " bytes of shared memory; " +
                                                           d.device.name + " allows " +
                                                           std::to_string(d.device.max_smem_optin));
    }
    if (Status s = check(d, d.api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, spec.smem),
                         "cuFuncSetAttribute(max dynamic shared memory)");
        !s) {
      d.api.cuModuleUnload(m);
      return s.error();
    }
  }
  return std::shared_ptr<LoadedKernel>(new LoadedKernel(d, m, f, spec));
}

LoadedKernel::~LoadedKernel() {
  if (module_) d_.api.cuModuleUnload(module_);
  if (workspace_) d_.api.cuMemFree(workspace_);
}

Expected<CallResult> run_call(const Driver& d, const LoadedKernel& k, const KernelCall& call,
                              const CallOptions& options) {
  const auto& api = d.api;
  FUSOR_TRY_ASSIGN(const Geometry g, geometry(k.spec(), call.dims));
  CallResult result;
  const auto out_elems = static_cast<size_t>(call.output_elems);

  // A library kernel takes some operands widened (plan_operands); a cubin takes them as packed.
  std::vector<ByteBuffer> widened;
  if (k.plan()) widened = plan_operands(*k.plan(), call.operands);
  const std::vector<ByteBuffer>& host_operands = k.plan() ? widened : call.operands;
  std::vector<DeviceBuffer> operands;
  std::vector<CUdeviceptr> operand_ptrs;
  operands.reserve(host_operands.size());
  for (size_t i = 0; i < host_operands.size(); ++i) {
    operands.emplace_back(d);
    FUSOR_TRY(operands.back().alloc(host_operands[i].size(), "operand " + std::to_string(i)));
    if (!host_operands[i].empty())
      FUSOR_TRY(check(d, api.cuMemcpyHtoD(operands.back().ptr(), host_operands[i].data(), host_operands[i].size()),
                      "cuMemcpyHtoD(operand " + std::to_string(i) + ")"));
    operand_ptrs.push_back(operands.back().ptr());
  }
  DeviceBuffer table(d), dims(d), status(d), out(d);
  FUSOR_TRY(table.alloc(operand_ptrs.size() * sizeof(CUdeviceptr), "operand table"));
  if (!operand_ptrs.empty())
    FUSOR_TRY(check(d, api.cuMemcpyHtoD(table.ptr(), operand_ptrs.data(), operand_ptrs.size() * sizeof(CUdeviceptr)),
                    "cuMemcpyHtoD(operand table)"));
  FUSOR_TRY(dims.alloc(call.dims.size() * sizeof(std::int64_t), "dims"));
  if (!call.dims.empty())
    FUSOR_TRY(check(d, api.cuMemcpyHtoD(dims.ptr(), call.dims.data(), call.dims.size() * sizeof(std::int64_t)),
                    "cuMemcpyHtoD(dims)"));
  FUSOR_TRY(status.alloc(sizeof(int), "status word"));
  FUSOR_TRY(check(d, api.cuMemsetD32(status.ptr(), 0, 1), "cuMemsetD32(status word)"));
  const size_t total_words = out_elems + 2 * kGuardWords;
  FUSOR_TRY(out.alloc(total_words * sizeof(float), "output"));
  FUSOR_TRY(check(d, api.cuMemsetD32(out.ptr(), kGuardBits, total_words), "cuMemsetD32(output guards)"));
  const CUdeviceptr out_ptr = out.ptr() + kGuardWords * sizeof(float);
  if (out_elems)
    FUSOR_TRY(check(d, api.cuMemsetD32(out_ptr, sandbox_wire::kUnwrittenBits, out_elems), "cuMemsetD32(output)"));

  CUdeviceptr table_ptr = table.ptr(), dims_ptr = dims.ptr(), status_ptr = status.ptr(), o = out_ptr;
  void* params[] = {&table_ptr, &o, &dims_ptr, &status_ptr};
  std::optional<PlanCall> plan_call;
  std::string library_failure; // the library's own status when a library call failed
  if (k.plan() && !g.empty) {
    FUSOR_TRY_ASSIGN(PlanCall pc, PlanCall::make(*k.cublaslt(), *k.plan(), call.dims.at(0), call.dims.at(1),
                                                 call.dims.at(2), LoadedKernel::kWorkspaceBytes));
    plan_call.emplace(std::move(pc));
  }
  // A faulting kernel poisons the context: every later call returns the same sticky error.
  auto launch_failed = [&](CUresult rc, const char* what) -> Expected<CallResult> {
    if (!library_failure.empty()) {
      result.kind = CallResult::Kind::kernel_error;
      result.status = -1;
      result.detail = library_failure;
      return result;
    }
    if (is_sticky_fault(rc)) {
      result.kind = CallResult::Kind::fault;
      result.detail = std::string(what) + ": " + error_text(d, rc);
      return result;
    }
    return check(d, rc, what).error();
  };
  auto launch = [&]() -> CUresult {
    if (plan_call) {
      const cublasStatus_t st = plan_call->launch(operand_ptrs, o, k.workspace());
      if (st == CUBLAS_STATUS_SUCCESS) return CUDA_SUCCESS;
      library_failure = "cublasLtMatmul: " + cublas_status_text(*k.cublaslt(), st);
      return CUDA_ERROR_UNKNOWN;
    }
    return api.cuLaunchKernel(k.function(), g.grid_x, g.grid_y, g.grid_z, g.block, 1, 1, g.smem, nullptr, params,
                              nullptr);
  };
  if (!g.empty) {
    Event start(d), stop(d);
    FUSOR_TRY(start.create());
    FUSOR_TRY(stop.create());
    for (int i = 0; i < options.warmup; ++i)
      if (CUresult rc = launch(); rc != CUDA_SUCCESS) return launch_failed(rc, "cuLaunchKernel");
    std::vector<double> times;
    for (int i = 0; i < std::max(options.reps, 1); ++i) {
      if (CUresult rc = api.cuEventRecord(start.get(), nullptr); rc != CUDA_SUCCESS)
        return launch_failed(rc, "cuEventRecord");
      if (CUresult rc = launch(); rc != CUDA_SUCCESS) return launch_failed(rc, "cuLaunchKernel");
      if (CUresult rc = api.cuEventRecord(stop.get(), nullptr); rc != CUDA_SUCCESS)
        return launch_failed(rc, "cuEventRecord");
      // The launch's own (asynchronous) error surfaces here.
      if (CUresult rc = api.cuEventSynchronize(stop.get()); rc != CUDA_SUCCESS)
        return launch_failed(rc, "kernel execution");
      float ms = 0;
      FUSOR_TRY(check(d, api.cuEventElapsedTime(&ms, start.get(), stop.get()), "cuEventElapsedTime"));
      times.push_back(ms);
    }
    if (CUresult rc = api.cuCtxSynchronize(); rc != CUDA_SUCCESS) return launch_failed(rc, "cuCtxSynchronize");
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    result.ms = times[times.size() / 2];
  }

  int word = 0;
  FUSOR_TRY(check(d, api.cuMemcpyDtoH(&word, status.ptr(), sizeof word), "cuMemcpyDtoH(status word)"));
  std::vector<std::uint32_t> all(total_words);
  FUSOR_TRY(check(d, api.cuMemcpyDtoH(all.data(), out.ptr(), total_words * sizeof(float)), "cuMemcpyDtoH(output)"));
  if (word != 0) {
    result.kind = CallResult::Kind::kernel_error;
    result.status = word;
    result.detail = "kernel status " + std::to_string(word);
    return result;
  }
  for (size_t i = 0; i < total_words; ++i) {
    const bool guard = i < kGuardWords || i >= kGuardWords + out_elems;
    if (guard && all[i] != kGuardBits) {
      const auto offset = static_cast<std::int64_t>(i) - static_cast<std::int64_t>(kGuardWords);
      result.kind = CallResult::Kind::out_of_bounds_write;
      result.detail =
          "out-of-bounds write to the output: element " + std::to_string(offset) + " of " + std::to_string(out_elems);
      return result;
    }
  }
  if (options.check_operands) {
    for (size_t i = 0; i < host_operands.size(); ++i) {
      ByteBuffer back(host_operands[i].size());
      if (!back.empty())
        FUSOR_TRY(check(d, api.cuMemcpyDtoH(back.data(), operands[i].ptr(), back.size()),
                        "cuMemcpyDtoH(operand " + std::to_string(i) + ")"));
      if (back != host_operands[i]) {
        result.kind = CallResult::Kind::out_of_bounds_write;
        result.detail = "the kernel wrote into operand " + std::to_string(i);
        return result;
      }
    }
  }
  result.output.resize(out_elems);
  std::memcpy(result.output.data(), all.data() + kGuardWords, out_elems * sizeof(float));
  return result;
}

} // namespace fusor::cuda
