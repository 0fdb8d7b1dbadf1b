// The reference evaluator against hand computations and identities (SPEC §1–2).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "fusor/reference.hpp"

using namespace fusor;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor randn(Shape shape, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Tensor t(std::move(shape));
  for (float& x : t.data) x = scale * dist(rng);
  return t;
}

// The raw row-major array of the transpose of a [rows, cols] matrix.
Tensor transposed(const Tensor& t) {
  const auto rows = t.shape[0], cols = t.shape[1];
  Tensor out({cols, rows});
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out.data[c * rows + r] = t.data[r * cols + c];
  return out;
}

// Sub-tensor [i] along the first axis.
Tensor slice(const Tensor& t, std::int64_t i) {
  Shape s(t.shape.begin() + 1, t.shape.end());
  const auto n = shape_numel(s);
  return Tensor(s, std::vector<float>(t.data.begin() + i * n, t.data.begin() + (i + 1) * n));
}

TensorF64 ref64(const Region& region, const std::vector<Tensor>& ops) {
  auto out = evaluate_reference_f64(region, ops);
  EXPECT_TRUE(out.ok()) << out.error().str();
  return out.ok() ? std::move(out).value() : TensorF64{};
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

Region fused(FusedSpec s) {
  auto r = FusedRegion::make(s);
  EXPECT_TRUE(r.ok()) << r.error().str();
  return *r;
}

Region attention(bool causal = false, double scale = 1.0, bool qt = false, bool kt = false,
                 std::string storage = "f32") {
  return *AttentionRegion::make({scale, causal, qt, kt, std::move(storage)});
}

Region matmul(bool ta, bool tb, std::string storage = "f32") {
  return *MatmulRegion::make({std::move(storage), ta, tb});
}

PointwiseArgSpec id(const char* name) { return std::string(name); }

} // namespace

// ---- fused --------------------------------------------------------------------------------

TEST(ReferenceFused, ReluPrologueBiasGeluByHand) {
  FusedSpec s;
  s.prologue = {"relu"};
  s.epilogue = {"bias", "gelu"};
  // relu(A) = [[1,0],[0,3]]; @ B = [[0.5,-1],[6,0.75]]; + bias = [[1,0],[6.5,1.75]]; gelu.
  const Tensor A({2, 2}, {1, -2, -1, 3}), B({2, 2}, {0.5f, -1, 2, 0.25f}), bias({2}, {0.5f, 1});
  auto out = ref64(fused(s), {A, B, bias});
  EXPECT_EQ(out.shape, (Shape{2, 2}));
  expect_near_all(out.data, {0.8411919906082768, 0.0, 6.499999999999372, 1.6797953823412513}, 1e-14);
}

TEST(ReferenceFused, EpilogueOrderMatters) {
  // bias then relu vs relu then bias on a single negative product.
  const Tensor A({1, 1}, {-1}), B({1, 1}, {2}), bias({1}, {3});
  FusedSpec s;
  s.epilogue = {"bias", "relu"};
  EXPECT_EQ(ref64(fused(s), {A, B, bias}).data[0], 1.0); // relu(-2 + 3)
  s.epilogue = {"relu", "bias"};
  EXPECT_EQ(ref64(fused(s), {A, B, bias}).data[0], 3.0); // relu(-2) + 3
}

TEST(ReferenceFused, ReluResidualByHand) {
  FusedSpec s;
  s.epilogue = {"relu"};
  s.residual = true;
  // A@B = [[4,-1],[10,-1]]; relu → [[4,0],[10,0]]; + residual.
  const Tensor A({2, 3}, {1, 2, 3, 4, 5, 6}), B({3, 2}, {1, 0, 0, 1, 1, -1});
  const Tensor res({2, 2}, {0.5f, 0.5f, -10, 1});
  const std::vector<double> want{4.5, 0.5, 0.0, 1.0};
  EXPECT_EQ(ref64(fused(s), {A, B, res}).data, want);
  // The same problem with col_major operands passed as their physical arrays.
  s.a_layout = s.b_layout = "col_major";
  EXPECT_EQ(ref64(fused(s), {transposed(A), transposed(B), res}).data, want);
}

