#include "targets/cuda/cublaslt_api.hpp"

#include "targets/cuda/dynamic_library.hpp"

#include <mutex>
#include <optional>
#include <vector>

#ifndef FUSOR_CUDA_LIBDIR
#define FUSOR_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

namespace fusor::cuda {
namespace {

Error unavailable(const std::string& why) {
  return make_error(ErrorCode::runner_unavailable, "lane cuda_cublaslt: " + why);
}

struct Loaded {
  CublasLt lt;
  std::optional<Error> error;
};

Loaded load() {
  Loaded out;
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  const OpenedLibrary opened = open_first_library(
      "FUSOR_LIBCUBLASLT", {soname, std::string(FUSOR_CUDA_LIBDIR) + "/" + soname, "/usr/local/cuda/lib64/" + soname});
  void* lib = opened.handle;
  if (!lib) {
    out.error = unavailable("cuBLASLt could not be loaded; tried:" + opened.tried);
    return out;
  }
  out.lt.library = opened.path;
  CublasLtApi& a = out.lt.api;
  std::string missing;
  bind_symbol(lib, a.create, "cublasLtCreate", missing);
  bind_symbol(lib, a.get_version, "cublasLtGetVersion", missing);
  bind_symbol(lib, a.status_string, "cublasLtGetStatusString", missing);
  bind_symbol(lib, a.desc_create, "cublasLtMatmulDescCreate", missing);
  bind_symbol(lib, a.desc_destroy, "cublasLtMatmulDescDestroy", missing);
  bind_symbol(lib, a.desc_set, "cublasLtMatmulDescSetAttribute", missing);
  bind_symbol(lib, a.layout_create, "cublasLtMatrixLayoutCreate", missing);
  bind_symbol(lib, a.layout_destroy, "cublasLtMatrixLayoutDestroy", missing);
  bind_symbol(lib, a.pref_create, "cublasLtMatmulPreferenceCreate", missing);
  bind_symbol(lib, a.pref_destroy, "cublasLtMatmulPreferenceDestroy", missing);
  bind_symbol(lib, a.pref_set, "cublasLtMatmulPreferenceSetAttribute", missing);
  bind_symbol(lib, a.heuristic, "cublasLtMatmulAlgoGetHeuristic", missing);
  bind_symbol(lib, a.matmul, "cublasLtMatmul", missing);
  if (!missing.empty()) {
    out.error = unavailable(out.lt.library + " lacks " + missing);
    return out;
  }
  out.lt.version = a.get_version();
  if (out.lt.version / 10000 != CUBLAS_VER_MAJOR) {
    out.error = unavailable(out.lt.library + " is version " + std::to_string(out.lt.version) +
                            "; fusor was built for " + cublaslt_header_version());
    return out;
  }
  if (cublasStatus_t rc = a.create(&out.lt.handle); rc != CUBLAS_STATUS_SUCCESS)
    out.error = unavailable("cublasLtCreate failed: " + cublas_status_text(out.lt, rc));
  return out;
}

} // namespace

Expected<const CublasLt*> cublaslt() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (loaded.error) return *loaded.error;
  return &loaded.lt;
}

std::string cublaslt_header_version() {
  return std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) + "." +
         std::to_string(CUBLAS_VER_PATCH);
}

std::string cublas_status_text(const CublasLt& lt, cublasStatus_t status) {
  const char* s = lt.api.status_string ? lt.api.status_string(status) : nullptr;
  return s ? s : "cublasStatus " + std::to_string(static_cast<int>(status));
}

} // namespace fusor::cuda
