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
// The pointwise kinds' first statements: rank and shape from dims[dims_base...], every input
// bound (broadcast_input) and `contiguous` (all inputs unit-stride); with `rowwise`, also
// `rowwise` (each input unit-stride or a repeated last-axis row: needs fusor_row_bcast).
std::string pointwise_setup(size_t n_inputs, const std::string& dims_base, bool rowwise = false);
// The expression reading input i at flat output index `index`.
std::string load_broadcast(int i, const std::string& index);

} // namespace fusor::x86
