// Native graph kernels against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fusor/graph_exec.hpp"

namespace fusor {
namespace {

Expected<std::vector<GraphTensor>> run(const std::string& op, std::vector<const GraphTensor*> in,
                                       std::map<std::string, Attr> attrs = {}, size_t outs = 1) {
  Node n;
  n.op = op;
  n.attrs = std::move(attrs);
  for (size_t k = 0; k < in.size(); ++k) n.inputs.push_back(in[k] ? "i" + std::to_string(k) : "");
  for (size_t k = 0; k < outs; ++k) n.outputs.push_back("o" + std::to_string(k));
  return run_native_node(n, in);
}

TEST(GraphKernels, BroadcastingBinaryOpsAndIntegerMath) {
  const auto a = GraphTensor::f32({2, 1}, {1, 2}), b = GraphTensor::f32({3}, {10, 20, 30});
  auto y = run("add", {&a, &b});
  ASSERT_TRUE(y.ok()) << y.error().str();
  EXPECT_EQ((*y)[0].shape, (Shape{2, 3}));
  EXPECT_EQ((*y)[0].f, (std::vector<float>{11, 21, 31, 12, 22, 32}));
  const auto i = GraphTensor::i64({3}, {-7, 7, 9}), j = GraphTensor::i64({}, {2});
  EXPECT_EQ((*run("div", {&i, &j}))[0].i, (std::vector<std::int64_t>{-3, 3, 4}));
  // Python-style mod takes the divisor's sign; fmod the dividend's.
  EXPECT_EQ((*run("mod", {&i, &j}))[0].i, (std::vector<std::int64_t>{1, 1, 1}));
  EXPECT_EQ((*run("mod", {&i, &j}, {{"fmod", std::int64_t{1}}}))[0].i, (std::vector<std::int64_t>{-1, 1, 1}));
  const auto bad = GraphTensor::f32({4}, {1, 2, 3, 4});
  auto mismatch = run("add", {&b, &bad});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.error().code, ErrorCode::shape_mismatch);
}

TEST(GraphKernels, NanPropagatesThroughMaximum) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto a = GraphTensor::f32({2}, {nan, 1}), b = GraphTensor::f32({2}, {0, 2});
  auto y = run("maximum", {&a, &b});
  ASSERT_TRUE(y.ok());
  EXPECT_TRUE(std::isnan((*y)[0].f[0]));
  EXPECT_EQ((*y)[0].f[1], 2.0f);
}

TEST(GraphKernels, ShapeOps) {
  const auto x = GraphTensor::f32({2, 3}, {0, 1, 2, 3, 4, 5});
  const auto spec = GraphTensor::i64({2}, {3, -1});
  EXPECT_EQ((*run("reshape", {&x, &spec}))[0].shape, (Shape{3, 2}));
  auto t = run("transpose", {&x}, {{"perm", std::vector<std::int64_t>{1, 0}}});
  EXPECT_EQ((*t)[0].f, (std::vector<float>{0, 3, 1, 4, 2, 5}));
  // Rows copied whole (the last axis stays) and strided (it moves), f32 and i64 alike.
  std::vector<float> x4f(2 * 3 * 2 * 2);
  std::vector<std::int64_t> x4i(x4f.size());
  for (size_t k = 0; k < x4f.size(); ++k) x4f[k] = static_cast<float>(x4i[k] = static_cast<std::int64_t>(k));
  const auto x4 = GraphTensor::f32({2, 3, 2, 2}, x4f), x4n = GraphTensor::i64({2, 3, 2, 2}, x4i);
  for (const auto& perm : {std::vector<std::int64_t>{0, 2, 1, 3}, std::vector<std::int64_t>{3, 1, 0, 2}}) {
    const auto tf = run("transpose", {&x4}, {{"perm", perm}});
    const auto ti = run("transpose", {&x4n}, {{"perm", perm}});
    ASSERT_TRUE(tf.ok() && ti.ok());
    const Shape in{2, 3, 2, 2};
    Shape out;
    for (auto p : perm) out.push_back(in[static_cast<size_t>(p)]);
    EXPECT_EQ((*tf)[0].shape, out);
    // Element at output index o is the input element whose index along perm[d] is o[d].
    std::int64_t k = 0;
    for (std::int64_t a = 0; a < out[0]; ++a)
      for (std::int64_t b = 0; b < out[1]; ++b)
        for (std::int64_t c = 0; c < out[2]; ++c)
          for (std::int64_t d = 0; d < out[3]; ++d, ++k) {
            std::int64_t idx[4];
            const std::int64_t o[4] = {a, b, c, d};
            for (size_t q = 0; q < 4; ++q) idx[perm[q]] = o[q];
            const std::int64_t src = ((idx[0] * 3 + idx[1]) * 2 + idx[2]) * 2 + idx[3];
            EXPECT_EQ((*tf)[0].f[static_cast<size_t>(k)], static_cast<float>(src));
            EXPECT_EQ((*ti)[0].i[static_cast<size_t>(k)], src);
          }
  }
  // x[:, ::-2] over columns: starts -1, ends INT64_MIN, step -2 → columns 2, 0.
  const auto st = GraphTensor::i64({1}, {-1}), en = GraphTensor::i64({1}, {std::numeric_limits<std::int64_t>::min()}),
             ax = GraphTensor::i64({1}, {1}), sp = GraphTensor::i64({1}, {-2});
  auto s = run("slice", {&x, &st, &en, &ax, &sp});
  ASSERT_TRUE(s.ok()) << s.error().str();
  EXPECT_EQ((*s)[0].f, (std::vector<float>{2, 0, 5, 3}));
  const auto pads = GraphTensor::i64({4}, {0, 1, 0, 0});
  auto p = run("pad", {&x, &pads});
  EXPECT_EQ((*p)[0].f, (std::vector<float>{0, 0, 1, 2, 0, 3, 4, 5}));
  const auto shape = GraphTensor::i64({2}, {2, 2});
  const auto one = GraphTensor::f32({2, 1}, {7, 8});
  EXPECT_EQ((*run("expand", {&one, &shape}))[0].f, (std::vector<float>{7, 7, 8, 8}));
  const auto r0 = GraphTensor::i64({}, {5}), r1 = GraphTensor::i64({}, {-1}), r2 = GraphTensor::i64({}, {-2});
  EXPECT_EQ((*run("range", {&r0, &r1, &r2}))[0].i, (std::vector<std::int64_t>{5, 3, 1}));
}

