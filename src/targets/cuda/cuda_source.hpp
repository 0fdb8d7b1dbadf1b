// Pieces every CUDA kernel source shares: the header comment and launch line, the NVRTC
// prelude (fixed-width types, INFINITY/NAN, storage conversions, warp and block
// reductions), the entry signature and its dims prologue per spec policy.
#pragma once

#include <string>

#include "fusor/error.hpp"
#include "fusor/kernel.hpp"
#include "fusor/region.hpp"
#include "targets/cuda/cuda_launch.hpp"

namespace fusor::cuda {

Error unsupported(RegionKind kind, std::string_view lane, const std::string& reason);

// Comment line, launch line, prelude.
std::string kernel_header(const Region& region, std::string_view lane, const std::string& shape_key,
                          const LaunchSpec& launch);

// `extern "C" __global__ void __launch_bounds__(threads) fusor_kernel(...) {` plus the
// statements binding the kind's named dims (checked against a static/bucket specialisation).
Expected<std::string> entry_open(const Region& region, const EmitOptions& options, int threads, std::string_view lane);

// The C type an operand stored in `dtype` has in the kernel, and the f32 load of ptr[idx].
std::string storage_type(DType dtype);
std::string load_expr(DType dtype, const std::string& ptr, const std::string& idx);

// Fills the KernelSource fields common to every CUDA lane.
KernelSource make_source(const Region& region, const EmitOptions& options, std::string source, std::string lane,
                         const std::string& shape_key);

} // namespace fusor::cuda
