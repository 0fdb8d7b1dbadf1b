// How a CUDA kernel is launched. Each emitted kernel states its launch rule in one line of
// its source (`// fusor-launch: gemm threads=128 tile_m=128 tile_n=128 smem=75776`); the
// in-process runner and the sandbox child both turn that rule plus a call's ABI dims into
// a grid, so the two can never launch the same kernel differently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "fusor/error.hpp"

namespace fusor::cuda {

struct LaunchSpec {
  // elementwise: grid-stride over dims[0] elements; rows: `tile_m` rows of dims[0] per
  // block; gemm: tile_m × tile_n output tiles of M=dims[0], N=dims[1] (tile_n 0: one block
  // spans whole rows); attention: tile_m query rows (dims[3]) × batch·heads (dims[0]·dims[1]);
  // library: no grid of ours, a vendor library call (cuBLASLt) on M=dims[0], N=dims[1].
  enum class Rule { elementwise, rows, gemm, attention, library };
  Rule rule = Rule::elementwise;
  int threads = 256;
  int tile_m = 1;
  int tile_n = 0;
  int smem = 0; // dynamic shared memory bytes
  bool operator==(const LaunchSpec&) const = default;
};

std::string launch_line(const LaunchSpec& spec);
// The spec stated in a kernel's source; E_INTERNAL when the line is missing or malformed.
Expected<LaunchSpec> parse_launch(std::string_view source);

struct Geometry {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block = 1;
  unsigned smem = 0;
  bool empty = false; // nothing to compute (a zero-sized output): no launch
};

// E_SHAPE_MISMATCH when the dims do not fit the launch limits.
Expected<Geometry> geometry(const LaunchSpec& spec, std::span<const std::int64_t> dims);

} // namespace fusor::cuda
