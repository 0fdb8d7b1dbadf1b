// What the vector-math tests of the x86 lanes share: dense input grids, the maximum error of
// a helper's outputs against a double function, and a kernel of its own that applies one
// expression of the 16-lane (AVX-512) or 8-lane (AVX2) helpers to every input.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/c_renderer.hpp"
#include "fusor/toolchain.hpp"
#include "support/x86_lanes.hpp"

namespace fusor::testing {

struct ErrorStats {
  double max_abs = 0, max_rel = 0;
};

template <class Values> ErrorStats measure(const std::vector<float>& xs, const Values& got, double (*ref)(double)) {
  ErrorStats e;
  for (size_t i = 0; i < xs.size() && i < got.size(); ++i) {
    const double r = ref(xs[i]);
    const double err = std::fabs(got[i] - r);
    e.max_abs = std::max(e.max_abs, err);
    if (std::fabs(r) > 1e-30) e.max_rel = std::max(e.max_rel, err / std::fabs(r));
  }
  return e;
}

// n + 1 evenly spaced floats from lo to hi.
inline std::vector<float> grid(double lo, double hi, int n) {
  std::vector<float> xs;
  for (int i = 0; i <= n; ++i) xs.push_back(static_cast<float>(lo + (hi - lo) * i / n));
  return xs;
}

// `expr` over `v` (a vector of `lanes` floats: 16 or 8) with that width's helpers, applied
// to every input by a kernel of its own (masked at the tail); the outputs.
inline std::vector<float> run_vector_expr(int lanes, const std::string& expr, const std::vector<float>& xs) {
  const bool wide = lanes == 16;
  KernelSource src;
  src.source = "#include <immintrin.h>\n#include <math.h>\n#include <stdint.h>\n#include <string.h>\n" +
               (wide ? codegen::render_avx512_math_helpers(codegen::c99_avx512_dialect())
                     : codegen::render_avx2_math_helpers(codegen::c99_avx2_dialect())) +
               "int fusor_kernel(const void* const* operands, float* restrict out, const int64_t* dims) {\n"
               "  const float* x = (const float*)operands[0];\n"
               "  for (int64_t i = 0; i < dims[0]; i += " +
               std::to_string(lanes) + ") {\n" +
               (wide ? "    const __mmask16 k = dims[0] - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (dims[0] - "
                       "i)) - 1u);\n"
                       "    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);\n"
                       "    _mm512_mask_storeu_ps(out + i, k, " +
                           expr + ");\n"
                     : "    const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(dims[0] - i < 8 ? dims[0] - "
                       "i : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));\n"
                       "    const __m256 v = _mm256_maskload_ps(x + i, k);\n"
                       "    _mm256_maskstore_ps(out + i, k, " +
                           expr + ");\n") +
               "  }\n  return 0;\n}\n";
  src.entry = "fusor_kernel";
  src.lang = "c";
  src.target = "x86";
  src.lane = wide ? "x86_avx512" : "x86_avx2";
  src.region_text = src.lane + " helper test: " + expr;
  auto art = x86().compile(src);
  EXPECT_TRUE(art.ok()) << (art.ok() ? "" : art.error().str());
  if (!art.ok()) return {};
  auto lib = SharedLibrary::load(art->path);
  EXPECT_TRUE(lib.ok());
  auto sym = lib->symbol("fusor_kernel");
  EXPECT_TRUE(sym.ok());
  using Fn = int (*)(const void* const*, float*, const std::int64_t*);
  std::vector<float> out(xs.size());
  const void* ops[] = {xs.data()};
  const std::int64_t dims[] = {static_cast<std::int64_t>(xs.size())};
  EXPECT_EQ(reinterpret_cast<Fn>(*sym)(ops, out.data(), dims), 0);
  return out;
}

} // namespace fusor::testing
