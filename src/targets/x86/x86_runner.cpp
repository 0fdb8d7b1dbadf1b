// Runs an x86 kernel in-process: validate and pack operands (codegen::prepare_call), load
// the shared object once per process, call, and tag the result with the lane that ran.
#include <chrono>
#include <map>
#include <mutex>

#include "codegen/abi.hpp"
#include "fusor/toolchain.hpp"
#include "targets/x86/x86_emitter.hpp"
#include "targets/x86/x86_target.hpp"

namespace fusor::x86 {
namespace {

using KernelFn = int (*)(const void* const*, float*, const std::int64_t*);

// Loaded libraries stay mapped for the process's life, keyed by artifact hash.
Expected<KernelFn> load_kernel(const Artifact& artifact) {
  static std::mutex mutex;
  static std::map<std::string, SharedLibrary> loaded;
  std::lock_guard lock(mutex);
  auto it = loaded.find(artifact.sha256);
  if (it == loaded.end()) {
    FUSOR_TRY_ASSIGN(SharedLibrary lib, SharedLibrary::load(artifact.path));
    it = loaded.emplace(artifact.sha256, std::move(lib)).first;
  }
  FUSOR_TRY_ASSIGN(void* sym, it->second.symbol(artifact.source.entry));
  return reinterpret_cast<KernelFn>(sym);
}

} // namespace

Expected<RunOutput> run(const Artifact& artifact, const Region& region, std::span<const Tensor> operands) {
  FUSOR_TRY_ASSIGN(const codegen::PreparedCall call, codegen::prepare_call(region, operands));
  FUSOR_TRY_ASSIGN(KernelFn fn, load_kernel(artifact));
  std::vector<const void*> ptrs;
  for (const auto& bytes : call.operand_bytes) ptrs.push_back(bytes.data());
  Tensor out(call.shape.output);

  const auto start = std::chrono::steady_clock::now();
  const int rc = fn(ptrs.data(), out.data.data(), call.dims.data());
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  if (rc == codegen::kKernelDimsMismatch)
    return make_error(ErrorCode::shape_mismatch,
                      "x86 kernel (" + artifact.source.shape_key + ") was called with dims outside its specialisation");
  if (rc != codegen::kKernelOk)
    return make_error(ErrorCode::internal, "x86 kernel returned " + std::to_string(rc) + " (out of memory?)");
  return RunOutput{std::move(out), artifact.source.lane, ms.count(), {}};
}

} // namespace fusor::x86
