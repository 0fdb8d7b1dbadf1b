// Elementwise comparison used by lane tests: |out - ref| <= atol + rtol·|ref|, NaN == NaN,
// infinities must match exactly.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "fusor/tensor.hpp"

namespace fusor::testing {

inline ::testing::AssertionResult all_close(const Tensor& out, const Tensor& ref, double atol = 1e-3,
                                            double rtol = 1e-5) {
  if (out.shape != ref.shape)
    return ::testing::AssertionFailure() << "shape " << shape_str(out.shape) << " vs " << shape_str(ref.shape);
  double worst = 0;
  for (size_t i = 0; i < out.data.size(); ++i) {
    const double o = out.data[i], r = ref.data[i];
    if (std::isnan(r) && std::isnan(o)) continue;
    if (std::isinf(r) || std::isinf(o)) {
      if (o == r) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << o << " vs " << r;
    }
    const double err = std::fabs(o - r);
    if (!(err <= atol + rtol * std::fabs(r)))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << o << " vs reference " << r << " (err " << err << ")";
    worst = std::max(worst, err);
  }
  return ::testing::AssertionSuccess() << "max abs err " << worst;
}

// Points the on-disk kernel cache at the build tree so tests never touch ~/.cache.
inline void use_test_cache() { setenv("FUSOR_CACHE_DIR", FUSOR_TEST_CACHE_DIR, 0); }

} // namespace fusor::testing