TEST(ReferenceFused, BiasAsOneByN) {
  FusedSpec s;
  s.epilogue = {"bias"};
  const Tensor A({1, 1}, {1}), B({1, 2}, {1, 2});
  EXPECT_EQ(ref64(fused(s), {A, B, Tensor({1, 2}, {10, 20})}).data, (std::vector<double>{11, 22}));
}

TEST(ReferenceFused, ReductionsByHand) {
  FusedSpec s;
  s.eps = 0.0;
  const Tensor A({1, 1}, {1}), B({1, 2}, {3, 4});
  s.reduction = "rmsnorm"; // [3,4] / sqrt(12.5)
  expect_near_all(ref64(fused(s), {A, B}).data, {0.848528137423857, 1.131370849898476}, 1e-15);
  s.reduction = "layer_norm"; // mean 3.5, variance 0.25
  expect_near_all(ref64(fused(s), {A, B}).data, {-1.0, 1.0}, 1e-15);
  s.reduction = "softmax"; // [1, e] / (1 + e)
  expect_near_all(ref64(fused(s), {A, B}).data, {0.2689414213699951, 0.7310585786300049}, 1e-15);
  s.reduction = "rmsnorm";
  s.eps = 3.0; // [1,1] / sqrt(1 + 3)
  EXPECT_EQ(ref64(fused(s), {A, Tensor({1, 2}, {1, 1})}).data, (std::vector<double>{0.5, 0.5}));
}

TEST(ReferenceFused, ReductionIdentities) {
  const Tensor A = randn({7, 12}, 1, 3.0f), B = randn({12, 33}, 2), bias = randn({33}, 3);
  FusedSpec s;
  s.epilogue = {"bias", "gelu"};
  for (const char* norm : {"softmax", "layer_norm", "rmsnorm"}) {
    s.reduction = norm;
    s.eps = 1e-6;
    const auto out = ref64(fused(s), {A, B, bias});
    for (std::int64_t m = 0; m < 7; ++m) {
      double sum = 0, sq = 0;
      for (std::int64_t n = 0; n < 33; ++n) {
        const double x = out.data[m * 33 + n];
        sum += x;
        sq += x * x;
        if (std::string(norm) == "softmax") {
          EXPECT_GT(x, 0.0);
        }
      }
      if (std::string(norm) == "softmax") {
        EXPECT_NEAR(sum, 1.0, 1e-12);
      }
      if (std::string(norm) == "layer_norm") {
        EXPECT_NEAR(sum / 33, 0.0, 1e-12);
        EXPECT_NEAR(sq / 33, 1.0, 1e-4); // var/(var + eps)
      }
      if (std::string(norm) == "rmsnorm") {
        EXPECT_NEAR(sq / 33, 1.0, 1e-4);
      }
    }
  }
}

TEST(ReferenceFused, SoftmaxOfHugeValuesDoesNotOverflow) {
  FusedSpec s;
  s.reduction = "softmax";
  const auto out = ref64(fused(s), {Tensor({1, 1}, {1}), Tensor({1, 3}, {3e38f, 3e38f, -3e38f})});
  expect_near_all(out.data, {0.5, 0.5, 0.0}, 1e-15);
}

TEST(ReferenceFused, NanInAPropagatesThroughReluPrologue) {
  FusedSpec s;
  s.prologue = {"relu"};
  const Tensor A({2, 2}, {kNaN, 1, 1, 1}), B({2, 2}, {1, 2, 3, 4});
  const auto out = ref64(fused(s), {A, B});
  EXPECT_TRUE(std::isnan(out.data[0]));
  EXPECT_TRUE(std::isnan(out.data[1]));
  EXPECT_EQ(out.data[2], 4.0);
  EXPECT_EQ(out.data[3], 6.0);
  // 0 * inf is NaN: the contraction never skips zeros.
  const auto inf = std::numeric_limits<float>::infinity();
  const auto z = ref64(fused(s), {Tensor({1, 1}, {-1}), Tensor({1, 1}, {inf})});
  EXPECT_TRUE(std::isnan(z.data[0]));
}

