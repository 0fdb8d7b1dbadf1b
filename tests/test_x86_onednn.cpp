// The oneDNN vendor lane: exact patterns only (declines name the reason), and every kernel
// it builds passes the oracle like any emitted one.
#include <gtest/gtest.h>

#include "fusor/oracle.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "support/compare.hpp"
#include "targets/x86/x86_onednn.hpp"

namespace fusor {
namespace {

const Candidate* onednn(RegionKind kind) {
  for (const Candidate* c : builtin_registry().candidates("x86", kind))
    if (c->name == x86::kOneDnnLane) return c;
  return nullptr;
}

TEST(OneDnnLane, DeclinesWhatItWouldOnlyApproximate) {
  const std::pair<const char*, const char*> cases[] = {
      {"fused { prologue = [relu]; epilogue = [bias] }", "no prologue"},
      {"fused { epilogue = [bias]; reduction = softmax }", "no row reduction"},
      {"fused { epilogue = [tanh, bias] }", "adds bias before every post-op"},
      {"fused { epilogue = [bias]; storage = bf16 }", "f32 storage only"},
      {"matmul { }", "fused regions only"},
      {"fused { epilogue = [bias, relu] }", "turns NaN into 0"}, // found by the oracle's special probes
  };
  for (const auto& [text, why] : cases) {
    auto reason = x86::onednn_declines(parse_region(text).value());
    ASSERT_TRUE(reason.has_value()) << text;
    EXPECT_NE(reason->find(why), std::string::npos) << *reason;
  }
  EXPECT_FALSE(
      x86::onednn_declines(parse_region("fused { epilogue = [bias, gelu_erf, silu]; residual = true }").value()));
}

TEST(OneDnnLane, EveryExpressiblePatternPassesTheOracle) {
  const Candidate* lane = onednn(RegionKind::fused);
  if (!lane) GTEST_SKIP() << "oneDNN was not found at build time: the x86_onednn lane is not registered";
  testing::use_test_cache();
  const Target& x86 = *builtin_registry().target("x86");
  for (const char* text :
       {"fused { epilogue = [bias, gelu] }", "fused { epilogue = [bias, gelu_erf]; residual = true }",
        "fused { epilogue = [tanh]; a_layout = col_major; b_layout = col_major }",
        "fused { epilogue = [bias, sigmoid, tanh] }", "fused { epilogue = [silu]; residual = true }"}) {
    const Region region = parse_region(text).value();
    auto src = lane->emit(region, {});
    ASSERT_TRUE(src.ok()) << src.error().str();
    EXPECT_EQ(src->lane, "x86_onednn");
    auto artifact = x86.compile(*src);
    ASSERT_TRUE(artifact.ok()) << artifact.error().str();
    auto report = verify(region, x86, *artifact);
    ASSERT_TRUE(report.ok()) << report.error().str();
    EXPECT_TRUE(report->verified) << text << "\n" << report->summary();
  }
}

} // namespace
} // namespace fusor
