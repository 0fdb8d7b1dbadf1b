// The native kernel ABI shared by every lane (documented in docs/abi.md):
//   int fusor_kernel(const void* const* operands, float* out, const int64_t* dims);
// operands: in the region's operand order, raw orientation, each stored in the region's
// storage dtype (float for f32, uint16_t bits for f16/bf16); out: f32, row-major;
// dims: the kind's named dims (abi_dim_names) followed by kind-specific extras
// (broadcast strides for pointwise kinds). Returns 0, or a nonzero FUSOR_KERNEL_* code.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fusor/kernel.hpp"
#include "fusor/operands.hpp"
#include "fusor/region.hpp"
#include "fusor/tensor.hpp"

namespace fusor::codegen {

inline constexpr int kKernelOk = 0;
inline constexpr int kKernelDimsMismatch = 1; // static/bucket kernel called with other dims
inline constexpr int kKernelOutOfMemory = 2;
inline constexpr int kKernelNoTileState = 3; // an AMX kernel whose process the OS refused tile state

// What a kernel's nonzero return code means, for messages ("" when it has no meaning).
inline std::string_view kernel_return_meaning(int rc) {
  switch (rc) {
  case kKernelDimsMismatch: return "called with dims outside its specialisation";
  case kKernelOutOfMemory: return "out of memory";
  case kKernelNoTileState: return "the OS refused AMX tile state to arch_prctl ARCH_REQ_XCOMP_PERM";
  default: return "";
  }
}

// Names of the dims a kind's kernel takes, in ABI order ("M","N","K" for GEMM kinds).
std::vector<std::string_view> abi_dim_names(RegionKind kind);
// Their values for a problem (same order).
std::vector<std::int64_t> abi_dim_values(RegionKind kind, const ProblemShape& shape);
// The problem a kernel's named dims describe (inverse of abi_dim_values; pointwise kinds
// get a flat [total] or [rows, row_len] shape).
ProblemShape problem_from_abi_dims(RegionKind kind, std::span<const std::int64_t> values);
// The full dims array for a call: named dims, then for pointwise and pointwise_reduce
// `rank, shape[rank], strides_0[rank], ..., strides_{n-1}[rank]` (element strides of
// each input broadcast to the full shape; 0 on broadcast axes).
std::vector<std::int64_t> abi_dims(const Region& region, const ProblemShape& shape, std::span<const Tensor> operands);

// A call ready for a native kernel: operands checked and converted to their storage
// bytes (f32 as is, f16/bf16 as 16-bit patterns), the dims array, the output shape.
struct PreparedCall {
  ProblemShape shape;
  std::vector<ByteBuffer> operand_bytes; // empty when the operands are borrowed (below)
  std::vector<std::int64_t> dims;
};
// How prepare_call treats f32 operands of an f32-storage region: `copy` packs them like any
// other (a call that outlives the tensors or crosses a process), `borrow` leaves
// operand_bytes empty so an in-process call reads the tensors where they are.
enum class OperandUse { copy, borrow };
// E_SHAPE_MISMATCH / E_FUSED_EPILOGUE_MISSING_OPERAND before any byte is packed; sizes past
// the ABI's int64 range are refused too.
Expected<PreparedCall> prepare_call(const Region& region, std::span<const Tensor> operands,
                                    OperandUse use = OperandUse::copy);
// The kernel's operand pointers: into call.operand_bytes, or the borrowed tensors' data.
std::vector<const void*> operand_pointers(const PreparedCall& call, std::span<const Tensor> operands);

// KernelSource::spec_dims for an emit: the static dims, a bucket's upper bounds, or none.
std::vector<std::int64_t> spec_dims(RegionKind kind, const EmitOptions& options);

// The operands' physical layouts, for KernelSource::layouts and the cache key:
// "a=row_major,b=col_major", "q=natural,k=transposed", or "row_major".
std::string layouts_of(const Region& region);

// The KernelSource of an emit: entry `fusor_kernel`, the options' spec and dims, the
// region's layouts, storage dtype and canonical text, and the given names.
KernelSource kernel_source(const Region& region, const EmitOptions& options, std::string source, std::string lang,
                           std::string target, std::string lane, std::string shape_key);

// "dynamic:M,N,K", "bucket:M<=8,N<=16,K<=16" or "static:M=8,N=16,K=12".
std::string shape_key(RegionKind kind, SpecPolicy policy, const std::optional<ProblemShape>& dims);

} // namespace fusor::codegen