TEST(ReferenceFused, ExactSmallIntegersAtLargeK) {
  // 129 x 4096 x 129: each output is Σ_k 1·(k mod 3) exactly (double accumulation).
  FusedSpec s;
  s.prologue = {"relu"};
  Tensor A({129, 4096}), B({4096, 129});
  for (auto& x : A.data) x = 1.0f;
  for (std::int64_t k = 0; k < 4096; ++k)
    for (std::int64_t n = 0; n < 129; ++n) B.data[k * 129 + n] = static_cast<float>(k % 3);
  const auto out = ref64(fused(s), {A, B});
  // 4096 = 3·1365 + 1: 1365 ones, 1365 twos (k%3 == 0 for the last k).
  for (double x : out.data) ASSERT_EQ(x, 1365.0 * 3);
}

TEST(ReferenceFused, StorageRoundingAppliesToEveryOperand) {
  FusedSpec s;
  s.epilogue = {"bias"};
  s.storage = "bf16";
  // 1 + 2^-9 is not a bf16 value (rounds to 1); 1 + 3·2^-9 rounds up to 1 + 2^-7.
  const Tensor A({1, 1}, {1.0f + 0x1p-9f}), B({1, 1}, {1.0f + 3 * 0x1p-9f}), bias({1}, {0x1p-9f});
  EXPECT_EQ(ref64(fused(s), {A, B, bias}).data[0], 1.0 + 0x1p-7 + 0x1p-9); // bias itself is a bf16 value
  s.storage = "f32";
  EXPECT_EQ(ref64(fused(s), {A, B, bias}).data[0],
            static_cast<double>(1.0f + 0x1p-9f) * static_cast<double>(1.0f + 3 * 0x1p-9f) + 0x1p-9);
  s.storage = "fp8_e4m3"; // 0.3 → 0.3125 (quantum 2^-5 in [0.25, 0.5)); 465 → NaN
  EXPECT_EQ(ref64(fused(s), {Tensor({1, 1}, {0.3f}), Tensor({1, 1}, {1}), Tensor({1}, {0})}).data[0], 0.3125);
  EXPECT_TRUE(std::isnan(ref64(fused(s), {Tensor({1, 1}, {465}), Tensor({1, 1}, {1}), Tensor({1}, {0})}).data[0]));
}

TEST(ReferenceFused, OperandErrorsComeFirst) {
  FusedSpec s;
  s.epilogue = {"bias"};
  s.residual = true;
  const std::vector<Tensor> three{Tensor({2, 3}), Tensor({3, 4}), Tensor({4})};
  auto missing = evaluate_reference(fused(s), three);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::fused_epilogue_missing_operand);
  EXPECT_NE(missing.error().message.find("residual"), std::string::npos);
  const std::vector<Tensor> bad{Tensor({2, 3}), Tensor({3, 4}), Tensor({4}), Tensor({4, 2})};
  auto shape = evaluate_reference(fused(s), bad);
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.error().code, ErrorCode::shape_mismatch);
  EXPECT_NE(shape.error().message.find("residual"), std::string::npos);
  EXPECT_NE(shape.error().message.find("[2, 4]"), std::string::npos);
  EXPECT_NE(shape.error().message.find("[4, 2]"), std::string::npos);
}

TEST(ReferenceFused, F32OutputIsTheCastOfTheF64Result) {
  FusedSpec s;
  s.epilogue = {"gelu_erf"};
  const std::vector<Tensor> ops{randn({5, 9}, 4), randn({9, 6}, 5)};
  const auto f64 = ref64(fused(s), ops);
  auto f32 = evaluate_reference(fused(s), ops);
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(f32->shape, f64.shape);
  for (size_t i = 0; i < f64.data.size(); ++i) EXPECT_EQ(f32->data[i], static_cast<float>(f64.data[i]));
}

// ---- matmul ---------------------------------------------------------------------------------

