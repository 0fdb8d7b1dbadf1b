// The host C toolchain (SPEC §3 "Compile" for target x86): running processes, detecting the
// ISA and the compiler, compiling a KernelSource to a cached shared object, loading it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fusor/cache.hpp"
#include "fusor/error.hpp"
#include "fusor/kernel.hpp"

namespace fusor {

// ---- processes ------------------------------------------------------------------------

struct ProcessResult {
  int exit_code = -1;     // valid when term_signal == 0 and !timed_out
  int term_signal = 0;    // the signal that ended the child, 0 if it exited
  bool timed_out = false; // killed (with its process group) because the timeout passed
  std::string out;        // everything the child wrote to stdout
  std::string err;        // everything the child wrote to stderr
  std::chrono::milliseconds elapsed{0};

  [[nodiscard]] bool succeeded() const { return !timed_out && term_signal == 0 && exit_code == 0; }
};

// Runs argv[0] (searched on PATH) with argv, no shell. Both output pipes are drained
// concurrently, so any amount of output is safe. A child that cannot be started (missing
// program, not executable) is an E_IO error; a child that runs and fails is a result.
Expected<ProcessResult> run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                    const std::string& stdin_text = {});

// ---- host ISA -------------------------------------------------------------------------

// The host CPU as the compiler's -march=native sees it, detected at run time, e.g.
// "x86_64 avx2 fma avx512f avx512bw avx512vl avx512dq avx512vnni avx512bf16 | AMD EPYC 9B45".
std::string host_isa();
bool host_has_avx512();   // avx512f + bw + vl + dq: what the x86_avx512 lane's kernels assume
bool host_has_avx2_fma(); // avx2 + fma: what the x86_avx2 lane's kernels assume
// The last-level cache one core of the host sees, in bytes (0: unknown). Read from sysfs: glibc's
// sysconf(_SC_LEVEL3_CACHE_SIZE) reported 320 MiB on a Zen 4 VM whose L3 is 32 MiB.
std::int64_t host_llc_bytes();
// The part of it this process can count on: host_llc_bytes, except in a virtual machine (the
// `hypervisor` flag), whose sysfs reports its host's whole L3 while other guests share it (300
// MiB for the lent host's 16 vCPUs): there 2 MiB for each CPU the process may run on, at least
// 12 MiB, at most host_llc_bytes.
std::int64_t host_llc_share_bytes();
// How many CPUs this process may run on (its affinity mask; 1 where unknown).
int host_affinity_cpus();
// One core's L2 in bytes, from sysfs as host_llc_bytes (0: unknown or none).
std::int64_t host_l2_bytes();
// Why this process cannot run AMX bf16 tiles (nullopt: it can): the CPU lacks amx_tile or
// amx_bf16, or the kernel refuses the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, which
// this asks for, once, as the x86_amx lane's kernels do).
std::optional<std::string> host_lacks_amx_bf16();
// Whether the x86_amx lane runs with its tiles emulated in memory (FUSOR_AMX_EMULATE=1 in the
// environment, read once, on a CPU with AVX-512 BF16, which the lane's packing uses): a test
// mode for CPUs without AMX, thousands of times slower than the tiles, never for timing.
bool amx_emulated();

// ---- host compiler --------------------------------------------------------------------

struct HostCompiler {
  std::string path;    // absolute path as found on PATH (not resolved: ccache-style wrappers need argv[0])
  std::string version; // first line of --version
  std::vector<std::string> flags;
  bool openmp = false; // -fopenmp is in flags (it was probed and works)

  // Everything that changes the bytes a compile produces: path, real path, version, flags,
  // host ISA. Part of every cache key, so a toolchain or CPU change never serves a stale .so.
  [[nodiscard]] std::string identity() const;
};

// FUSOR_CC overrides the compiler (a name searched on PATH, or a path), else "cc".
// Missing or broken compiler → E_COMPILE_FAILED naming what was searched or run.
Expected<HostCompiler> detect_host_compiler();

// Compiles a lang "c" KernelSource into a shared object, through the cache: a hit runs no
// compiler. Compiler failure → E_COMPILE_FAILED carrying the command line and the
// compiler's own diagnostics.
Expected<CacheEntry> compile_shared_object(const KernelSource& src, const HostCompiler& cc, DiskCache& cache);

// The cache key compile_shared_object uses (exposed so tests and tools can inspect it).
std::string shared_object_cache_key(const KernelSource& src, const HostCompiler& cc);

// ---- shared libraries -----------------------------------------------------------------

// An owned dlopen handle (RTLD_NOW | RTLD_LOCAL); dlclose on destruction.
class SharedLibrary {
public:
  static Expected<SharedLibrary> load(const std::filesystem::path& path);

  SharedLibrary(SharedLibrary&& other) noexcept;
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  ~SharedLibrary();

  // The address of an exported symbol; E_RUNNER_UNAVAILABLE naming it when absent.
  Expected<void*> symbol(const std::string& name) const;
  const std::filesystem::path& path() const { return path_; }

private:
  SharedLibrary(void* handle, std::filesystem::path path) : handle_(handle), path_(std::move(path)) {}
  void* handle_ = nullptr;
  std::filesystem::path path_;
};

} // namespace fusor
