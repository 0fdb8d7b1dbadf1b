// Runs an x86 kernel in-process: validate operands and pack f16/bf16 ones (codegen::prepare_call), load
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

// Loaded libraries stay mapped for the process's life, keyed by artifact hash, with their
// entry point resolved once (a dlsym per call cost a microsecond a region).
Expected<KernelFn> load_kernel(const Artifact& artifact) {
  struct Loaded {
    SharedLibrary lib;
    KernelFn fn;
  };
  static std::mutex mutex;
  static std::map<std::string, Loaded> loaded;
  std::lock_guard lock(mutex);
  auto it = loaded.find(artifact.sha256);
  if (it == loaded.end()) {
    FUSOR_TRY_ASSIGN(SharedLibrary lib, SharedLibrary::load(artifact.path));
    FUSOR_TRY_ASSIGN(void* sym, lib.symbol(artifact.source.entry));
    it = loaded.emplace(artifact.sha256, Loaded{std::move(lib), reinterpret_cast<KernelFn>(sym)}).first;
  }
  return it->second.fn;
}

} // namespace

Expected<RunOutput> run(const Artifact& artifact, const Region& region, std::span<const Tensor> operands) {
  // f32 operands are read where they lie: the call ends before `operands` does.
  FUSOR_TRY_ASSIGN(const codegen::PreparedCall call,
                   codegen::prepare_call(region, operands, codegen::OperandUse::borrow));
  FUSOR_TRY_ASSIGN(KernelFn fn, load_kernel(artifact));
  const std::vector<const void*> ptrs = codegen::operand_pointers(call, operands);
  Tensor out(call.shape.output);

  const auto start = std::chrono::steady_clock::now();
  const int rc = fn(ptrs.data(), out.data.data(), call.dims.data());
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  if (rc == codegen::kKernelDimsMismatch)
    return make_error(ErrorCode::shape_mismatch,
                      "x86 kernel (" + artifact.source.shape_key + ") was called with dims outside its specialisation");
  if (rc != codegen::kKernelOk) {
    const std::string_view meaning = codegen::kernel_return_meaning(rc);
    return make_error(ErrorCode::internal, "x86 kernel (" + artifact.source.lane + ") returned " + std::to_string(rc) +
                                               (meaning.empty() ? "" : ": " + std::string(meaning)));
  }
  return RunOutput{std::move(out), artifact.source.lane, ms.count(), {}};
}

} // namespace fusor::x86
