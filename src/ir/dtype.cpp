#include "fusor/dtype.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace fusor {
namespace {

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr std::array<DTypeName, 5> kNames{{{DType::f32, "f32"},
                                           {DType::f16, "f16"},
                                           {DType::bf16, "bf16"},
                                           {DType::fp8_e4m3, "fp8_e4m3"},
                                           {DType::fp8_e5m2, "fp8_e5m2"}}};

// Round |x| to a binary float with `mantissa_bits` explicit fraction bits and minimum
// normal exponent `min_exp` (subnormals below it), round-to-nearest-even. Range is
// handled by the caller.
double round_mantissa(double x, int mantissa_bits, int min_exp) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e); // x = f * 2^e, f in [0.5, 1)
  const int exp = std::max(e - 1, min_exp);
  const double quantum = std::ldexp(1.0, exp - mantissa_bits);
  return std::nearbyint(x / quantum) * quantum; // default rounding mode is nearest-even
}

} // namespace

std::string_view dtype_name(DType dtype) {
  for (const auto& row : kNames)
    if (row.dtype == dtype) return row.name;
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& row : kNames)
    if (row.name == name) return row.dtype;
  return std::nullopt;
}

double round_to_storage(double x, DType dtype) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (std::isnan(x)) return x;
  switch (dtype) {
  case DType::f32: return static_cast<double>(static_cast<float>(x));
  case DType::f16: {
    const double r = round_mantissa(x, 10, -14);
    return std::fabs(r) > 65504.0 ? std::copysign(inf, x) : r;
  }
  case DType::bf16: {
    // bf16 shares f32's exponent range (7 fraction bits). Round x directly: going through
    // f32 first rounds twice and can land on the wrong side of a tie (1 + 2^-8 + 2^-30
    // must give 1 + 2^-7). For f32 inputs this equals float_to_bf16_bits.
    const double r = round_mantissa(x, 7, -126);
    return std::fabs(r) > 3.3895313892515355e38 ? std::copysign(inf, x) : r;
  }
  case DType::fp8_e4m3: {
    // OCP e4m3fn: no infinities, max 448; out-of-range values become NaN (OCP non-saturating).
    if (std::isinf(x)) return std::numeric_limits<double>::quiet_NaN();
    const double r = round_mantissa(x, 3, -6);
    return std::fabs(r) > 448.0 ? std::numeric_limits<double>::quiet_NaN() : r;
  }
  case DType::fp8_e5m2: {
    const double r = round_mantissa(x, 2, -14);
    return std::fabs(r) > 57344.0 ? std::copysign(inf, x) : r;
  }
  }
  return x;
}

std::uint16_t float_to_half_bits(float x) {
  const double r = round_to_storage(static_cast<double>(x), DType::f16);
  const std::uint32_t sign = (std::bit_cast<std::uint32_t>(x) >> 16) & 0x8000u;
  if (std::isnan(r)) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (std::isinf(r)) return static_cast<std::uint16_t>(sign | 0x7c00u);
  const double a = std::fabs(r);
  if (a == 0.0) return static_cast<std::uint16_t>(sign);
  int e = 0;
  std::frexp(a, &e);
  int exp = e - 1;
  if (exp < -14) // subnormal: value = m * 2^-24
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::ldexp(a, 24)));
  const auto mant = static_cast<std::uint32_t>(std::ldexp(a, 10 - exp)) & 0x3ffu;
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp + 15) << 10) | mant);
}

float half_bits_to_float(std::uint16_t bits) {
  const bool neg = (bits & 0x8000u) != 0;
  const int exp = (bits >> 10) & 0x1f;
  const int mant = bits & 0x3ff;
  double v = 0.0;
  if (exp == 0)
    v = std::ldexp(static_cast<double>(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
  return static_cast<float>(neg ? -v : v);
}

std::uint16_t float_to_bf16_bits(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x40u); // keep it a quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);               // nearest-even
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

} // namespace fusor
