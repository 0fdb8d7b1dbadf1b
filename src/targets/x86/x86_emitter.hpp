// The x86 emitter: the C99 dialect of the shared renderer, one kernel per region.
#pragma once

#include "fusor/error.hpp"
#include "fusor/kernel.hpp"
#include "fusor/region.hpp"

namespace fusor::x86 {

// The lane tag x86 kernels run under on this host: "x86_avx512", "x86_avx2" or "x86_c".
std::string_view lane_tag();

Expected<KernelSource> emit(const Region& region, const EmitOptions& options);

} // namespace fusor::x86
