// What the x86 lane tests share: regions from text, the x86 target (kernels cached in the
// build tree), a lane's candidate by name, and problem shapes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "support/compare.hpp"

namespace fusor::testing {

inline Region region_of(const std::string& text) {
  auto r = parse_region(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().str());
  return r.value();
}

inline const Target& x86() {
  use_test_cache();
  const Target* t = builtin_registry().target("x86");
  EXPECT_NE(t, nullptr);
  return *t;
}

// The x86 candidate `name` for `kind` (nullptr when that lane does not register it).
inline const Candidate* x86_candidate(RegionKind kind, std::string_view name) {
  for (const Candidate* c : builtin_registry().candidates("x86", kind))
    if (c->name == name) return c;
  return nullptr;
}

inline ProblemShape gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  ProblemShape s;
  s.M = m, s.N = n, s.K = k;
  return s;
}

// dv < 0: Dv = D.
inline ProblemShape attention_dims(std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t m,
                                   std::int64_t nk, std::int64_t d, std::int64_t dv = -1) {
  ProblemShape s;
  s.batch = batch, s.heads = heads, s.kv_heads = kv_heads, s.M = m, s.Nk = nk, s.D = d, s.Dv = dv < 0 ? d : dv;
  return s;
}

inline ProblemShape elementwise(Shape shape) {
  ProblemShape s;
  s.output = std::move(shape);
  return s;
}

} // namespace fusor::testing
