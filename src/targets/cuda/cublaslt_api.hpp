// cuBLASLt, loaded at run time with dlopen like the driver: a fusor built with the CUDA
// toolkit starts on machines without cuBLASLt (or without a GPU) and its vendor lane then
// reports E_RUNNER_UNAVAILABLE instead of the process failing to load.
#pragma once

#include <cublasLt.h>

#include <string>

#include "fusor/error.hpp"

namespace fusor::cuda {

struct CublasLtApi {
  cublasStatus_t (*create)(cublasLtHandle_t*);
  size_t (*get_version)();
  const char* (*status_string)(cublasStatus_t);
  cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
  cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*, size_t);
  cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t*, cudaDataType, uint64_t, uint64_t, int64_t);
  cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
  cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t*);
  cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*, size_t);
  cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                              cublasLtMatmulHeuristicResult_t*, int*);
  cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t,
                           const void*, cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t, void*,
                           cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t);
};

struct CublasLt {
  CublasLtApi api{};
  cublasLtHandle_t handle = nullptr;
  std::string library; // the path that was loaded
  size_t version = 0;  // cublasLtGetVersion(), e.g. 130100
};

// Loads libcublasLt (FUSOR_LIBCUBLASLT, else the soname on the loader path, else the
// toolkit's library directory fusor was built against) and creates one handle per process.
// Needs the driver's context current (cuda::driver() first). E_RUNNER_UNAVAILABLE naming
// what was tried otherwise.
Expected<const CublasLt*> cublaslt();

// The cuBLASLt version this fusor was compiled against ("13.1.0"); part of plan cache keys.
std::string cublaslt_header_version();

// "CUBLAS_STATUS_NOT_SUPPORTED".
std::string cublas_status_text(const CublasLt& lt, cublasStatus_t status);

} // namespace fusor::cuda
