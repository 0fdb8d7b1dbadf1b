// The oneDNN vendor lane: exact patterns only (declines name the reason), and every kernel
// it builds passes the oracle like any emitted one.
#include <gtest/gtest.h>

#include <filesystem>

#include "fusor/operand_gen.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
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
    // Where the build found oneDNN, so a prefix outside the compiler's search path works too.
    ASSERT_EQ(src->include_dirs.size(), 1u);
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(src->include_dirs[0]) / "oneapi/dnnl/dnnl.h"));
    ASSERT_EQ(src->library_dirs.size(), 1u);
    auto artifact = x86.compile(*src);
    ASSERT_TRUE(artifact.ok()) << artifact.error().str();
    auto report = verify(region, x86, *artifact);
    ASSERT_TRUE(report.ok()) << report.error().str();
    EXPECT_TRUE(report->verified) << text << "\n" << report->summary();
  }
}

// One kernel keeps a primitive per shape (up to 8): calls alternating between shapes, more
// shapes than it keeps (the oldest are rebuilt), each get their own shape's result.
TEST(OneDnnLane, AlternatingShapesEachRunTheirOwnPrimitive) {
  const Candidate* lane = onednn(RegionKind::fused);
  if (!lane) GTEST_SKIP() << "oneDNN was not found at build time: the x86_onednn lane is not registered";
  testing::use_test_cache();
  const Region region = parse_region("fused { epilogue = [bias, gelu_erf]; residual = true }").value();
  ExecuteOptions options;
  options.candidate = lane;
  options.reference_fallback = false;
  for (int round = 0; round < 2; ++round)
    for (std::int64_t s = 1; s <= 10; ++s) {
      ProblemShape dims;
      dims.M = 3 * s, dims.N = 5 + s, dims.K = 17 - s;
      const auto operands = make_operands(region, dims, static_cast<std::uint64_t>(s), 1.0);
      auto ref = evaluate_reference(region, operands);
      ASSERT_TRUE(ref.ok()) << ref.error().str();
      auto out = execute_on_target(*builtin_registry().target("x86"), region, operands, options);
      ASSERT_TRUE(out.ok()) << out.error().str();
      EXPECT_EQ(out->tag, "x86_onednn");
      EXPECT_TRUE(testing::all_close(out->output, *ref, 1e-4)) << "round " << round << " shape " << s;
    }
}

} // namespace
} // namespace fusor
