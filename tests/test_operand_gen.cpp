// make_operands: raw-orientation shapes per kind (cross-checked by check_operands),
// determinism by seed, and the N(0,1)·scale distribution.
#include <gtest/gtest.h>

#include <cmath>

#include "fusor/operand_gen.hpp"
#include "fusor/operands.hpp"

using namespace fusor;

namespace {

template <class R, class S> Region make(const S& spec) {
  auto r = R::make(spec);
  EXPECT_TRUE(r.ok()) << r.error().str();
  return Region(std::move(r).value());
}

std::vector<Shape> shapes_of(const std::vector<Tensor>& ts) {
  std::vector<Shape> out;
  for (const auto& t : ts) out.push_back(t.shape);
  return out;
}

ProblemShape gemm_dims(std::int64_t m, std::int64_t n, std::int64_t k) {
  ProblemShape d;
  d.M = m;
  d.N = n;
  d.K = k;
  return d;
}

PointwiseSpec add_mul_graph() {
  return {{"x", "y"}, {{"t", "add", {std::string("x"), std::string("y")}}, {"o", "mul", {std::string("t"), 0.5}}}, "o"};
}

// The generated operands must be exactly what the validator accepts for these dims.
void expect_accepted(const Region& region, const std::vector<Tensor>& ops, const ProblemShape& want) {
  auto p = check_operands(region, ops);
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->M, want.M);
  EXPECT_EQ(p->N, want.N);
  EXPECT_EQ(p->K, want.K);
}

} // namespace

TEST(OperandGen, FusedRowAndColMajor) {
  const auto d = gemm_dims(5, 7, 3);
  FusedSpec spec;
  spec.epilogue = {"bias", "gelu"};
  spec.residual = true;
  Region row = make<FusedRegion>(spec);
  auto ops = make_operands(row, d, 1);
  EXPECT_EQ(shapes_of(ops), (std::vector<Shape>{{5, 3}, {3, 7}, {7}, {5, 7}}));
  expect_accepted(row, ops, d);

  spec.a_layout = "col_major";
  spec.b_layout = "col_major";
  Region col = make<FusedRegion>(spec);
  ops = make_operands(col, d, 1);
  EXPECT_EQ(shapes_of(ops), (std::vector<Shape>{{3, 5}, {7, 3}, {7}, {5, 7}}));
  expect_accepted(col, ops, d);

  FusedSpec plain; // no bias, no residual: just A and B
  plain.epilogue = {"relu"};
  EXPECT_EQ(shapes_of(make_operands(make<FusedRegion>(plain), d, 1)), (std::vector<Shape>{{5, 3}, {3, 7}}));
}

TEST(OperandGen, MatmulTransposeFlags) {
  const auto d = gemm_dims(4, 6, 9);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Region r = make<MatmulRegion>(MatmulSpec{"bf16", ta, tb});
      auto ops = make_operands(r, d, 2);
      EXPECT_EQ(ops[0].shape, ta ? Shape({9, 4}) : Shape({4, 9}));
      EXPECT_EQ(ops[1].shape, tb ? Shape({6, 9}) : Shape({9, 6}));
      expect_accepted(r, ops, d);
    }
}

TEST(OperandGen, Gated) {
  const auto d = gemm_dims(3, 8, 5);
  Region r = make<GatedMatmulRegion>(GatedSpec{});
  auto ops = make_operands(r, d, 3);
  EXPECT_EQ(shapes_of(ops), (std::vector<Shape>{{3, 5}, {5, 8}, {5, 8}}));
  expect_accepted(r, ops, d);
}

