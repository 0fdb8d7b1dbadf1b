// Storage dtypes: round-to-nearest-even, overflow, subnormals, NaN, bit conversions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "fusor/dtype.hpp"

using namespace fusor;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double p2(int e) { return std::ldexp(1.0, e); }

// Every finite non-negative value of a small float format, built from its definition
// (bias 2^(E-1)-1, subnormals at exponent field 0), with whether its mantissa is even.
struct Grid {
  std::vector<double> values;
  std::vector<bool> even;
};
Grid make_grid(int exp_bits, int man_bits, bool fn_variant) {
  Grid g;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int top = (1 << exp_bits) - 1; // all-ones exponent: inf/NaN, except e4m3fn
  for (int e = 0; e <= top; ++e)
    for (int m = 0; m < (1 << man_bits); ++m) {
      if (e == top && !fn_variant) continue;
      if (e == top && m == (1 << man_bits) - 1) continue; // e4m3fn: S.1111.111 is NaN
      const double frac = static_cast<double>(m) / (1 << man_bits);
      g.values.push_back(e == 0 ? frac * p2(1 - bias) : (1.0 + frac) * p2(e - bias));
      g.even.push_back(m % 2 == 0);
    }
  return g;
}

// Nearest grid value to x >= 0, ties to the even mantissa (brute force).
double nearest(const Grid& g, double x) {
  size_t best = 0;
  for (size_t i = 1; i < g.values.size(); ++i) {
    const double d = std::fabs(g.values[i] - x), bd = std::fabs(g.values[best] - x);
    if (d < bd || (d == bd && g.even[i])) best = i;
  }
  return g.values[best];
}

} // namespace

TEST(DType, NamesRoundTrip) {
  for (auto d : {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3, DType::fp8_e5m2}) {
    ASSERT_TRUE(dtype_from_name(dtype_name(d)).has_value());
    EXPECT_EQ(*dtype_from_name(dtype_name(d)), d);
  }
  EXPECT_FALSE(dtype_from_name("fp16").has_value());
  EXPECT_FALSE(dtype_from_name("F32").has_value());
}

TEST(DType, F32RoundsDoublesToNearestFloat) {
  EXPECT_EQ(round_to_storage(1.0 + p2(-24), DType::f32), 1.0);               // tie → even
  EXPECT_EQ(round_to_storage(1.0 + 3 * p2(-24), DType::f32), 1.0 + p2(-22)); // tie → even (up)
  EXPECT_EQ(round_to_storage(0.1, DType::f32), static_cast<double>(0.1f));
  EXPECT_TRUE(std::isnan(round_to_storage(kNaN, DType::f32)));
}

TEST(DType, F16RoundToNearestEven) {
  EXPECT_EQ(round_to_storage(1.0 + p2(-11), DType::f16), 1.0);                     // halfway, 1 is even
  EXPECT_EQ(round_to_storage(1.0 + 3 * p2(-11), DType::f16), 1.0 + p2(-9));        // halfway, up to even
  EXPECT_EQ(round_to_storage(1.0 + p2(-11) + p2(-20), DType::f16), 1.0 + p2(-10)); // above halfway
  EXPECT_EQ(round_to_storage(-1.0 - p2(-11), DType::f16), -1.0);
  EXPECT_EQ(round_to_storage(0.1, DType::f16), 0.0999755859375);
}

TEST(DType, F16RangeAndSubnormals) {
  EXPECT_EQ(round_to_storage(65504.0, DType::f16), 65504.0);
  EXPECT_EQ(round_to_storage(65519.0, DType::f16), 65504.0);
  EXPECT_EQ(round_to_storage(65520.0, DType::f16), kInf); // halfway to 65536, which overflows
  EXPECT_EQ(round_to_storage(-65520.0, DType::f16), -kInf);
  EXPECT_EQ(round_to_storage(1e10, DType::f16), kInf);
  EXPECT_EQ(round_to_storage(kInf, DType::f16), kInf);
  EXPECT_EQ(round_to_storage(p2(-24), DType::f16), p2(-24)); // smallest subnormal
  EXPECT_EQ(round_to_storage(p2(-25), DType::f16), 0.0);     // halfway to it, 0 is even
  EXPECT_EQ(round_to_storage(1.5 * p2(-25), DType::f16), p2(-24));
  EXPECT_EQ(round_to_storage(3 * p2(-25), DType::f16), 2 * p2(-24));             // subnormal tie → even
  EXPECT_EQ(round_to_storage(p2(-14) - p2(-24), DType::f16), p2(-14) - p2(-24)); // largest subnormal
  EXPECT_TRUE(std::signbit(round_to_storage(-p2(-30), DType::f16)));             // -0 keeps its sign
  EXPECT_TRUE(std::isnan(round_to_storage(kNaN, DType::f16)));
}

