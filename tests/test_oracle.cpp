// The oracle: every kind verifies on x86 across its probe families; budgets catch O(1)
// and single-element errors while passing correct rounding; certificates are reused only
// while they still apply; an unverified kernel never runs unless asked.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "fusor/cache.hpp"
#include "fusor/operand_gen.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "support/compare.hpp"

namespace fusor {
namespace {

const Target& x86() {
  testing::use_test_cache();
  return *builtin_registry().target("x86");
}

Artifact compile(const Region& region) {
  auto src = x86().emit(region, {});
  EXPECT_TRUE(src.ok());
  auto artifact = x86().compile(*src);
  EXPECT_TRUE(artifact.ok()) << artifact.error().str();
  return *artifact;
}

const char* kEveryKind[] = {
    "fused { prologue = [relu]; epilogue = [bias, gelu]; residual = true }",
    "fused { epilogue = [bias]; reduction = softmax; a_layout = col_major; b_layout = col_major }",
    "fused { epilogue = [bias, relu] }",
    "matmul { storage = bf16; transpose_b = true }",
    "attention { scale = 0.125; causal = true }",
    "attention { scale = 0.5; causal = false; storage = f16 }",
    "gated { gate_act = silu }",
    "gated { gate_act = relu }",
    "pointwise { inputs = [x, y, z]; t0 = mul(x, y); t1 = sigmoid(t0); t2 = maximum(t1, z); output = t2 }",
    "pointwise_reduce { inputs = [x, y]; t0 = sub(x, y); t1 = abs(t0); output = t1; reduce = amax }",
    "norm_chain { norm = layer_norm; add_residual = true; weight = true; bias = true }",
};

TEST(Oracle, EveryKindVerifiesOnX86WithAllFamilies) {
  for (const char* text : kEveryKind) {
    const Region region = parse_region(text).value();
    const Artifact artifact = compile(region);
    auto report = verify(region, x86(), artifact);
    ASSERT_TRUE(report.ok()) << report.error().str();
    EXPECT_TRUE(report->verified) << text << "\n" << report->summary();
    for (const char* family : {"fixed", "ragged", "exact_int", "special"})
      EXPECT_NE(std::find(report->families.begin(), report->families.end(), family), report->families.end())
          << text << " lacks family " << family;
    EXPECT_LT(report->elapsed_ms, 10000);
    std::cout << "verify " << text << ": " << report->probes << " probes, " << report->elapsed_ms << " ms, max abs err "
              << report->max_abs_err << "\n";
  }
}

TEST(Oracle, NormalisingKindsRunLargeAndMaskedFamilies) {
  const Region causal = parse_region("attention { causal = true }").value();
  auto report = verify(causal, x86(), compile(causal));
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->verified) << report->summary();
  for (const char* family : {"large", "masked"})
    EXPECT_NE(std::find(report->families.begin(), report->families.end(), family), report->families.end());
}

TEST(Oracle, ReportNamesTheFailingProbe) {
  const Region region = parse_region("fused { epilogue = [bias, gelu] }").value();
  auto src = x86().emit(region, {});
  ASSERT_TRUE(src.ok());
  KernelSource bad = *src;
  bad.source.replace(bad.source.find("v = (v + bv);"), 13, "v = (v + bv + 1.0f);");
  auto artifact = x86().compile(bad);
  ASSERT_TRUE(artifact.ok());
  auto report = verify(region, x86(), *artifact);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->verified);
  ASSERT_TRUE(report->failure.has_value());
  EXPECT_EQ(report->failure->family, "fixed");
  EXPECT_NE(report->failure->shape.find("M=8"), std::string::npos);
  EXPECT_GT(report->failure->seed, 0u);
  EXPECT_NE(report->failure->reason.find("mismatch"), std::string::npos);
  EXPECT_GT(report->max_abs_err, 0.5);
}

// ---- budgets: both sides for every budgeted (lane, dtype) -------------------------------

// What a correct lane may return: the reference passed through `dtype`'s rounding (the
// output precision such a lane can hold), plus f32 rounding.
std::vector<float> rounded(const std::vector<double>& ref, DType dtype) {
  std::vector<float> out;
  for (double r : ref) out.push_back(static_cast<float>(round_to_storage(r, dtype)));
  return out;
}

