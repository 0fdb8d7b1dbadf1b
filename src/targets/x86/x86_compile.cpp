#include <mutex>

#include "fusor/toolchain.hpp"
#include "targets/x86/x86_simd_emitter.hpp"
#include "targets/x86/x86_target.hpp"

namespace fusor::x86 {
namespace {

// The compiler and cache are discovered once per process; FUSOR_CC / FUSOR_CACHE_DIR
// changes after that are not seen (tests that need them run in child processes).
struct Toolchain {
  Expected<HostCompiler> cc = detect_host_compiler();
  Expected<DiskCache> cache = DiskCache::open();
};

Toolchain& toolchain() {
  static Toolchain tc;
  return tc;
}

} // namespace

Expected<Artifact> compile(const KernelSource& source) {
  static std::mutex mutex; // DiskCache is process-safe; the counters behind it are not thread-safe
  std::lock_guard lock(mutex);
  Toolchain& tc = toolchain();
  if (!tc.cc) return tc.cc.error();
  if (!tc.cache) return tc.cache.error();
  // (The tiles emulated: a flag, so the cache keeps such kernels apart from the real ones.)
  KernelSource built = source;
  if (built.lane == kAmxLane && amx_emulated()) built.compile_flags.push_back("-DFUSOR_AMX_EMULATE");
  FUSOR_TRY_ASSIGN(CacheEntry entry, compile_shared_object(built, *tc.cc, *tc.cache));
  return Artifact{entry.artifact, entry.key, entry.sha256, entry.hit, built};
}

} // namespace fusor::x86
