// Registers the CUDA target's seams and its candidates: the one call
// register_builtin_targets makes for cuda.
#include "targets/cuda/cuda_target.hpp"

#include "targets/cuda/cublaslt_lane.hpp"
#include "targets/cuda/cuda_driver.hpp"
#include "targets/cuda/cuda_emitters.hpp"

namespace fusor::cuda {

Status available() {
  auto d = driver();
  if (!d) return d.error();
  return {};
}

void register_target(Registry& registry) {
  Target t;
  t.name = "cuda";
  t.fingerprint = [] {
    auto d = driver();
    return (d ? (*d)->device.describe() : std::string("no CUDA device")) + " | nvrtc " + nvrtc_version() + " " +
           compile_arch();
  };
  t.available = [] { return available(); };
  t.emit = [](const Region& region, const EmitOptions& options) { return emit_simt(region, options); };
  t.compile = [](const KernelSource& source) { return compile(source); };
  t.run = [](const Artifact& artifact, const Region& region, std::span<const Tensor> operands) {
    return run(artifact, region, operands);
  };
  t.run_isolated = [](const Artifact& artifact, std::span<const KernelCall> calls, std::chrono::milliseconds timeout) {
    return run_isolated(artifact, calls, timeout);
  };
  registry.add_target(std::move(t));
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::attention, RegionKind::gated,
                    RegionKind::pointwise, RegionKind::pointwise_reduce, RegionKind::norm_chain})
    registry.add_candidate(Candidate{std::string(kSimtLane), "cuda", kind, 1, [](const Region& region) {
                                       const DType d = region_storage(region);
                                       return d == DType::fp8_e4m3 || d == DType::fp8_e5m2
                                                  ? std::optional<std::string>(
                                                        "fp8 storage is not supported by cuda_simt")
                                                  : std::nullopt;
                                     }});
  for (DType dtype : {DType::f16, DType::bf16}) {
    const std::string lane(dtype == DType::f16 ? kMmaF16Lane : kMmaBf16Lane);
    for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::attention, RegionKind::gated})
      registry.add_candidate(Candidate{
          lane, "cuda", kind, 2, [dtype](const Region& region) { return mma_declines(region, dtype); },
          [dtype](const Region& region, const EmitOptions& options) { return emit_mma(region, options, dtype); }});
  }
  registry.add_candidate(
      Candidate{std::string(kCublasLtLane), "cuda", RegionKind::fused, 3, cublaslt_declines, emit_cublaslt});
}

} // namespace fusor::cuda