TEST(OracleBudget, CorrectRoundingPassesAndRealErrorsAreCaught) {
  struct Case {
    const char* lane;
    DType dtype;
    DType output_rounding; // the rounding a correct lane of this kind shows
  };
  const Case cases[] = {
      {"x86_avx512", DType::f32, DType::f32},      {"x86_avx512", DType::f16, DType::f32},
      {"x86_avx512", DType::bf16, DType::f32},     {"cuda_simt", DType::f32, DType::f32},
      {"cuda_mma_f16", DType::f16, DType::f16},    {"cuda_mma_bf16", DType::bf16, DType::bf16},
      {"other", DType::fp8_e4m3, DType::fp8_e4m3},
  };
  // A realistic output: attention-like values in [-3, 3].
  std::vector<double> ref;
  for (int i = 0; i < 4096; ++i) ref.push_back(3.0 * std::sin(0.37 * i + 0.1));
  for (const auto& c : cases) {
    SCOPED_TRACE(c.lane);
    const Budget b = lane_budget(c.lane, c.dtype);
    const double atol = std::max(1e-3, b.atol);
    const auto good = rounded(ref, c.output_rounding);
    EXPECT_TRUE(compare_outputs(good, ref, atol, b.rtol).ok) << "correct rounding must pass";
    auto shifted = good;
    for (auto& v : shifted) v += 1.0f; // an O(1) error everywhere
    EXPECT_FALSE(compare_outputs(shifted, ref, atol, b.rtol).ok);
    auto one_wrong = good;
    one_wrong[1234] += 1.0f; // a single wrong element
    const auto single = compare_outputs(one_wrong, ref, atol, b.rtol);
    EXPECT_FALSE(single.ok);
    EXPECT_EQ(single.first_bad, 1234);
    auto nan_one = good;
    nan_one[7] = NAN;
    EXPECT_FALSE(compare_outputs(nan_one, ref, atol, b.rtol).ok) << "NaN where the reference is finite";
  }
}

TEST(OracleBudget, NanMatchesNanAndInfinitiesMustMatch) {
  const std::vector<double> ref = {NAN, INFINITY, -INFINITY, 1.0};
  EXPECT_TRUE(compare_outputs(std::vector<float>{NAN, INFINITY, -INFINITY, 1.0f}, ref, 1e-3, 1e-5).ok);
  EXPECT_FALSE(compare_outputs(std::vector<float>{NAN, -INFINITY, -INFINITY, 1.0f}, ref, 1e-3, 1e-5).ok);
  EXPECT_FALSE(compare_outputs(std::vector<float>{NAN, 3e38f, -INFINITY, 1.0f}, ref, 1e-3, 1e-5).ok);
}

// ---- certificates --------------------------------------------------------------------------

TEST(OracleCertificate, StoredReusedAndInvalidatedByToleranceOrVersion) {
  const Region region = parse_region("fused { epilogue = [bias, tanh]; residual = true }").value();
  const Artifact artifact = compile(region);
  auto fresh = ensure_verified(x86(), region, artifact, 1e-3);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(fresh->verified);
  auto cert = load_certificate(artifact, artifact.source.lane, DType::f32, 1e-3);
  ASSERT_TRUE(cert.has_value());
  EXPECT_EQ(cert->to_json(), fresh->to_json());
  // A different caller tolerance is a different budget: the certificate does not apply.
  EXPECT_FALSE(load_certificate(artifact, artifact.source.lane, DType::f32, 1e-2).has_value());
  // An older verifier's certificate is re-verified, without recompiling.
  auto stale = *fresh;
  stale.verifier_version = kVerifierVersion - 1;
  ASSERT_TRUE(store_certificate(artifact, stale).ok());
  EXPECT_FALSE(load_certificate(artifact, artifact.source.lane, DType::f32, 1e-3).has_value());
  auto src = x86().emit(region, {});
  auto again = x86().compile(*src);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->cache_hit) << "re-verification must not recompile";
  auto reverified = ensure_verified(x86(), region, *again, 1e-3);
  ASSERT_TRUE(reverified.ok());
  EXPECT_EQ(reverified->verifier_version, kVerifierVersion);
  EXPECT_TRUE(load_certificate(artifact, artifact.source.lane, DType::f32, 1e-3).has_value());
}

TEST(OracleCertificate, RejectedKernelNeverRunsUnlessNoVerify) {
  const Region region = parse_region("fused { epilogue = [bias, sigmoid] }").value();
  const Artifact artifact = compile(region);
  auto report = ensure_verified(x86(), region, artifact, 1e-3);
  ASSERT_TRUE(report.ok());
  // Plant a rejection for the genuine artifact: the pipeline must not run it.
  VerifyReport rejected = *report;
  rejected.verified = false;
  rejected.failure = ProbeFailure{"fixed", "M=8 N=16 K=12", 1, "planted rejection"};
  ASSERT_TRUE(store_certificate(artifact, rejected).ok());
  ProblemShape dims;
  dims.M = 8, dims.N = 16, dims.K = 12;
  const auto operands = make_operands(region, dims, 3, 0.2);
  auto out = execute_on_target(x86(), region, operands);
  ASSERT_TRUE(out.ok()) << out.error().str();
  EXPECT_EQ(out->tag, "reference");
  EXPECT_NE(out->note.find("E_ORACLE_REJECTED"), std::string::npos);
  ExecuteOptions unverified;
  unverified.no_verify = true;
  auto forced = execute_on_target(x86(), region, operands, unverified);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->tag, artifact.source.lane + "+unverified");
  EXPECT_FALSE(forced->verified);
  // Restore a true certificate: the native lane runs, verified.
  ASSERT_TRUE(store_certificate(artifact, *report).ok());
  auto verified = execute_on_target(x86(), region, operands);
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(verified->tag, artifact.source.lane);
  EXPECT_TRUE(verified->verified);
  auto ref = evaluate_reference(region, operands);
  EXPECT_TRUE(testing::all_close(verified->output, *ref));
}

} // namespace
} // namespace fusor
