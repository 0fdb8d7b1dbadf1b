// What fusor-cuda-sandbox says besides the x86 sandbox's exit statuses: one
// "FUSOR_CUDA_SANDBOX <what> call=I ..." line on stderr per stop.
#pragma once

#include <string_view>

namespace fusor::cuda::sandbox_protocol {

inline constexpr std::string_view kLinePrefix = "FUSOR_CUDA_SANDBOX ";
inline constexpr int kExitUnavailable = 86; // no driver or no device in the child

} // namespace fusor::cuda::sandbox_protocol
