// The compile seam: NVRTC in-process, CUDA C++ → cubin for the device's compute capability
// (sm_90 when no device is present), through the shared on-disk cache. No nvcc, no
// subprocess. The cache key holds the NVRTC version, the arch and the options, so a new
// toolkit or another GPU never gets a stale cubin.
#include <nvrtc.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <vector>

#include "fusor/cache.hpp"
#include "targets/cuda/cublaslt_api.hpp"
#include "targets/cuda/cuda_driver.hpp"
#include "targets/cuda/cuda_target.hpp"

namespace fusor::cuda {
std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {

Error nvrtc_failed(const KernelSource& src, const std::string& what, const std::string& log) {
  return make_error(ErrorCode::compile_failed, "NVRTC " + what + " for kernel '" + src.entry + "' (lane " + src.lane +
                                                   ", " + src.shape_key + "):\n" + log);
}

// Compiles to `out`; the program log is the diagnostics on failure.
Status nvrtc_compile(const KernelSource& src, const std::vector<std::string>& options,
                     const std::filesystem::path& out) {
  nvrtcProgram prog = nullptr;
  if (nvrtcResult rc = nvrtcCreateProgram(&prog, src.source.c_str(), (src.entry + ".cu").c_str(), 0, nullptr, nullptr);
      rc != NVRTC_SUCCESS)
    return nvrtc_failed(src, "nvrtcCreateProgram", nvrtcGetErrorString(rc));
  struct Guard {
    nvrtcProgram* p;
    ~Guard() { nvrtcDestroyProgram(p); }
  } guard{&prog};
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  const nvrtcResult rc = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  std::string log;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    nvrtcGetProgramLog(prog, log.data());
    log.resize(log_size - 1);
  }
  if (rc != NVRTC_SUCCESS) return nvrtc_failed(src, std::string("compile (") + nvrtcGetErrorString(rc) + ")", log);
  size_t size = 0;
  if (nvrtcResult r = nvrtcGetCUBINSize(prog, &size); r != NVRTC_SUCCESS || size == 0)
    return nvrtc_failed(src, "produced no cubin", log);
  std::string cubin(size, '\0');
  if (nvrtcResult r = nvrtcGetCUBIN(prog, cubin.data()); r != NVRTC_SUCCESS)
    return nvrtc_failed(src, "nvrtcGetCUBIN", nvrtcGetErrorString(r));
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  f.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
  if (!f) return make_error(ErrorCode::io_error, "cannot write cubin " + out.string());
  return {};
}

} // namespace

std::string compile_arch() {
  if (const char* env = std::getenv("FUSOR_CUDA_ARCH"); env && *env) return env;
  auto d = driver();
  return d.ok() ? (*d)->device.arch() : std::string(kDefaultArch);
}

Expected<std::string> source_arch(const KernelSource& source) {
  const std::string arch = compile_arch();
  const size_t at = source.source.find(kArchLine);
  if (at == std::string::npos) return arch;
  const size_t from = at + kArchLine.size();
  const std::string wanted = source.source.substr(from, source.source.find('\n', from) - from);
  // sm_90a code runs on sm_90 devices only.
  if (wanted == arch + "a") return wanted;
  return make_error(ErrorCode::runner_unavailable, "kernel '" + source.entry + "' (lane " + source.lane + ") needs " +
                                                       wanted + "; this device compiles for " + arch);
}

std::vector<std::string> nvrtc_options(const std::string& arch) {
  // IEEE division and square root, no flush-to-zero: the f32 lanes' budgets are exact.
  return {"--gpu-architecture=" + arch, "-std=c++17", "--fmad=true", "-default-device", "-w"};
}

std::string cubin_cache_key(const KernelSource& src, const std::string& arch) {
  std::vector<std::string> parts{"fusor-cuda-cubin-v1",
                                 src.source,
                                 src.entry,
                                 src.lang,
                                 std::string(spec_policy_name(src.spec)),
                                 src.shape_key,
                                 src.layouts,
                                 std::string(dtype_name(src.dtype)),
                                 src.target,
                                 src.lane,
                                 "nvrtc " + nvrtc_version(),
                                 arch};
  for (const auto& o : nvrtc_options(arch)) parts.push_back(o);
  return DiskCache::make_key(parts);
}

namespace {

// What the cache records beside an artifact (`fusor cache stats`, debugging).
nlohmann::json cache_meta(const KernelSource& source, const std::string& compiler) {
  return {{"lane", source.lane},
          {"target", source.target},
          {"entry", source.entry},
          {"spec", spec_policy_name(source.spec)},
          {"shape_key", source.shape_key},
          {"dtype", dtype_name(source.dtype)},
          {"region_text", source.region_text},
          {"compiler", compiler}};
}

// A cuBLASLt plan has nothing to compile: the cache keeps the plan text itself, keyed by
// the library version it was written for, so the runner and the oracle's sandbox load it
// through the same path as a cubin.
Expected<Artifact> store_plan(const KernelSource& source, DiskCache& cache) {
  const std::string key = DiskCache::make_key(std::vector<std::string>{
      "fusor-cublaslt-plan-v1", source.source, source.shape_key, std::string(dtype_name(source.dtype)), source.lane,
      "cublasLt " + cublaslt_header_version()});
  const nlohmann::json meta = cache_meta(source, "cublasLt " + cublaslt_header_version());
  FUSOR_TRY_ASSIGN(CacheEntry entry, cache.get_or_build(
                                         key, "plan",
                                         [&](const std::filesystem::path& out) -> Status {
                                           std::ofstream f(out, std::ios::binary | std::ios::trunc);
                                           f << source.source;
                                           if (!f)
                                             return make_error(ErrorCode::io_error, "cannot write " + out.string());
                                           return {};
                                         },
                                         meta));
  return Artifact{entry.artifact, entry.key, entry.sha256, entry.hit, source};
}

} // namespace

Expected<Artifact> compile(const KernelSource& source) {
  if (source.lang != "cuda" && source.lang != "cublaslt")
    return make_error(ErrorCode::bad_argument, "the cuda target compiles lang \"cuda\" (NVRTC) and \"cublaslt\" "
                                               "(plans); kernel '" +
                                                   source.entry + "' for lane " + source.lane + " has lang \"" +
                                                   source.lang + "\"");
  static std::mutex mutex; // the cache's counters are per process, not thread-safe
  std::lock_guard lock(mutex);
  static Expected<DiskCache> cache = DiskCache::open();
  if (!cache) return cache.error();
  if (source.lang == "cublaslt") return store_plan(source, *cache);
  FUSOR_TRY_ASSIGN(const std::string arch, source_arch(source));
  nlohmann::json meta = cache_meta(source, "nvrtc " + nvrtc_version());
  meta["arch"] = arch;
  FUSOR_TRY_ASSIGN(
      CacheEntry entry,
      cache->get_or_build(
          cubin_cache_key(source, arch), "cubin",
          [&](const std::filesystem::path& out) { return nvrtc_compile(source, nvrtc_options(arch), out); }, meta));
  return Artifact{entry.artifact, entry.key, entry.sha256, entry.hit, source};
}

} // namespace fusor::cuda