TEST(OperandGen, AttentionRanks) {
  ProblemShape d;
  d.M = 4;
  d.Nk = 6;
  d.D = 8;
  d.Dv = 5;
  AttentionSpec spec;
  spec.q_transposed = true;
  spec.k_transposed = true;
  Region r = make<AttentionRegion>(spec);

  auto ops = make_operands(r, d, 4); // batch 0: rank 2, raw transposed Q and K
  EXPECT_EQ(shapes_of(ops), (std::vector<Shape>{{8, 4}, {8, 6}, {6, 5}}));
  auto p = check_operands(r, ops);
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->output, (Shape{4, 5}));

  d.batch = 1; // one batch of 4 query heads over 2 KV heads (GQA): rank 3
  d.heads = 4;
  d.kv_heads = 2;
  ops = make_operands(r, d, 4);
  EXPECT_EQ(shapes_of(ops), (std::vector<Shape>{{4, 8, 4}, {2, 8, 6}, {2, 6, 5}}));
  p = check_operands(r, ops);
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->output, (Shape{4, 4, 5}));

  d.batch = 3; // rank 4; kv_heads 0 means "as many as the query heads"
  d.kv_heads = 0;
  ops = make_operands(r, d, 4);
  EXPECT_EQ(shapes_of(ops), (std::vector<Shape>{{3, 4, 8, 4}, {3, 4, 8, 6}, {3, 4, 6, 5}}));
  p = check_operands(r, ops);
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->output, (Shape{3, 4, 4, 5}));
}

TEST(OperandGen, RowWiseAndPointwiseKinds) {
  ProblemShape d;
  d.output = {3, 10};
  Region pw = make<PointwiseGraphRegion>(add_mul_graph());
  EXPECT_EQ(shapes_of(make_operands(pw, d, 5)), (std::vector<Shape>{{3, 10}, {3, 10}}));

  Region red = make<PointwiseReduceRegion>(PointwiseReduceSpec{add_mul_graph(), "amax"});
  auto ops = make_operands(red, d, 5);
  EXPECT_EQ(shapes_of(ops), (std::vector<Shape>{{3, 10}, {3, 10}}));
  auto p = check_operands(red, ops);
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->output, (Shape{3}));

  Region norm = make<NormChainRegion>(NormChainSpec{"layer_norm", true, true, true, 1e-5});
  ops = make_operands(norm, d, 5);
  EXPECT_EQ(shapes_of(ops), (std::vector<Shape>{{3, 10}, {3, 10}, {10}, {10}}));
  p = check_operands(norm, ops);
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->row_len, 10);
}

TEST(OperandGen, DeterministicBySeed) {
  Region r = make<MatmulRegion>(MatmulSpec{});
  const auto a = make_operands(r, gemm_dims(6, 7, 8), 42);
  EXPECT_EQ(a, make_operands(r, gemm_dims(6, 7, 8), 42));
  const auto b = make_operands(r, gemm_dims(6, 7, 8), 43);
  EXPECT_NE(a[0].data, b[0].data);
  EXPECT_NE(a[0].data, a[1].data); // operands draw from different streams
  // Each operand has its own stream: changing M (A's rows) leaves B untouched.
  EXPECT_EQ(make_operands(r, gemm_dims(9, 7, 8), 42)[1], a[1]);
  // Scale multiplies the same draws.
  const auto half = make_operands(r, gemm_dims(6, 7, 8), 42, 0.5);
  for (size_t i = 0; i < a[0].data.size(); ++i) EXPECT_FLOAT_EQ(half[0].data[i], 0.5f * a[0].data[i]);
}

// Moments and the 1σ/2σ/3σ masses of N(0, scale²): 68.27%, 95.45%, 99.73%.
TEST(OperandGen, NormalDistribution) {
  ProblemShape d;
  d.output = {400, 501}; // odd count: the last Box–Muller pair is used half
  const double scale = 0.2;
  Region r = make<PointwiseGraphRegion>(add_mul_graph());
  const auto ops = make_operands(r, d, 7, scale);
  const auto& x = ops[0].data;
  const double n = static_cast<double>(x.size());
  double sum = 0, sq = 0, w1 = 0, w2 = 0, w3 = 0;
  for (float v : x) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += double(v) * v;
    const double z = std::fabs(v) / scale;
    w1 += z < 1;
    w2 += z < 2;
    w3 += z < 3;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  // 200k samples: the standard error of the mean is scale/447 ≈ 4.5e-4.
  EXPECT_NEAR(mean, 0.0, 0.003);
  EXPECT_NEAR(sd, scale, 0.01 * scale);
  EXPECT_NEAR(w1 / n, 0.6827, 0.005);
  EXPECT_NEAR(w2 / n, 0.9545, 0.003);
  EXPECT_NEAR(w3 / n, 0.9973, 0.001);
  EXPECT_NE(x.back(), 0.0f); // the odd tail element is filled too
}