TEST(GraphKernels, ReductionsKeepDimsAndAxes) {
  const auto x = GraphTensor::f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const auto axes = GraphTensor::i64({1}, {0});
  auto s = run("reduce_sum", {&x, &axes}, {{"keepdims", std::int64_t{0}}});
  EXPECT_EQ((*s)[0].shape, (Shape{3}));
  EXPECT_EQ((*s)[0].f, (std::vector<float>{5, 7, 9}));
  auto m = run("reduce_max", {&x});
  EXPECT_EQ((*m)[0].shape, (Shape{1, 1}));
  EXPECT_EQ((*m)[0].f, (std::vector<float>{6}));
  const auto empty = GraphTensor::f32({0, 3}, {});
  EXPECT_EQ((*run("reduce_max", {&empty, &axes}))[0].f[0], -std::numeric_limits<float>::infinity());
}

TEST(GraphKernels, MatmulBroadcastsBatchAndPromotesVectors) {
  const auto a = GraphTensor::f32({2, 1, 2}, {1, 2, 3, 4}), b = GraphTensor::f32({2, 1}, {10, 1});
  auto y = run("matmul", {&a, &b});
  ASSERT_TRUE(y.ok()) << y.error().str();
  EXPECT_EQ((*y)[0].shape, (Shape{2, 1, 1}));
  EXPECT_EQ((*y)[0].f, (std::vector<float>{12, 34}));
  const auto v = GraphTensor::f32({2}, {1, 1});
  EXPECT_EQ((*run("matmul", {&v, &b}))[0].shape, (Shape{1}));
}

TEST(GraphKernels, RmsNormAndLayerNormByHand) {
  const auto x = GraphTensor::f32({1, 2}, {3, 4}), g = GraphTensor::f32({2}, {1, 2});
  // rms = sqrt((9 + 16) / 2) = sqrt(12.5)
  auto r = run("rmsnorm", {&x, &g}, {{"epsilon", 0.0}});
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_NEAR((*r)[0].f[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR((*r)[0].f[1], 8 / std::sqrt(12.5), 1e-6);
  const auto beta = GraphTensor::f32({2}, {10, 20});
  auto l = run("layer_norm", {&x, &g, &beta}, {{"epsilon", 0.0}}, 3);
  ASSERT_TRUE(l.ok());
  EXPECT_NEAR((*l)[0].f[0], 9.0, 1e-6); // (3 - 3.5) / 0.5 * 1 + 10
  EXPECT_NEAR((*l)[0].f[1], 22.0, 1e-6);
  EXPECT_NEAR((*l)[1].f[0], 3.5, 1e-6); // mean
  EXPECT_NEAR((*l)[2].f[0], 2.0, 1e-6); // 1 / std
}

// One query, two keys: the weights are softmax of the scaled dot products.
TEST(GraphKernels, AttentionGqaCausalAndFullyMaskedRows) {
  // Q [1, 2 heads, 1, 1]; K, V [1, 1 kv head, 2, 1]: both query heads share the KV head.
  const auto q = GraphTensor::f32({1, 2, 1, 1}, {1, 2}), k = GraphTensor::f32({1, 1, 2, 1}, {0, 1}),
             v = GraphTensor::f32({1, 1, 2, 1}, {10, 20});
  auto y = run("attention", {&q, &k, &v}, {{"scale", 1.0}});
  ASSERT_TRUE(y.ok()) << y.error().str();
  const double w1 = 1 / (1 + std::exp(-1.0)), w2 = 1 / (1 + std::exp(-2.0));
  EXPECT_NEAR((*y)[0].f[0], 10 * (1 - w1) + 20 * w1, 1e-5);
  EXPECT_NEAR((*y)[0].f[1], 10 * (1 - w2) + 20 * w2, 1e-5);
  // Causal, top-left: query 0 sees key 0 only.
  auto c = run("attention", {&q, &k, &v}, {{"scale", 1.0}, {"is_causal", std::int64_t{1}}});
  EXPECT_NEAR((*c)[0].f[0], 10.0, 1e-6);
  // A bool mask hiding every key gives zeros, not NaN.
  const auto none = GraphTensor::boolean({2}, {0, 0});
  auto z = run("attention", {&q, &k, &v, &none});
  ASSERT_TRUE(z.ok()) << z.error().str();
  EXPECT_EQ((*z)[0].f, (std::vector<float>{0, 0}));
}

TEST(GraphKernels, UnknownOpIsUnsupported) {
  const auto x = GraphTensor::f32({1}, {1});
  auto y = run("hardmax", {&x});
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.error().code, ErrorCode::onnx_unsupported_op);
}

} // namespace
} // namespace fusor