TEST(DType, Bf16RoundToNearestEven) {
  EXPECT_EQ(round_to_storage(1.0 + p2(-8), DType::bf16), 1.0);
  EXPECT_EQ(round_to_storage(1.0 + 3 * p2(-8), DType::bf16), 1.0 + p2(-6));
  // Just above the tie in double but a tie once rounded to f32: rounding must be direct.
  EXPECT_EQ(round_to_storage(1.0 + p2(-8) + p2(-30), DType::bf16), 1.0 + p2(-7));
  EXPECT_EQ(round_to_storage(3.3895313892515355e38, DType::bf16), 3.3895313892515355e38); // max
  EXPECT_EQ(round_to_storage(static_cast<double>(std::numeric_limits<float>::max()), DType::bf16), kInf);
  EXPECT_EQ(round_to_storage(-1e39, DType::bf16), -kInf);
  EXPECT_EQ(round_to_storage(p2(-133), DType::bf16), p2(-133)); // smallest subnormal
  EXPECT_EQ(round_to_storage(p2(-134), DType::bf16), 0.0);
  EXPECT_TRUE(std::isnan(round_to_storage(kNaN, DType::bf16)));
}

TEST(DType, Bf16BitsRoundToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80); // rounds past bf16 max
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits must not truncate to infinity.
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::bit_cast<float>(0x7f800001u)))));
}

TEST(DType, HalfBitsKnownValues) {
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_half_bits(0x1p-14f), 0x0400);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(1e6f), 0x7c00);
  EXPECT_EQ(half_bits_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_bits_to_float(0x03ff), static_cast<float>(1023 * p2(-24)));
  EXPECT_EQ(half_bits_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_bits_to_float(0xfc01)));
  const auto nan_bits = float_to_half_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan_bits & 0x7c00, 0x7c00);
  EXPECT_NE(nan_bits & 0x03ff, 0);
}

TEST(DType, HalfAndBf16BitsRoundTripAllPatterns) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float h = half_bits_to_float(bits);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x03ff) != 0) {
      EXPECT_TRUE(std::isnan(h)) << std::hex << b;
      const auto back = float_to_half_bits(h);
      EXPECT_TRUE((back & 0x7c00) == 0x7c00 && (back & 0x03ff) != 0) << std::hex << b;
    } else {
      EXPECT_EQ(float_to_half_bits(h), bits) << std::hex << b;
      EXPECT_EQ(round_to_storage(h, DType::f16), h) << std::hex << b; // every half value is a fixed point
    }
    const float f = bf16_bits_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(f)))) << std::hex << b;
    } else {
      EXPECT_EQ(float_to_bf16_bits(f), bits) << std::hex << b;
      EXPECT_EQ(round_to_storage(f, DType::bf16), f) << std::hex << b;
    }
  }
}

// For random x: the result is representable and no other half value is closer; on a tie
// the mantissa is even. The neighbours come from the (separately checked) bit patterns.
TEST(DType, F16AndBf16AreNearestOnRandomValues) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> half_exp(-27, 16), bf_exp(-136, 127);
  for (int i = 0; i < 20000; ++i) {
    for (bool bf : {false, true}) {
      const int man_bits = bf ? 7 : 10;
      double m = mant(rng);
      // Every other sample sits on a multiple of half a quantum, so half of those are ties.
      if (i % 2 == 0) m = std::ldexp(std::round(std::ldexp(m, man_bits + 1)), -(man_bits + 1));
      const double x = std::ldexp(m, bf ? bf_exp(rng) : half_exp(rng));
      const DType d = bf ? DType::bf16 : DType::f16;
      const double r = round_to_storage(x, d);
      // Overflow exactly from max + half an ulp (a tie with the next power of two, odd max).
      const double overflow = bf ? std::ldexp(2.0 - p2(-8), 127) : 65520.0;
      EXPECT_EQ(std::isinf(r), x >= overflow) << x;
      if (std::isinf(r)) continue;
      const std::uint16_t bits =
          bf ? float_to_bf16_bits(static_cast<float>(r)) : float_to_half_bits(static_cast<float>(r));
      const auto decode = [&](std::uint16_t b) {
        return static_cast<double>(bf ? bf16_bits_to_float(b) : half_bits_to_float(b));
      };
      ASSERT_EQ(decode(bits), r) << x; // representable
      const double err = std::fabs(x - r);
      if (bits > 0) {
        const double lo = std::fabs(x - decode(static_cast<std::uint16_t>(bits - 1)));
        EXPECT_LE(err, lo) << x;
        if (err == lo) {
          EXPECT_EQ(bits % 2, 0) << x;
        }
      }
      const double next = decode(static_cast<std::uint16_t>(bits + 1));
      if (std::isfinite(next)) {
        const double hi = std::fabs(x - next);
        EXPECT_LE(err, hi) << x;
        if (err == hi) {
          EXPECT_EQ(bits % 2, 0) << x;
        }
      }
    }
  }
}

