// The cuBLASLt vendor lane (cuda_cublaslt, tier 3): a FusedRegion as one cublasLtMatmul
// with its BIAS / RELU / GELU epilogue. The "source" is a plan (the matmul's types,
// transposes and epilogue) that the cache stores like a cubin, the oracle's CUDA sandbox
// verifies like any kernel, and the runner executes through the dlopen'ed library.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <cuda.h>

#include "fusor/error.hpp"
#include "fusor/kernel.hpp"
#include "fusor/region.hpp"
#include "targets/cuda/cublaslt_api.hpp"

namespace fusor::cuda {

inline constexpr std::string_view kCublasLtLane = "cuda_cublaslt";

// Why cuBLASLt cannot compute this region exactly (nullopt: it can). A pattern the library
// would only approximate is a decline with the reason, never a silent approximation.
std::optional<std::string> cublaslt_declines(const Region& region);
// Options: none. Every spec policy is accepted (the library takes its dims at run time).
Expected<KernelSource> emit_cublaslt(const Region& region, const EmitOptions& options);

// The plan line of an emitted source.
struct CublasPlan {
  enum class Act { none, relu, gelu };
  DType storage = DType::f32;
  bool a_col_major = false, b_col_major = false;
  bool bias = false, residual = false;
  Act act = Act::none;
  std::string text() const; // "plan storage=bf16 a=row b=col bias=1 act=gelu residual=0"
};
Expected<CublasPlan> parse_plan(std::string_view source);

// Operand bytes as the library takes them: bias and residual of f16/bf16 regions widen
// exactly to f32 (cuBLASLt wants them in D's type, and D is the ABI's f32 output).
std::vector<ByteBuffer> plan_operands(const CublasPlan& plan, std::span<const ByteBuffer> operand_bytes);

// One configured matmul for (M, N, K): descriptors and the heuristic's algorithm, made once
// and launched any number of times on the default stream.
class PlanCall {
public:
  static Expected<PlanCall> make(const CublasLt& lt, const CublasPlan& plan, std::int64_t M, std::int64_t N,
                                 std::int64_t K, size_t workspace_bytes);
  PlanCall(PlanCall&& o) noexcept;
  PlanCall& operator=(PlanCall&&) = delete;
  PlanCall(const PlanCall&) = delete;
  ~PlanCall();
  // operands: device pointers in region order (A, B, bias?, residual?).
  cublasStatus_t launch(std::span<const CUdeviceptr> operands, CUdeviceptr out, CUdeviceptr workspace) const;

private:
  PlanCall(const CublasLt& lt, const CublasPlan& plan) : lt_(&lt), plan_(plan) {}
  const CublasLt* lt_;
  CublasPlan plan_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t x_ = nullptr, y_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_ = 0;
};

} // namespace fusor::cuda
