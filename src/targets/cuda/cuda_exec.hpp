// Running one loaded CUDA kernel on one prepared call: explicit device allocations (never
// managed memory), every driver call checked, the kernel's status word and the launch's
// own error read after each launch, guard words around the output to catch writes past it.
// Shared by the in-process runner, the sandbox child and the GPU benchmark.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusor/sandbox.hpp"
#include "targets/cuda/cublaslt_lane.hpp"
#include "targets/cuda/cuda_driver.hpp"
#include "targets/cuda/cuda_launch.hpp"

namespace fusor::cuda {

// The CUDA kernel ABI (docs/gpu.md): every pointer is device memory.
//   extern "C" __global__ void fusor_kernel(const void* const* operands, float* out,
//                                           const int64_t* dims, int* status);
// `status` starts 0; a kernel sets it to a FUSOR_KERNEL_* code (1: dims outside a static
// or bucket specialisation, 3: dims the lane does not handle) instead of computing.
inline constexpr int kKernelUnsupportedDims = 3;

class LoadedKernel {
public:
  // Loads a cubin image (the bytes of the cached artifact) and finds `entry`; for the
  // library rule the image is a cuBLASLt plan, and loading opens cuBLASLt and allocates
  // the library's workspace.
  static Expected<std::shared_ptr<LoadedKernel>> load(const Driver& d, const std::string& image,
                                                      const std::string& entry, const LaunchSpec& spec);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  CUfunction function() const { return fn_; }
  const LaunchSpec& spec() const { return spec_; }
  // A library kernel's plan, library and workspace (nullptr / 0 for a cubin).
  const CublasPlan* plan() const { return plan_ ? &*plan_ : nullptr; }
  const CublasLt* cublaslt() const { return lt_; }
  CUdeviceptr workspace() const { return workspace_; }
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

private:
  LoadedKernel(const Driver& d, CUmodule m, CUfunction f, LaunchSpec s) : d_(d), module_(m), fn_(f), spec_(s) {}
  const Driver& d_;
  CUmodule module_;
  CUfunction fn_;
  LaunchSpec spec_;
  std::optional<CublasPlan> plan_;
  const CublasLt* lt_ = nullptr;
  CUdeviceptr workspace_ = 0;
};

struct CallResult {
  enum class Kind { ok, kernel_error, fault, out_of_bounds_write };
  Kind kind = Kind::ok;
  int status = 0;     // the kernel's status word, for kernel_error
  std::string detail; // the driver's error, or which guard was overwritten
  std::vector<float> output;
  double ms = 0; // median kernel time when timing was asked for, else one launch
};

struct CallOptions {
  bool check_operands = false; // copy operands back and report a kernel that wrote into one
  int warmup = 0;              // extra launches before timing
  int reps = 1;                // timed launches (median reported)
};

// Uploads the call, launches, downloads. A faulting kernel is a result (Kind::fault): the
// context is then unusable and the caller must not launch again in this process. Errors
// are reserved for driver failures outside the kernel (allocation, copies, launch config).
Expected<CallResult> run_call(const Driver& d, const LoadedKernel& k, const KernelCall& call,
                              const CallOptions& options = {});

} // namespace fusor::cuda
