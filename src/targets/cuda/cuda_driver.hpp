// The CUDA driver API, loaded at run time with dlopen (libcuda.so.1 exists only where an
// NVIDIA driver is installed), so a fusor built with the CUDA toolkit still runs, and
// reports E_RUNNER_UNAVAILABLE, on machines without a GPU.
#pragma once

#include <cuda.h>

#include <string>

#include "fusor/error.hpp"

namespace fusor::cuda {

// Entry points, by their versioned ABI names (cuda.h maps cuMemAlloc to cuMemAlloc_v2...).
struct DriverApi {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned int, size_t);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
};

struct Device {
  std::string name; // "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int driver_version = 0;   // e.g. 13000
  int max_smem_optin = 0;   // bytes of shared memory a block may opt into
  std::string arch() const; // "sm_90"
  std::string describe() const;
};

struct Driver {
  DriverApi api{};
  Device device;
  CUcontext context = nullptr;
  std::string library; // the libcuda path that was loaded
};

// Loads libcuda (FUSOR_LIBCUDA, else libcuda.so.1 on the loader path, else
// /usr/local/nvidia/lib64), initialises device 0's primary context once per process and
// makes it current on the calling thread. E_RUNNER_UNAVAILABLE with the reason otherwise.
Expected<const Driver*> driver();

// "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)".
std::string error_text(const Driver& d, CUresult rc);
// Ok, or E_INTERNAL naming the call and the driver's error.
Status check(const Driver& d, CUresult rc, const std::string& what);

// Errors after which the context is unusable: the kernel faulted.
bool is_sticky_fault(CUresult rc);

} // namespace fusor::cuda
