// The CUDA lanes' emitters: the generic SIMT lane for every region kind, and the
// tensor-core lanes (mma.sync, f16/bf16 storage, f32 accumulation) for GEMM-rooted kinds
// and attention.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "fusor/error.hpp"
#include "fusor/kernel.hpp"
#include "fusor/operands.hpp"
#include "fusor/region.hpp"

namespace fusor::cuda {

inline constexpr std::string_view kSimtLane = "cuda_simt";
inline constexpr std::string_view kMmaF16Lane = "cuda_mma_f16";
inline constexpr std::string_view kMmaBf16Lane = "cuda_mma_bf16";

Expected<KernelSource> emit_simt(const Region& region, const EmitOptions& options);

// Why the tensor-core lane for `dtype` cannot run `region` (nullopt: it applies).
std::optional<std::string> mma_declines(const Region& region, DType dtype);
// Options: tile=128x128 (default), 128x256, 64x128 for GEMM kinds; stages=2..6.
Expected<KernelSource> emit_mma(const Region& region, const EmitOptions& options, DType dtype);
// Problem sizes a tensor-core kernel handles (attention: D, Dv <= 128); the runner
// checks before launching.
std::optional<std::string> mma_dims_decline(const KernelSource& source, const ProblemShape& shape);

} // namespace fusor::cuda
