// The CUDA target: emitters (cuda_emitters.hpp), compile (NVRTC → cached cubin), an
// in-process runner and an isolated runner (the fusor-cuda-sandbox child), registered with
// one call. Built only when CMake finds the CUDA toolkit (FUSOR_HAVE_CUDA).
#pragma once

#include <string>
#include <vector>

#include "fusor/target.hpp"

namespace fusor::cuda {

// The architecture NVRTC targets when no device is present (the lent H200 is sm_90).
inline constexpr std::string_view kDefaultArch = "sm_90";

// FUSOR_CUDA_ARCH, else the device's compute capability, else kDefaultArch.
std::string compile_arch();
// A kernel that needs an architecture-specific target (wgmma: sm_90a) says so in one line
// of its source: "// fusor-arch: sm_90a". The arch NVRTC compiles `source` for.
inline constexpr std::string_view kArchLine = "// fusor-arch: ";
Expected<std::string> source_arch(const KernelSource& source);
std::string nvrtc_version(); // "13.0"
std::vector<std::string> nvrtc_options(const std::string& arch);
std::string cubin_cache_key(const KernelSource& source, const std::string& arch);

Status available();
Expected<Artifact> compile(const KernelSource& source);
Expected<RunOutput> run(const Artifact& artifact, const Region& region, std::span<const Tensor> operands);
Expected<SandboxOutcome> run_isolated(const Artifact& artifact, std::span<const KernelCall> calls,
                                      std::chrono::milliseconds timeout);

// Where the fusor-cuda-sandbox executable is: FUSOR_CUDA_SANDBOX, else next to
// /proc/self/exe, else the build-time path.
Expected<std::filesystem::path> sandbox_executable();

void register_target(Registry& registry);

} // namespace fusor::cuda