TEST(DType, Fp8E4m3) {
  EXPECT_EQ(round_to_storage(448.0, DType::fp8_e4m3), 448.0);
  EXPECT_EQ(round_to_storage(-448.0, DType::fp8_e4m3), -448.0);
  // 464 is halfway between 448 (mantissa 110, even) and 480 (the NaN code): ties to 448.
  EXPECT_EQ(round_to_storage(464.0, DType::fp8_e4m3), 448.0);
  // Anything that rounds past 448 is NaN: e4m3fn has no infinity (OCP, non-saturating).
  EXPECT_TRUE(std::isnan(round_to_storage(465.0, DType::fp8_e4m3)));
  EXPECT_TRUE(std::isnan(round_to_storage(-1e6, DType::fp8_e4m3)));
  EXPECT_TRUE(std::isnan(round_to_storage(kInf, DType::fp8_e4m3)));
  EXPECT_TRUE(std::isnan(round_to_storage(kNaN, DType::fp8_e4m3)));
  EXPECT_EQ(round_to_storage(p2(-9), DType::fp8_e4m3), p2(-9)); // smallest subnormal
  EXPECT_EQ(round_to_storage(p2(-10), DType::fp8_e4m3), 0.0);   // halfway → 0 (even)
  EXPECT_EQ(round_to_storage(1.0625, DType::fp8_e4m3), 1.0);    // 1 + 2^-4: halfway → even
  EXPECT_EQ(round_to_storage(1.1875, DType::fp8_e4m3), 1.25);   // 1 + 3·2^-4: halfway → even
}

TEST(DType, Fp8E5m2) {
  EXPECT_EQ(round_to_storage(57344.0, DType::fp8_e5m2), 57344.0);
  EXPECT_EQ(round_to_storage(61439.0, DType::fp8_e5m2), 57344.0);
  EXPECT_EQ(round_to_storage(61440.0, DType::fp8_e5m2), kInf); // halfway, 57344's mantissa is odd
  EXPECT_EQ(round_to_storage(-1e9, DType::fp8_e5m2), -kInf);
  EXPECT_EQ(round_to_storage(kInf, DType::fp8_e5m2), kInf);
  EXPECT_TRUE(std::isnan(round_to_storage(kNaN, DType::fp8_e5m2)));
  EXPECT_EQ(round_to_storage(p2(-16), DType::fp8_e5m2), p2(-16)); // smallest subnormal
  EXPECT_EQ(round_to_storage(1.125, DType::fp8_e5m2), 1.0);       // halfway → even
  EXPECT_EQ(round_to_storage(1.375, DType::fp8_e5m2), 1.5);
}

// Against every value of the format, enumerated from its definition.
TEST(DType, Fp8MatchesBruteForceNearest) {
  const Grid e4m3 = make_grid(4, 3, true), e5m2 = make_grid(5, 2, false);
  EXPECT_EQ(e4m3.values.back(), 448.0);
  EXPECT_EQ(e5m2.values.back(), 57344.0);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> exp(-18, 15);
  for (int i = 0; i < 5000; ++i) {
    const double x = std::ldexp(mant(rng), exp(rng));
    if (x < 464.0) {
      EXPECT_EQ(round_to_storage(x, DType::fp8_e4m3), nearest(e4m3, x)) << x;
      EXPECT_EQ(round_to_storage(-x, DType::fp8_e4m3), -nearest(e4m3, x)) << x;
    }
    if (x < 61440.0) {
      EXPECT_EQ(round_to_storage(x, DType::fp8_e5m2), nearest(e5m2, x)) << x;
    }
  }
  // Every grid value and every midpoint between neighbours.
  for (const Grid* g : {&e4m3, &e5m2}) {
    const DType d = g == &e4m3 ? DType::fp8_e4m3 : DType::fp8_e5m2;
    for (size_t i = 0; i < g->values.size(); ++i) {
      EXPECT_EQ(round_to_storage(g->values[i], d), g->values[i]);
      if (i + 1 < g->values.size()) {
        const double mid = (g->values[i] + g->values[i + 1]) / 2;
        EXPECT_EQ(round_to_storage(mid, d), g->even[i] ? g->values[i] : g->values[i + 1]) << mid;
      }
    }
  }
}
