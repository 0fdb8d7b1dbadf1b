// The x86 AVX-512 lane: register-blocked micro-kernels with packed panels for GEMM-rooted
// regions, flash-style attention, and `omp simd` streaming loops for pointwise and norm
// kinds. Every formula comes from the op table through the renderer's SIMD dialect.
#pragma once

#include <optional>
#include <string>

#include "fusor/error.hpp"
#include "fusor/kernel.hpp"
#include "fusor/region.hpp"

namespace fusor::x86 {

inline constexpr std::string_view kAvx512Lane = "x86_avx512";

// Why the AVX-512 lane cannot run `region` on this host (nullopt: it applies).
std::optional<std::string> simd_declines(const Region& region);

// Options (all optional, for tuning): "mr" rows of the micro-tile (4..14; attention's query
// block, default 12 there), "kc" the K block, "mc" the target rows of a packed A block, "nb"
// attention's keys per softmax step (32..4096, a multiple of 32). Any other key is rejected.
Expected<KernelSource> emit_simd(const Region& region, const EmitOptions& options);

// The x86_amx lane: GEMM-rooted kinds (fused, matmul, gated) and attention with the AVX-512
// lane's loop nests, epilogues and softmax around an AMX bf16-tile micro-kernel whose f32
// products are exact (each operand split into bf16 parts; x86_amx_gemm.cpp says how;
// attention: x86_amx_attention.cpp). Options: "kc", "mc", "nb", "serial", "exact" (1: all
// nine part products, every f32 product exact; default 0: six, each product good to 2^-21).
inline constexpr std::string_view kAmxLane = "x86_amx";
std::optional<std::string> amx_declines(const Region& region);
Expected<KernelSource> emit_amx(const Region& region, const EmitOptions& options);

// The x86_avx2 lane, for hosts without AVX-512: the AVX-512 lane's loop nests with no AVX-512
// instruction. GEMM-rooted kinds (fused, matmul, gated) and attention around an AVX2 + FMA
// micro-kernel (x86_avx2_gemm.cpp; attention's pieces: x86_avx2_attention.cpp); norm chains,
// pointwise DAGs and reductions with the compiler-vectorised loops and ymm streaming stores.
// Options: "mr" (4..6, default 6), "kc", "mc", "nb", "serial", "stream".
inline constexpr std::string_view kAvx2Lane = "x86_avx2";
std::optional<std::string> avx2_declines(const Region& region);
Expected<KernelSource> emit_avx2(const Region& region, const EmitOptions& options);

} // namespace fusor::x86
