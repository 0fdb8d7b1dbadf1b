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

} // namespace fusor::x86