TEST(ReferenceMatmul, SmallProductByHand) {
  const Tensor A({2, 3}, {1, 2, 3, 4, 5, 6}), B({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_EQ(ref64(matmul(false, false), {A, B}).data, (std::vector<double>{58, 64, 139, 154}));
}

TEST(ReferenceMatmul, TransposeFlagsEqualExplicitTransposes) {
  for (auto [M, N, K] : {std::tuple{3, 5, 4}, std::tuple{4, 4, 4}}) {
    const Tensor A = randn({M, K}, 10), B = randn({K, N}, 11);
    const auto want = ref64(matmul(false, false), {A, B}).data;
    EXPECT_EQ(ref64(matmul(true, false), {transposed(A), B}).data, want);
    EXPECT_EQ(ref64(matmul(false, true), {A, transposed(B)}).data, want);
    EXPECT_EQ(ref64(matmul(true, true), {transposed(A), transposed(B)}).data, want);
  }
  // M == N == K: the flag, not the shape, decides. A = [[0,1],[0,0]]: Aᵀ@I != A@I.
  const Tensor A({2, 2}, {0, 1, 0, 0}), I({2, 2}, {1, 0, 0, 1});
  EXPECT_EQ(ref64(matmul(false, false), {A, I}).data, (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(ref64(matmul(true, false), {A, I}).data, (std::vector<double>{0, 0, 1, 0}));
}

TEST(ReferenceMatmul, HalfPrecisionStorageRoundsInputs) {
  const Tensor A({1, 2}, {1.0f + 0x1p-12f, 1.0f + 0x1p-9f}), B({2, 1}, {1, 1});
  EXPECT_EQ(ref64(matmul(false, false, "f16"), {A, B}).data[0], 2.0 + 0x1p-9); // 1 + 2^-12 → 1
  EXPECT_EQ(ref64(matmul(false, false, "bf16"), {A, B}).data[0], 2.0);         // both → 1
  EXPECT_EQ(ref64(matmul(false, false, "f32"), {A, B}).data[0], 2.0 + 0x1p-12 + 0x1p-9);
}

TEST(ReferenceMatmul, ZeroSizeDimensions) {
  auto out = ref64(matmul(false, false), {Tensor({2, 0}), Tensor({0, 3})});
  EXPECT_EQ(out.shape, (Shape{2, 3}));
  EXPECT_EQ(out.data, std::vector<double>(6, 0.0)); // an empty sum
  out = ref64(matmul(false, false), {Tensor({0, 4}), Tensor({4, 3})});
  EXPECT_EQ(out.shape, (Shape{0, 3}));
  EXPECT_TRUE(out.data.empty());
}

// ---- attention ------------------------------------------------------------------------------

TEST(ReferenceAttention, TwoKeysByHand) {
  // scores [1, 0] → p = [e, 1] / (1 + e).
  const Tensor Q({1, 2}, {1, 0}), K({2, 2}, {1, 0, 0, 1}), V({2, 2}, {1, 2, 3, 4});
  expect_near_all(ref64(attention(), {Q, K, V}).data, {1.5378828427399902, 2.5378828427399904}, 1e-15);
  // scale 2 on Q == scale 1 on 2Q.
  const Tensor Q2({1, 2}, {2, 0});
  EXPECT_EQ(ref64(attention(false, 2.0), {Q, K, V}).data, ref64(attention(), {Q2, K, V}).data);
}

TEST(ReferenceAttention, EqualScoresAverageV) {
  const Tensor Q({3, 4}), K = randn({5, 4}, 20), V = randn({5, 3}, 21); // Q = 0: every score 0
  const auto out = ref64(attention(), {Q, K, V});
  for (std::int64_t m = 0; m < 3; ++m)
    for (std::int64_t j = 0; j < 3; ++j) {
      double mean = 0;
      for (std::int64_t n = 0; n < 5; ++n) mean += V.data[n * 3 + j] / 5.0;
      EXPECT_NEAR(out.data[m * 3 + j], mean, 1e-12);
    }
  // Causal and equal scores: query m averages V rows 0..m.
  const auto causal = ref64(attention(true), {Q, K, V});
  for (std::int64_t m = 0; m < 3; ++m)
    for (std::int64_t j = 0; j < 3; ++j) {
      double mean = 0;
      for (std::int64_t n = 0; n <= m; ++n) mean += V.data[n * 3 + j] / static_cast<double>(m + 1);
      EXPECT_NEAR(causal.data[m * 3 + j], mean, 1e-12);
    }
}

TEST(ReferenceAttention, CausalIsTopLeftAligned) {
  const Tensor Q = randn({6, 8}, 30), K = randn({4, 8}, 31), V = randn({4, 5}, 32);
  const auto causal = ref64(attention(true), {Q, K, V});
  const auto full = ref64(attention(false), {Q, K, V});
  for (std::int64_t j = 0; j < 5; ++j) EXPECT_EQ(causal.data[j], V.data[j]); // row 0 sees key 0 only
  // Rows m >= Nk - 1 see every key.
  for (std::int64_t m = 3; m < 6; ++m)
    for (std::int64_t j = 0; j < 5; ++j) EXPECT_EQ(causal.data[m * 5 + j], full.data[m * 5 + j]);
  // Row 1 sees keys 0 and 1: the same as full attention over the first two keys.
  const Tensor K2({2, 8}, std::vector<float>(K.data.begin(), K.data.begin() + 16));
  const Tensor V2({2, 5}, std::vector<float>(V.data.begin(), V.data.begin() + 10));
  const auto two = ref64(attention(false), {Q, K2, V2});
  for (std::int64_t j = 0; j < 5; ++j) EXPECT_NEAR(causal.data[5 + j], two.data[5 + j], 1e-15);
}

TEST(ReferenceAttention, NoKeysGivesZeroRows) {
  const auto out = ref64(attention(), {randn({3, 4}, 40), Tensor({0, 4}), Tensor({0, 2})});
  EXPECT_EQ(out.shape, (Shape{3, 2}));
  EXPECT_EQ(out.data, std::vector<double>(6, 0.0));
  EXPECT_EQ(ref64(attention(true), {randn({3, 4}, 41), Tensor({0, 4}), Tensor({0, 2})}).data,
            std::vector<double>(6, 0.0));
}

TEST(ReferenceAttention, LargeScoresAreMaxSubtracted) {
  const Tensor Q({1, 1}, {1000}), K({2, 1}, {1, 0}), V({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(ref64(attention(), {Q, K, V}).data, (std::vector<double>{1, 2})); // e^-1000 underflows to 0
}

TEST(ReferenceAttention, TransposedQAndKEqualExplicitTransposes) {
  const Tensor Q = randn({5, 8}, 50), K = randn({7, 8}, 51), V = randn({7, 3}, 52);
  const auto want = ref64(attention(true, 0.35), {Q, K, V}).data;
  EXPECT_EQ(ref64(attention(true, 0.35, true, false), {transposed(Q), K, V}).data, want);
  EXPECT_EQ(ref64(attention(true, 0.35, false, true), {Q, transposed(K), V}).data, want);
  EXPECT_EQ(ref64(attention(true, 0.35, true, true), {transposed(Q), transposed(K), V}).data, want);
}

TEST(ReferenceAttention, GroupedQueryHeadsMatchPerHeadRuns) {
  // [B=2, H=4, M=3, D=8] queries over [B=2, Hkv=2, Nk=5, ·] keys: head h reads KV head h / 2.
  const Tensor Q = randn({2, 4, 3, 8}, 60), K = randn({2, 2, 5, 8}, 61), V = randn({2, 2, 5, 6}, 62);
  for (bool causal : {false, true}) {
    const auto out = ref64(attention(causal, 0.5), {Q, K, V});
    ASSERT_EQ(out.shape, (Shape{2, 4, 3, 6}));
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t h = 0; h < 4; ++h) {
        const auto head = ref64(attention(causal, 0.5),
                                {slice(slice(Q, b), h), slice(slice(K, b), h / 2), slice(slice(V, b), h / 2)});
        for (size_t i = 0; i < head.data.size(); ++i)
          EXPECT_EQ(out.data[(b * 4 + h) * 18 + static_cast<std::int64_t>(i)], head.data[i]) << b << "," << h;
      }
  }
  // Rank 3 (no batch) with 3 query heads per KV head.
  const Tensor Q3 = randn({6, 2, 4}, 63), K3 = randn({2, 3, 4}, 64), V3 = randn({2, 3, 2}, 65);
  const auto out3 = ref64(attention(), {Q3, K3, V3});
  for (std::int64_t h = 0; h < 6; ++h) {
    const auto head = ref64(attention(), {slice(Q3, h), slice(K3, h / 3), slice(V3, h / 3)});
    for (size_t i = 0; i < head.data.size(); ++i)
      EXPECT_EQ(out3.data[h * 4 + static_cast<std::int64_t>(i)], head.data[i]);
  }
}

TEST(ReferenceAttention, LongKeySequenceOfEqualScores) {
  // Nk = 4096, D = 128 (the size the reference must handle): Q = 0 averages V.
  const std::int64_t Nk = 4096;
  Tensor V({Nk, 2});
  for (std::int64_t n = 0; n < Nk; ++n) {
    V.data[n * 2] = static_cast<float>(n);
    V.data[n * 2 + 1] = 1.0f;
  }
  const auto out = ref64(attention(), {Tensor({2, 128}), randn({Nk, 128}, 70), V});
  EXPECT_NEAR(out.data[0], (Nk - 1) / 2.0, 1e-9);
  EXPECT_NEAR(out.data[1], 1.0, 1e-12);
}

TEST(ReferenceAttention, Bf16StorageRoundsInputs) {
  // V = 1 + 2^-9 rounds to 1 in bf16; a single key gives O = V.
  const Tensor Q({1, 1}, {1}), K({1, 1}, {1}), V({1, 1}, {1.0f + 0x1p-9f});
  EXPECT_EQ(ref64(attention(false, 1.0, false, false, "bf16"), {Q, K, V}).data[0], 1.0);
  EXPECT_EQ(ref64(attention(), {Q, K, V}).data[0], 1.0 + 0x1p-9);
}

// ---- gated ----------------------------------------------------------------------------------

TEST(ReferenceGated, SiluGateByHand) {
  // A@Wg = 3, A@Wu = 3: silu(3)·3.
  const Tensor A({1, 2}, {1, 2}), Wg({2, 1}, {1, 1}), Wu({2, 1}, {2, 0.5f});
  const Region r{*GatedMatmulRegion::make({})};
  EXPECT_NEAR(ref64(r, {A, Wg, Wu}).data[0], 8.5731671414019, 1e-12);
  // relu gate: a negative gate zeroes the product.
  const Region relu{*GatedMatmulRegion::make({"relu", "f32"})};
  const Tensor Wg2({2, 2}, {-1, 1, -1, 1}), Wu2({2, 2}, {5, 5, 5, 5});
  EXPECT_EQ(ref64(relu, {A, Wg2, Wu2}).data, (std::vector<double>{0, 45})); // relu(3)·15
}

// ---- pointwise ------------------------------------------------------------------------------

TEST(ReferencePointwise, BroadcastsTrailingAxes) {
  // out = x[4,3] * y[3] + z[1] - 1.5
  PointwiseSpec s;
  s.inputs = {"x", "y", "z"};
  s.ops = {{"t", "mul", {id("x"), id("y")}}, {"u", "add", {id("t"), id("z")}}, {"o", "sub", {id("u"), 1.5}}};
  s.output = "o";
  const Region r{*PointwiseGraphRegion::make(s)};
  Tensor x({4, 3});
  for (int i = 0; i < 12; ++i) x.data[i] = static_cast<float>(i);
  const auto out = ref64(r, {x, Tensor({3}, {1, 10, 100}), Tensor({1}, {0.5f})});
  EXPECT_EQ(out.shape, (Shape{4, 3}));
  const std::vector<double> want{-1, 9, 199, 2, 39, 499, 5, 69, 799, 8, 99, 1099};
  EXPECT_EQ(out.data, want);
}

TEST(ReferencePointwise, OuterProductBroadcast) {
  PointwiseSpec s;
  s.inputs = {"col", "row"};
  s.ops = {{"p", "mul", {id("col"), id("row")}}, {"q", "neg", {id("p")}}};
  s.output = "q";
  const Region r{*PointwiseGraphRegion::make(s)};
  const auto out = ref64(r, {Tensor({2, 1}, {1, 2}), Tensor({3}, {1, 2, 3})});
  EXPECT_EQ(out.shape, (Shape{2, 3}));
  EXPECT_EQ(out.data, (std::vector<double>{-1, -2, -3, -2, -4, -6}));
  // [2,1,3] with [4,1]: out[a][b][c] = x[a][0][c] + y[b][0]
  PointwiseSpec s2 = s;
  s2.ops[0].op = "add";
  const Region r2{*PointwiseGraphRegion::make(s2)};
  const auto out2 = ref64(r2, {Tensor({2, 1, 3}, {0, 1, 2, 3, 4, 5}), Tensor({4, 1}, {0, 10, 20, 30})});
  ASSERT_EQ(out2.shape, (Shape{2, 4, 3}));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(out2.data[(a * 4 + b) * 3 + c], -(a * 3 + c + 10.0 * b));
}

TEST(ReferencePointwise, NanPropagatesThroughMaximumAndSign) {
  PointwiseSpec s;
  s.inputs = {"x", "y"};
  s.ops = {{"m", "maximum", {id("x"), id("y")}}, {"s", "sign", {id("m")}}};
  s.output = "m";
  const Region r{*PointwiseGraphRegion::make(s)};
  const auto out = ref64(r, {Tensor({3}, {kNaN, 1, -1}), Tensor({3}, {1, kNaN, 2})});
  EXPECT_TRUE(std::isnan(out.data[0]));
  EXPECT_TRUE(std::isnan(out.data[1]));
  EXPECT_EQ(out.data[2], 2.0);
  s.output = "s";
  const auto sign = ref64(Region{*PointwiseGraphRegion::make(s)}, {Tensor({2}, {kNaN, -3}), Tensor({1}, {-5})});
  EXPECT_TRUE(std::isnan(sign.data[0]));
  EXPECT_EQ(sign.data[1], -1.0);
}

TEST(ReferencePointwise, ScalarInputs) {
  PointwiseSpec s;
  s.inputs = {"a", "b"};
  s.ops = {{"t", "div", {id("a"), id("b")}}, {"u", "sqrt", {id("t")}}};
  s.output = "u";
  const auto out = ref64(Region{*PointwiseGraphRegion::make(s)}, {Tensor({}, {18}), Tensor({}, {2})});
  EXPECT_EQ(out.shape, Shape{});
  EXPECT_EQ(out.data, std::vector<double>{3.0});
}

// ---- pointwise reduce -------------------------------------------------------------------------

namespace {
Region reduce_region(const std::string& op, bool square) {
  PointwiseReduceSpec s;
  s.graph.inputs = {"x"};
  if (square) s.graph.ops = {{"sq", "mul", {id("x"), id("x")}}};
  s.graph.output = square ? "sq" : "x";
  s.reduce = op;
  return *PointwiseReduceRegion::make(s);
}
} // namespace

TEST(ReferenceReduce, SumMeanAmaxAminByHand) {
  const Tensor x({2, 3}, {1, -2, 3, 4, 5, -6});
  EXPECT_EQ(ref64(reduce_region("sum", false), {x}).data, (std::vector<double>{2, 3}));
  EXPECT_EQ(ref64(reduce_region("mean", false), {x}).data, (std::vector<double>{2.0 / 3, 1}));
  EXPECT_EQ(ref64(reduce_region("amax", false), {x}).data, (std::vector<double>{3, 5}));
  EXPECT_EQ(ref64(reduce_region("amin", false), {x}).data, (std::vector<double>{-2, -6}));
  EXPECT_EQ(ref64(reduce_region("sum", true), {x}).data, (std::vector<double>{14, 77}));
  const auto out = ref64(reduce_region("sum", false), {x});
  EXPECT_EQ(out.shape, Shape{2});
}

TEST(ReferenceReduce, VectorReducesToAScalar) {
  const auto out = ref64(reduce_region("mean", false), {Tensor({4}, {1, 2, 3, 6})});
  EXPECT_EQ(out.shape, Shape{});
  EXPECT_EQ(out.data, std::vector<double>{3.0});
}

TEST(ReferenceReduce, AmaxAminPropagateNan) {
  const Tensor x({3, 3}, {1, kNaN, 3, kNaN, kNaN, kNaN, -1, 0, 1});
  for (const char* op : {"amax", "amin"}) {
    const auto out = ref64(reduce_region(op, false), {x});
    EXPECT_TRUE(std::isnan(out.data[0])) << op;
    EXPECT_TRUE(std::isnan(out.data[1])) << op; // all NaN: NaN, never ±inf
    EXPECT_EQ(out.data[2], std::string(op) == "amax" ? 1.0 : -1.0);
  }
}

TEST(ReferenceReduce, EmptyRows) {
  const auto sum = ref64(reduce_region("sum", false), {Tensor({2, 0})});
  EXPECT_EQ(sum.data, (std::vector<double>{0, 0}));
  auto amax = evaluate_reference(reduce_region("amax", false), std::vector<Tensor>{Tensor({2, 0})});
  ASSERT_FALSE(amax.ok());
  EXPECT_EQ(amax.error().code, ErrorCode::shape_mismatch);
}

// ---- norm chain -------------------------------------------------------------------------------

TEST(ReferenceNormChain, RmsnormResidualGammaBetaByHand) {
  // x + r = [2,4,6]; rms = sqrt(56/3); then * gamma + beta.
  const Region r{*NormChainRegion::make({"rmsnorm", true, true, true, 0.0})};
  const auto out = ref64(
      r, {Tensor({1, 3}, {1, 2, 3}), Tensor({1, 3}, {1, 2, 3}), Tensor({3}, {1, 2, 0.5f}), Tensor({3}, {0, -1, 1})});
  expect_near_all(out.data, {0.4629100498862757, 0.8516401995451028, 1.6943650748294137}, 1e-15);
}

TEST(ReferenceNormChain, LayerNormByHand) {
  const Region r{*NormChainRegion::make({"layer_norm", false, false, false, 0.0})};
  const auto out = ref64(r, {Tensor({2, 4}, {1, 2, 3, 4, 10, 20, 30, 40})});
  // mean 2.5, biased variance 1.25; the second row is 10x the first: same result.
  const std::vector<double> row{-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738};
  expect_near_all(std::vector<double>(out.data.begin(), out.data.begin() + 4), row, 1e-15);
  expect_near_all(std::vector<double>(out.data.begin() + 4, out.data.end()), row, 1e-15);
}

TEST(ReferenceNormChain, EpsIsTheRegions) {
  const Region r{*NormChainRegion::make({"rmsnorm", false, false, true, 3.0})};
  EXPECT_EQ(ref64(r, {Tensor({2}, {1, 1}), Tensor({2}, {1, 2})}).data, (std::vector<double>{1.5, 2.5}));
}

TEST(ReferenceNormChain, SoftmaxRowsOfRank3Input) {
  const Region r{*NormChainRegion::make({"softmax", false, true, false, 1e-5})};
  const Tensor x = randn({2, 3, 7}, 80, 4.0f);
  Tensor gamma({7});
  for (auto& g : gamma.data) g = 2.0f;
  const auto out = ref64(r, {x, gamma});
  EXPECT_EQ(out.shape, (Shape{2, 3, 7}));
  for (int row = 0; row < 6; ++row) {
    double sum = 0;
    for (int i = 0; i < 7; ++i) sum += out.data[row * 7 + i];
    EXPECT_NEAR(sum, 2.0, 1e-12); // softmax sums to 1, times gamma = 2
  }
}
