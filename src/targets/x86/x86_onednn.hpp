// The oneDNN vendor lane (tier 3): a FusedRegion as one oneDNN matmul with bias and
// post-ops, wrapped in the lane ABI so the cache, the oracle's sandbox and the runner
// treat it like any emitted kernel.
#pragma once

#include <optional>
#include <string>

#include "fusor/error.hpp"
#include "fusor/kernel.hpp"
#include "fusor/region.hpp"

namespace fusor::x86 {

inline constexpr std::string_view kOneDnnLane = "x86_onednn";

// Why oneDNN cannot compute this region exactly (nullopt: it can). A pattern oneDNN would
// only approximate is a decline, never a silent approximation.
std::optional<std::string> onednn_declines(const Region& region);
Expected<KernelSource> emit_onednn(const Region& region, const EmitOptions& options);

} // namespace fusor::x86
