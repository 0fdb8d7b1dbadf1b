// Storage dtypes: operands are stored in these; arithmetic never is.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fusor {

enum class DType { f32, f16, bf16, fp8_e4m3, fp8_e5m2 };

std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);

// The value `x` takes once stored in `dtype` and read back (round-to-nearest-even;
// f16/e5m2 overflow to ±inf, e4m3 (the "fn" variant: no inf) saturates to NaN past 448+).
double round_to_storage(double x, DType dtype);

// Bit conversions used by kernels' host-side packing and by .npy f16 I/O.
std::uint16_t float_to_half_bits(float x);
float half_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16_bits(float x);
float bf16_bits_to_float(std::uint16_t bits);

} // namespace fusor
