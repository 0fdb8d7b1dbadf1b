#include "targets/cuda/cuda_driver.hpp"

#include "targets/cuda/dynamic_library.hpp"

#include <cstdlib>
#include <mutex>
#include <optional>
#include <vector>

namespace fusor::cuda {
namespace {

Error unavailable(const std::string& why) { return make_error(ErrorCode::runner_unavailable, "target cuda: " + why); }

struct Loaded {
  Driver driver;
  std::optional<Error> error;
};

Loaded load() {
  Loaded out;
  const OpenedLibrary opened =
      open_first_library("FUSOR_LIBCUDA", {"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
                                           "/usr/lib/x86_64-linux-gnu/libcuda.so.1"});
  void* lib = opened.handle;
  if (!lib) {
    out.error = unavailable("no NVIDIA driver (libcuda.so.1) could be loaded; tried:" + opened.tried);
    return out;
  }
  out.driver.library = opened.path;
  DriverApi& a = out.driver.api;
  std::string missing;
  bind_symbol(lib, a.cuInit, "cuInit", missing);
  bind_symbol(lib, a.cuDriverGetVersion, "cuDriverGetVersion", missing);
  bind_symbol(lib, a.cuDeviceGetCount, "cuDeviceGetCount", missing);
  bind_symbol(lib, a.cuDeviceGet, "cuDeviceGet", missing);
  bind_symbol(lib, a.cuDeviceGetName, "cuDeviceGetName", missing);
  bind_symbol(lib, a.cuDeviceGetAttribute, "cuDeviceGetAttribute", missing);
  bind_symbol(lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", missing);
  bind_symbol(lib, a.cuCtxSetCurrent, "cuCtxSetCurrent", missing);
  bind_symbol(lib, a.cuCtxSynchronize, "cuCtxSynchronize", missing);
  bind_symbol(lib, a.cuMemAlloc, "cuMemAlloc_v2", missing);
  bind_symbol(lib, a.cuMemFree, "cuMemFree_v2", missing);
  bind_symbol(lib, a.cuMemcpyHtoD, "cuMemcpyHtoD_v2", missing);
  bind_symbol(lib, a.cuMemcpyDtoH, "cuMemcpyDtoH_v2", missing);
  bind_symbol(lib, a.cuMemsetD32, "cuMemsetD32_v2", missing);
  bind_symbol(lib, a.cuModuleLoadData, "cuModuleLoadData", missing);
  bind_symbol(lib, a.cuModuleUnload, "cuModuleUnload", missing);
  bind_symbol(lib, a.cuModuleGetFunction, "cuModuleGetFunction", missing);
  bind_symbol(lib, a.cuFuncSetAttribute, "cuFuncSetAttribute", missing);
  bind_symbol(lib, a.cuLaunchKernel, "cuLaunchKernel", missing);
  bind_symbol(lib, a.cuEventCreate, "cuEventCreate", missing);
  bind_symbol(lib, a.cuEventDestroy, "cuEventDestroy_v2", missing);
  bind_symbol(lib, a.cuEventRecord, "cuEventRecord", missing);
  bind_symbol(lib, a.cuEventSynchronize, "cuEventSynchronize", missing);
  // cuda.h 13 names it cuEventElapsedTime_v2; older drivers export only the first form.
  if (!(a.cuEventElapsedTime = reinterpret_cast<decltype(a.cuEventElapsedTime)>(::dlsym(lib, "cuEventElapsedTime_v2"))))
    bind_symbol(lib, a.cuEventElapsedTime, "cuEventElapsedTime", missing);
  bind_symbol(lib, a.cuGetErrorName, "cuGetErrorName", missing);
  bind_symbol(lib, a.cuGetErrorString, "cuGetErrorString", missing);
  if (!missing.empty()) {
    out.error = unavailable(out.driver.library + " lacks driver entry points: " + missing);
    return out;
  }
  Driver& d = out.driver;
  auto fail = [&](CUresult rc, const char* what) {
    out.error = unavailable(std::string(what) + " failed: " + error_text(d, rc));
  };
  if (CUresult rc = a.cuInit(0); rc != CUDA_SUCCESS) {
    fail(rc, "cuInit");
    return out;
  }
  int count = 0;
  if (CUresult rc = a.cuDeviceGetCount(&count); rc != CUDA_SUCCESS) {
    fail(rc, "cuDeviceGetCount");
    return out;
  }
  if (count < 1) {
    out.error = unavailable("the NVIDIA driver reports no CUDA device");
    return out;
  }
  CUdevice dev = 0;
  char name[256] = {};
  if (CUresult rc = a.cuDeviceGet(&dev, 0); rc != CUDA_SUCCESS) return fail(rc, "cuDeviceGet"), out;
  if (CUresult rc = a.cuDeviceGetName(name, sizeof name - 1, dev); rc != CUDA_SUCCESS)
    return fail(rc, "cuDeviceGetName"), out;
  d.device.name = name;
  struct {
    CUdevice_attribute attr;
    int* slot;
  } attrs[] = {{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &d.device.cc_major},
               {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &d.device.cc_minor},
               {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &d.device.sm_count},
               {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &d.device.max_smem_optin}};
  for (auto& at : attrs)
    if (CUresult rc = a.cuDeviceGetAttribute(at.slot, at.attr, dev); rc != CUDA_SUCCESS)
      return fail(rc, "cuDeviceGetAttribute"), out;
  if (CUresult rc = a.cuDriverGetVersion(&d.device.driver_version); rc != CUDA_SUCCESS)
    return fail(rc, "cuDriverGetVersion"), out;
  if (CUresult rc = a.cuDevicePrimaryCtxRetain(&d.context, dev); rc != CUDA_SUCCESS)
    return fail(rc, "cuDevicePrimaryCtxRetain"), out;
  return out;
}

} // namespace

std::string Device::arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }

std::string Device::describe() const {
  return name + " (" + arch() + ", " + std::to_string(sm_count) + " SMs, driver CUDA " +
         std::to_string(driver_version / 1000) + "." + std::to_string(driver_version % 1000 / 10) + ")";
}

Expected<const Driver*> driver() {
  static const Loaded loaded = load();
  if (loaded.error) return *loaded.error;
  // The primary context must be current on every thread that issues driver calls.
  thread_local bool current = false;
  if (!current) {
    if (CUresult rc = loaded.driver.api.cuCtxSetCurrent(loaded.driver.context); rc != CUDA_SUCCESS)
      return unavailable("cuCtxSetCurrent failed: " + error_text(loaded.driver, rc));
    current = true;
  }
  return &loaded.driver;
}

std::string error_text(const Driver& d, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.api.cuGetErrorName) d.api.cuGetErrorName(rc, &name);
  if (d.api.cuGetErrorString) d.api.cuGetErrorString(rc, &text);
  std::string out = name ? name : "CUresult " + std::to_string(static_cast<int>(rc));
  if (text) out += std::string(" (") + text + ")";
  return out;
}

Status check(const Driver& d, CUresult rc, const std::string& what) {
  if (rc == CUDA_SUCCESS) return {};
  return make_error(ErrorCode::internal, "target cuda: " + what + " failed: " + error_text(d, rc));
}

bool is_sticky_fault(CUresult rc) {
  switch (rc) {
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_LAUNCH_TIMEOUT: return true;
  default: return false;
  }
}

} // namespace fusor::cuda
