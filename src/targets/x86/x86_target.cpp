// Registers the x86 target's three seams and its candidates: the one call
// register_builtin_targets makes for x86.
#include "targets/x86/x86_target.hpp"

#include "fusor/toolchain.hpp"
#include "targets/x86/x86_emitter.hpp"
#include "targets/x86/x86_onednn.hpp"
#include "targets/x86/x86_simd_emitter.hpp"

namespace fusor::x86 {

void register_target(Registry& registry) {
  registry.add_target(Target{
      "x86",
      [] {
        auto cc = detect_host_compiler();
        return host_isa() + " | " + (cc ? cc->identity() : std::string("no compiler"));
      },
      [] { return Status{}; }, // any x86-64 host with a C compiler; compile reports a missing one
      [](const Region& region, const EmitOptions& options) { return emit(region, options); },
      [](const KernelSource& source) { return compile(source); },
      [](const Artifact& artifact, const Region& region, std::span<const Tensor> operands) {
        return run(artifact, region, operands);
      },
      [](const Artifact& artifact, std::span<const KernelCall> calls, std::chrono::milliseconds timeout) {
        return run_sandboxed(artifact.path, artifact.source.entry, calls, timeout);
      },
  });
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::attention, RegionKind::gated,
                    RegionKind::pointwise, RegionKind::pointwise_reduce, RegionKind::norm_chain})
    registry.add_candidate(Candidate{std::string(kGenericLane), "x86", kind, 1, [](const Region& region) {
                                       const DType d = region_storage(region);
                                       return d == DType::fp8_e4m3 || d == DType::fp8_e5m2
                                                  ? std::optional<std::string>("fp8 storage is not supported on x86")
                                                  : std::nullopt;
                                     }});
  // Tier 2: the AVX-512 micro-kernel lane (declines, with the reason, on hosts without it).
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::attention, RegionKind::gated,
                    RegionKind::pointwise, RegionKind::pointwise_reduce, RegionKind::norm_chain})
    registry.add_candidate(Candidate{std::string(kAvx512Lane), "x86", kind, 2, simd_declines, emit_simd});
  // Also tier 2: the AMX bf16-tile micro-kernel with exact f32 products (GEMM-rooted kinds and
  // attention's scores; declines on hosts without AMX or tile permission). Registered after
  // AVX-512: measured latency, not order, makes it win.
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::gated, RegionKind::attention})
    registry.add_candidate(Candidate{std::string(kAmxLane), "x86", kind, 2, amx_declines, emit_amx});
  // Also tier 2: every kind on AVX2 + FMA, for hosts without AVX-512 (on those with it the
  // arbiter measures it beside x86_avx512).
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::attention, RegionKind::gated,
                    RegionKind::pointwise, RegionKind::pointwise_reduce, RegionKind::norm_chain})
    registry.add_candidate(Candidate{std::string(kAvx2Lane), "x86", kind, 2, avx2_declines, emit_avx2});
#ifdef FUSOR_HAVE_DNNL // set by CMake when oneDNN's headers and library are found
  // Tier 3: oneDNN matmul + post-ops, for the fused patterns it computes exactly.
  registry.add_candidate(
      Candidate{std::string(kOneDnnLane), "x86", RegionKind::fused, 3, onednn_declines, emit_onednn});
#endif
}

} // namespace fusor::x86
