// Broadcast reads for the x86 lanes' pointwise kinds: each input reaches its element through
// the strides the ABI passes (docs/abi.md), with fast modes for contiguous and scalar inputs.
#pragma once

#include <cstddef>
#include <string>

namespace fusor::x86 {

// C helpers fusor_bcast_mode (0 contiguous, 1 scalar, 2 strided) and fusor_bcast_index.
std::string broadcast_helpers();
// Statements binding input i: pointer x<i>, strides st<i>, mode<i> (needs rank and shape).
std::string broadcast_input(size_t i);
// The expression reading input i at flat output index `index`.
std::string load_broadcast(int i, const std::string& index);

} // namespace fusor::x86
