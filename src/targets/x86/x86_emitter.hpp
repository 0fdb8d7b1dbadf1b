// The x86 emitter: the C99 dialect of the shared renderer, one kernel per region.
#pragma once

#include "fusor/error.hpp"
#include "fusor/kernel.hpp"
#include "fusor/region.hpp"

namespace fusor::x86 {

// The generic lane's tag: portable C99 + OpenMP, vectorised by the host compiler for the
// host ISA (-march=native). Hand-blocked SIMD lanes have tags of their own.
inline constexpr std::string_view kGenericLane = "x86_c";
std::string_view lane_tag();

Expected<KernelSource> emit(const Region& region, const EmitOptions& options);

// C declarations of a norm chain's f32 operand pointers, in ABI order: x, then res, gamma,
// beta as the region has them (shared with the AVX-512 lane).
std::string norm_chain_operand_decls(const NormChainRegion& r);

} // namespace fusor::x86
