// Every region kind runs natively on x86 and matches the reference evaluator on the
// SPEC §4 fixed probes and on ragged shapes.
#include <gtest/gtest.h>

#include "fusor/operand_gen.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "support/compare.hpp"
#include "support/x86_lanes.hpp"

namespace fusor {
namespace {

using testing::attention_dims;
using testing::elementwise;
using testing::gemm;
using testing::region_of;
using testing::x86;

void expect_matches_reference(const Region& region, const ProblemShape& dims, std::uint64_t seed, double scale) {
  const auto operands = make_operands(region, dims, seed, scale);
  auto ref = evaluate_reference(region, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  auto out = execute_on_target(x86(), region, operands, {.emit = {}, .reference_fallback = false});
  ASSERT_TRUE(out.ok()) << print_region(region) << ": " << out.error().str();
  EXPECT_NE(out->tag, "reference");
  EXPECT_TRUE(testing::all_close(out->output, *ref, testing::storage_atol(region)))
      << print_region(region) << " at dims M=" << dims.M << " N=" << dims.N << " K=" << dims.K;
}

const std::int64_t kRagged[] = {1, 7, 17, 129};

TEST(X86Lane, FusedEveryFeatureCombination) {
  // Prologue × epilogue × residual × reduction × layouts, each on the SPEC probe and a ragged shape.
  const char* prologues[] = {"[]", "[relu]", "[gelu, tanh]"};
  const char* epilogues[] = {"[]", "[bias]", "[bias, gelu]", "[relu, bias, silu]", "[gelu_erf, sigmoid]"};
  const char* reductions[] = {"none", "rmsnorm", "softmax", "layer_norm"};
  const char* layouts[] = {"row_major", "col_major"};
  int ran = 0;
  for (const char* pro : prologues)
    for (const char* epi : epilogues)
      for (bool residual : {false, true})
        for (const char* red : reductions) {
          if (residual && std::string(red) != "none") continue;
          if (std::string(pro) == "[]" && std::string(epi) == "[]" && !residual && std::string(red) == "none") continue;
          const char* la = layouts[ran % 2];
          const char* lb = layouts[(ran / 2) % 2];
          const std::string text = std::string("fused { prologue = ") + pro + "; epilogue = " + epi +
                                   "; residual = " + (residual ? "true" : "false") + "; reduction = " + red +
                                   "; a_layout = " + la + "; b_layout = " + lb + " }";
          const Region region = region_of(text);
          expect_matches_reference(region, gemm(8, 16, 12), 1, 0.2);
          expect_matches_reference(region, gemm(17, 13, 31), 2, 0.5);
          ++ran;
        }
  EXPECT_GT(ran, 60);
}

TEST(X86Lane, FusedRaggedShapesBothLayouts) {
  for (const char* la : {"row_major", "col_major"})
    for (const char* lb : {"row_major", "col_major"}) {
      const Region region = region_of(std::string("fused { prologue = [relu]; epilogue = [bias, gelu]; residual = "
                                                  "true; a_layout = ") +
                                      la + "; b_layout = " + lb + " }");
      for (auto m : kRagged)
        for (auto n : kRagged)
          for (auto k : kRagged) expect_matches_reference(region, gemm(m, n, k), 3, 0.5);
    }
}

TEST(X86Lane, FusedWideRowsWithReduction) {
  for (const char* red : {"softmax", "rmsnorm", "layer_norm"}) {
    const Region region = region_of(std::string("fused { epilogue = [bias]; reduction = ") + red + " }");
    expect_matches_reference(region, gemm(7, 4096, 17), 4, 0.5);
    expect_matches_reference(region, gemm(3, 1000, 129), 5, 0.5);
  }
}

TEST(X86Lane, MatmulTransposesAndHalfStorage) {
  for (const char* storage : {"f32", "f16", "bf16"})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Region region =
            region_of(std::string("matmul { storage = ") + storage + "; transpose_a = " + (ta ? "true" : "false") +
                      "; transpose_b = " + (tb ? "true" : "false") + " }");
        expect_matches_reference(region, gemm(32, 16, 32), 6, 0.4); // SPEC bare-GEMM probe
        expect_matches_reference(region, gemm(17, 129, 7), 7, 0.4);
        expect_matches_reference(region, gemm(16, 16, 16), 8, 0.4); // M == N == K: flags, not shapes
      }
}

TEST(X86Lane, GatedAllActivationsAndStorage) {
  for (const char* act : {"silu", "gelu", "gelu_erf", "relu", "sigmoid", "tanh"})
    for (const char* storage : {"f32", "bf16"}) {
      const Region region = region_of(std::string("gated { gate_act = ") + act + "; storage = " + storage + " }");
      expect_matches_reference(region, gemm(8, 16, 12), 9, 0.2);
      for (auto m : kRagged) expect_matches_reference(region, gemm(m, 17, 129), 10, 0.3);
    }
}

TEST(X86Lane, AttentionShapesCausalAndNot) {
  for (bool causal : {false, true})
    for (const char* storage : {"f32", "f16"}) {
      const Region region = region_of(std::string("attention { scale = 0.125; causal = ") +
                                      (causal ? "true" : "false") + "; storage = " + storage + " }");
      expect_matches_reference(region, attention_dims(0, 1, 1, 8, 8, 16), 11, 1.0); // SPEC probe
      for (std::int64_t d : {16, 64, 128}) {
        expect_matches_reference(region, attention_dims(0, 1, 1, 17, 4096, d), 12, 1.0);
        expect_matches_reference(region, attention_dims(0, 1, 1, 129, 7, d), 13, 1.0);
      }
      expect_matches_reference(region, attention_dims(2, 4, 2, 33, 65, 64), 14, 1.0); // batch, heads, GQA
      expect_matches_reference(region, attention_dims(1, 6, 3, 9, 17, 16), 15, 1.0);  // rank-3 heads, GQA
    }
}

TEST(X86Lane, AttentionTransposedOperands) {
  const Region region = region_of("attention { scale = 0.3; causal = true; q_transposed = true; k_transposed = true }");
  expect_matches_reference(region, attention_dims(0, 1, 1, 17, 29, 16), 16, 1.0);
}

TEST(X86Lane, PointwiseDagWithBroadcast) {
  const Region region = region_of(
      "pointwise { inputs = [x, y, z]; t0 = mul(x, y); t1 = sigmoid(t0); t2 = add(t1, z); t3 = maximum(t2, 0.25); "
      "output = t3 }");
  expect_matches_reference(region, elementwise({8, 16}), 17, 1.0);
  // Trailing-axis broadcast: y is [16], z is [8, 1].
  auto operands = make_operands(region, elementwise({8, 16}), 18, 1.0);
  operands[1] = Tensor({16}, std::vector<float>(operands[1].data.begin(), operands[1].data.begin() + 16));
  operands[2] = Tensor({8, 1}, std::vector<float>(operands[2].data.begin(), operands[2].data.begin() + 8));
  auto ref = evaluate_reference(region, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  auto out = execute_on_target(x86(), region, operands, {.emit = {}, .reference_fallback = false});
  ASSERT_TRUE(out.ok()) << out.error().str();
  EXPECT_TRUE(testing::all_close(out->output, *ref));
}

TEST(X86Lane, PointwiseEveryOp) {
  for (const auto& info : op_table()) {
    if (!info.in_pointwise_vocabulary) continue;
    const std::string call = info.arity == 2 ? std::string(info.name) + "(x, y)" : std::string(info.name) + "(x)";
    const Region region = region_of("pointwise { inputs = [x, y]; t0 = " + call + "; t1 = mul(t0, 1.5); output = t1 }");
    expect_matches_reference(region, elementwise({7, 129}), 19, 2.0);
  }
}

TEST(X86Lane, PointwiseReduceAll) {
  for (const char* reduce : {"sum", "mean", "amax", "amin"}) {
    const Region region =
        region_of(std::string("pointwise_reduce { inputs = [x]; t0 = exp(x); output = t0; reduce = ") + reduce + " }");
    expect_matches_reference(region, elementwise({8, 16}), 20, 1.0);
    expect_matches_reference(region, elementwise({3, 5, 129}), 21, 1.0);
  }
}

TEST(X86Lane, NormChains) {
  for (const char* norm : {"rmsnorm", "layer_norm", "softmax"})
    for (bool res : {false, true})
      for (bool w : {false, true}) {
        const Region region =
            region_of(std::string("norm_chain { norm = ") + norm + "; add_residual = " + (res ? "true" : "false") +
                      "; weight = " + (w ? "true" : "false") + "; bias = " + (w ? "true" : "false") + " }");
        expect_matches_reference(region, elementwise({8, 16}), 22, 1.0);
        expect_matches_reference(region, elementwise({17, 4096}), 23, 1.0);
      }
}

TEST(X86Lane, SpecPolicies) {
  const Region region = region_of("fused { epilogue = [bias, gelu] }");
  const auto operands = make_operands(region, gemm(17, 13, 31), 24, 0.5);
  auto ref = evaluate_reference(region, operands);
  ASSERT_TRUE(ref.ok());
  for (SpecPolicy policy : {SpecPolicy::static_dims, SpecPolicy::bucket, SpecPolicy::dynamic}) {
    ExecuteOptions options{.emit = {.spec = policy, .dims = gemm(17, 13, 31), .options = {}},
                           .reference_fallback = false};
    auto out = execute_on_target(x86(), region, operands, options);
    ASSERT_TRUE(out.ok()) << out.error().str();
    EXPECT_TRUE(testing::all_close(out->output, *ref));
  }
  // A static kernel refuses other dims instead of computing garbage.
  ExecuteOptions fixed{.emit = {.spec = SpecPolicy::static_dims, .dims = gemm(8, 8, 8), .options = {}},
                       .reference_fallback = false};
  auto wrong = execute_on_target(x86(), region, operands, fixed);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, ErrorCode::shape_mismatch);
}

TEST(X86Lane, DeclinesToReferenceWithTag) {
  const Region region = region_of("fused { epilogue = [relu]; storage = fp8_e4m3 }");
  const auto operands = make_operands(region, gemm(8, 16, 12), 25, 0.2);
  auto out = execute_on_target(x86(), region, operands);
  ASSERT_TRUE(out.ok()) << out.error().str();
  EXPECT_EQ(out->tag, "reference");
  EXPECT_NE(out->note.find("E_EMIT_UNSUPPORTED"), std::string::npos);
  auto strict = execute_on_target(x86(), region, operands, {.emit = {}, .reference_fallback = false});
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.error().code, ErrorCode::emit_unsupported);
}

TEST(X86Lane, MissingBiasIsCleanError) {
  const Region region = region_of("fused { epilogue = [bias, gelu]; residual = true }");
  auto operands = make_operands(region, gemm(8, 16, 12), 26, 0.2);
  operands.resize(2);
  auto out = execute_on_target(x86(), region, operands);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::fused_epilogue_missing_operand);
}

} // namespace
} // namespace fusor
