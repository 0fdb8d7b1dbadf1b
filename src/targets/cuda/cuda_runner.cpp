// Runs a CUDA kernel in-process: validate and pack operands (codegen::prepare_call) before
// any device work, load the cubin once per process, launch, and tag the result with the
// lane that ran.
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

#include "codegen/abi.hpp"
#include "fusor/cache.hpp"
#include "targets/cuda/cuda_emitters.hpp"
#include "targets/cuda/cuda_exec.hpp"
#include "targets/cuda/cuda_target.hpp"

namespace fusor::cuda {
namespace {

Expected<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorCode::io_error, "cannot read cubin " + path.string());
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Modules stay loaded for the process's life, keyed by artifact hash.
Expected<std::shared_ptr<LoadedKernel>> load_kernel(const Driver& d, const Artifact& artifact) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<LoadedKernel>> loaded;
  std::lock_guard lock(mutex);
  if (auto it = loaded.find(artifact.sha256); it != loaded.end()) return it->second;
  FUSOR_TRY_ASSIGN(const LaunchSpec spec, parse_launch(artifact.source.source));
  FUSOR_TRY_ASSIGN(const std::string image, read_file(artifact.path));
  if (sha256_hex(image) != artifact.sha256)
    return make_error(ErrorCode::cache_corrupt, "cubin " + artifact.path.string() + " does not match its hash");
  FUSOR_TRY_ASSIGN(auto kernel, LoadedKernel::load(d, image, artifact.source.entry, spec));
  loaded.emplace(artifact.sha256, kernel);
  return kernel;
}

} // namespace

Expected<RunOutput> run(const Artifact& artifact, const Region& region, std::span<const Tensor> operands) {
  FUSOR_TRY_ASSIGN(codegen::PreparedCall call, codegen::prepare_call(region, operands));
  if (auto why = mma_dims_decline(artifact.source, call.shape))
    return make_error(ErrorCode::emit_unsupported,
                      "region " + std::string(region_kind_name(region_kind(region))) + ", target cuda: " + *why);
  FUSOR_TRY_ASSIGN(const Driver* d, driver());
  FUSOR_TRY_ASSIGN(auto kernel, load_kernel(*d, artifact));
  const KernelCall kc{std::move(call.operand_bytes), std::move(call.dims), shape_numel(call.shape.output)};
  FUSOR_TRY_ASSIGN(CallResult r, run_call(*d, *kernel, kc));
  switch (r.kind) {
  case CallResult::Kind::ok: break;
  case CallResult::Kind::kernel_error:
    if (r.status == codegen::kKernelDimsMismatch)
      return make_error(ErrorCode::shape_mismatch, "cuda kernel (" + artifact.source.shape_key +
                                                       ") was called with dims outside its specialisation");
    return make_error(ErrorCode::internal,
                      "cuda kernel (lane " + artifact.source.lane + ") reported status " + std::to_string(r.status));
  case CallResult::Kind::fault:
  case CallResult::Kind::out_of_bounds_write:
    return make_error(ErrorCode::internal, "cuda kernel (lane " + artifact.source.lane + ") failed: " + r.detail);
  }
  return RunOutput{Tensor(call.shape.output, std::move(r.output)), artifact.source.lane, r.ms, {}};
}

} // namespace fusor::cuda
