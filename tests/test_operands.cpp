// Operand validation: counts, raw orientation by flags, every shape error, GQA, broadcasting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/abi.hpp"
#include "fusor/operands.hpp"

using namespace fusor;

namespace {

Tensor T(Shape s) { return Tensor(std::move(s)); }

Region fused(std::vector<std::string> epilogue, bool residual = false, std::string a_layout = "row_major",
             std::string b_layout = "row_major") {
  FusedSpec s;
  s.epilogue = std::move(epilogue);
  s.residual = residual;
  s.a_layout = std::move(a_layout);
  s.b_layout = std::move(b_layout);
  if (s.epilogue.empty() && !residual) s.prologue = {"relu"};
  return *FusedRegion::make(s);
}

Region matmul(bool ta, bool tb) { return *MatmulRegion::make({"f32", ta, tb}); }

Region attention(bool qt = false, bool kt = false) {
  AttentionSpec s;
  s.q_transposed = qt;
  s.k_transposed = kt;
  return *AttentionRegion::make(s);
}

Region pointwise2() {
  PointwiseSpec s;
  s.inputs = {"x", "y"};
  s.ops = {{"t", "mul", {std::string("x"), std::string("y")}}, {"z", "exp", {std::string("t")}}};
  s.output = "z";
  return *PointwiseGraphRegion::make(s);
}

Region reduce(const std::string& op) {
  PointwiseReduceSpec s;
  s.graph.inputs = {"x"};
  s.graph.output = "x";
  s.reduce = op;
  return *PointwiseReduceRegion::make(s);
}

Region norm_chain(bool residual, bool weight, bool bias) {
  NormChainSpec s;
  s.add_residual = residual;
  s.weight = weight;
  s.bias = bias;
  return *NormChainRegion::make(s);
}

Expected<ProblemShape> check(const Region& r, const std::vector<Tensor>& ops) { return check_operands(r, ops); }

// The error's code, and that its message contains every fragment.
::testing::AssertionResult fails_with(const Expected<ProblemShape>& e, ErrorCode code,
                                      std::initializer_list<std::string> fragments = {}) {
  if (e.ok()) return ::testing::AssertionFailure() << "expected " << code_name(code) << ", got success";
  if (e.error().code != code)
    return ::testing::AssertionFailure() << "expected " << code_name(code) << ", got " << e.error().str();
  for (const auto& f : fragments)
    if (e.error().message.find(f) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << f << "': " << e.error().str();
  return ::testing::AssertionSuccess();
}

std::optional<Shape> bcast(std::vector<Shape> shapes) { return broadcast_shapes(shapes); }

} // namespace

// ---- broadcast_shapes ------------------------------------------------------------------

TEST(Broadcast, NumpyTrailingAxisRules) {
  EXPECT_EQ(bcast({{4, 3}, {3}}), (Shape{4, 3}));
  EXPECT_EQ(bcast({{4, 3}, {1}}), (Shape{4, 3}));
  EXPECT_EQ(bcast({{4, 3}, {}}), (Shape{4, 3}));
  EXPECT_EQ(bcast({{2, 1, 3}, {4, 1}}), (Shape{2, 4, 3}));
  EXPECT_EQ(bcast({{3, 1}, {1, 4}, {2, 1, 1}}), (Shape{2, 3, 4}));
  EXPECT_EQ(bcast({{1}, {1, 1}}), (Shape{1, 1}));
  EXPECT_EQ(bcast({}), Shape{});
  EXPECT_EQ(bcast({{}}), Shape{});
  EXPECT_EQ(bcast({{0}, {1}}), Shape{0});
  EXPECT_EQ(bcast({{5, 0}, {1, 1}}), (Shape{5, 0}));
  EXPECT_FALSE(bcast({{4, 3}, {4}}).has_value());
  EXPECT_FALSE(bcast({{2, 3}, {3, 3}}).has_value());
  EXPECT_FALSE(bcast({{0}, {3}}).has_value());
  EXPECT_FALSE(bcast({{-1}}).has_value());
}

// ---- counts and malformed tensors ----------------------------------------------------------

TEST(Operands, FusedMissingEpilogueOperandHasItsOwnCode) {
  const Region r = fused({"bias", "relu"}, true);
  EXPECT_TRUE(fails_with(check(r, {T({2, 3}), T({3, 4}), T({4})}), ErrorCode::fused_epilogue_missing_operand,
                         {"A, B, bias, residual", "got 3", "residual is missing"}));
  EXPECT_TRUE(fails_with(check(r, {T({2, 3}), T({3, 4})}), ErrorCode::fused_epilogue_missing_operand,
                         {"bias, residual are missing"}));
  const Region bias_only = fused({"bias"});
  EXPECT_TRUE(fails_with(check(bias_only, {T({2, 3}), T({3, 4})}), ErrorCode::fused_epilogue_missing_operand,
                         {"bias is missing"}));
}

TEST(Operands, OtherWrongCountsAreBadArgument) {
  EXPECT_TRUE(fails_with(check(fused({"relu"}), {T({2, 3})}), ErrorCode::bad_argument, {"A, B", "got 1"}));
  EXPECT_TRUE(fails_with(check(fused({"relu"}), {T({2, 3}), T({3, 4}), T({4})}), ErrorCode::bad_argument));
  EXPECT_TRUE(fails_with(check(fused({"bias"}), {T({2, 3}), T({3, 4}), T({4}), T({2, 4})}), ErrorCode::bad_argument,
                         {"A, B, bias", "got 4"}));
  EXPECT_TRUE(fails_with(check(matmul(false, false), {}), ErrorCode::bad_argument, {"A, B"}));
  EXPECT_TRUE(fails_with(check(attention(), {T({2, 3}), T({2, 3})}), ErrorCode::bad_argument, {"Q, K, V"}));
  EXPECT_TRUE(fails_with(check(pointwise2(), {T({2})}), ErrorCode::bad_argument, {"x, y"}));
  // A norm chain's missing operands are not fused epilogue operands.
  EXPECT_TRUE(fails_with(check(norm_chain(true, true, false), {T({2, 3}), T({2, 3})}), ErrorCode::bad_argument,
                         {"x, residual, gamma"}));
}

TEST(Operands, MalformedTensorsAreShapeMismatches) {
  const Region r = matmul(false, false);
  EXPECT_TRUE(fails_with(check(r, {Tensor({2, 3}, std::vector<float>(5)), T({3, 4})}), ErrorCode::shape_mismatch,
                         {"operand A", "[2, 3]", "5"}));
  EXPECT_TRUE(fails_with(check(r, {T({2, 3}), Tensor({-3, 4}, {})}), ErrorCode::shape_mismatch, {"operand B"}));
  EXPECT_TRUE(
      fails_with(check(r, {T({2, 3}), Tensor({1LL << 40, 1LL << 40}, {})}), ErrorCode::shape_mismatch, {"operand B"}));
}

// ---- GEMM kinds -----------------------------------------------------------------------

TEST(Operands, FusedShapes) {
  auto p = check(fused({"bias"}, true), {T({2, 3}), T({3, 5}), T({5}), T({2, 5})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->M, 2);
  EXPECT_EQ(p->K, 3);
  EXPECT_EQ(p->N, 5);
  EXPECT_EQ(p->output, (Shape{2, 5}));
  EXPECT_TRUE(check(fused({"bias"}), {T({2, 3}), T({3, 5}), T({1, 5})}).ok()); // [1, N] bias
}

TEST(Operands, FusedShapeErrorsNameOperandAndShapes) {
  EXPECT_TRUE(fails_with(check(fused({"relu"}), {T({2, 3, 1}), T({3, 5})}), ErrorCode::shape_mismatch,
                         {"operand A", "[M, K]", "[2, 3, 1]"}));
  EXPECT_TRUE(fails_with(check(fused({"relu"}), {T({2, 3}), T({4, 5})}), ErrorCode::shape_mismatch,
                         {"operand B", "[3, N]", "[4, 5]"}));
  EXPECT_TRUE(fails_with(check(fused({"relu"}), {T({2, 3}), T({3})}), ErrorCode::shape_mismatch, {"operand B"}));
  EXPECT_TRUE(fails_with(check(fused({"bias"}), {T({2, 3}), T({3, 5}), T({4})}), ErrorCode::shape_mismatch,
                         {"operand bias", "[5]", "[4]"}));
  EXPECT_TRUE(fails_with(check(fused({"bias"}), {T({2, 3}), T({3, 5}), T({5, 1})}), ErrorCode::shape_mismatch,
                         {"operand bias"}));
  EXPECT_TRUE(fails_with(check(fused({"bias"}), {T({2, 3}), T({3, 5}), T({2, 5})}), ErrorCode::shape_mismatch,
                         {"operand bias"}));
  EXPECT_TRUE(fails_with(check(fused({}, true), {T({2, 3}), T({3, 5}), T({5, 2})}), ErrorCode::shape_mismatch,
                         {"operand residual", "[2, 5]", "[5, 2]"}));
  EXPECT_TRUE(fails_with(check(fused({}, true), {T({2, 3}), T({3, 5}), T({5})}), ErrorCode::shape_mismatch,
                         {"operand residual"}));
}

TEST(Operands, FusedColMajorOperandsArriveAsPhysicalArrays) {
  // col_major A[M=2, K=3] is the row-major array [3, 2]; col_major B[K=3, N=5] is [5, 3].
  auto p = check(fused({"relu"}, false, "col_major", "col_major"), {T({3, 2}), T({5, 3})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->M, 2);
  EXPECT_EQ(p->K, 3);
  EXPECT_EQ(p->N, 5);
  EXPECT_EQ(p->output, (Shape{2, 5}));
  // The natural orientation is wrong for a col_major region.
  EXPECT_TRUE(fails_with(check(fused({"relu"}, false, "col_major"), {T({2, 3}), T({3, 5})}), ErrorCode::shape_mismatch,
                         {"operand B", "[2, N]"}));
  EXPECT_TRUE(fails_with(check(fused({"relu"}, false, "row_major", "col_major"), {T({2, 3}), T({3, 5})}),
                         ErrorCode::shape_mismatch, {"operand B", "[N, 3]", "[3, 5]"}));
}

TEST(Operands, MatmulFlipsByFlagsNeverByShape) {
  auto p = check(matmul(true, false), {T({4, 2}), T({4, 5})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->M, 2);
  EXPECT_EQ(p->K, 4);
  EXPECT_EQ(p->N, 5);
  p = check(matmul(false, true), {T({2, 4}), T({5, 4})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->N, 5);
  p = check(matmul(true, true), {T({4, 2}), T({5, 4})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->output, (Shape{2, 5}));
  // [2,3] x [2,4] would fit if A were flipped, but no flag says so.
  EXPECT_TRUE(fails_with(check(matmul(false, false), {T({2, 3}), T({2, 4})}), ErrorCode::shape_mismatch,
                         {"operand B", "[3, N]", "[2, 4]"}));
  EXPECT_TRUE(fails_with(check(matmul(true, false), {T({2, 3}), T({3, 4})}), ErrorCode::shape_mismatch,
                         {"operand B", "[2, N]"}));
}

TEST(Operands, ZeroSizeDimensionsAreAllowed) {
  auto p = check(matmul(false, false), {T({0, 3}), T({3, 4})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->output, (Shape{0, 4}));
  p = check(matmul(false, false), {T({2, 0}), T({0, 4})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->K, 0);
  EXPECT_TRUE(check(fused({"bias"}), {T({2, 3}), T({3, 0}), T({0})}).ok());
}

TEST(Operands, GatedShapes) {
  auto p = check(Region{*GatedMatmulRegion::make({})}, {T({2, 3}), T({3, 4}), T({3, 4})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->M, 2);
  EXPECT_EQ(p->K, 3);
  EXPECT_EQ(p->N, 4);
  EXPECT_EQ(p->output, (Shape{2, 4}));
  const Region g{*GatedMatmulRegion::make({})};
  EXPECT_TRUE(
      fails_with(check(g, {T({2, 3}), T({4, 4}), T({4, 4})}), ErrorCode::shape_mismatch, {"operand Wg", "[3, N]"}));
  EXPECT_TRUE(fails_with(check(g, {T({2, 3}), T({3, 4}), T({3, 5})}), ErrorCode::shape_mismatch,
                         {"operand Wu", "[3, 4]", "[3, 5]"}));
}

// ---- attention ------------------------------------------------------------------------

TEST(Operands, AttentionRank2) {
  auto p = check(attention(), {T({5, 8}), T({7, 8}), T({7, 3})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->M, 5);
  EXPECT_EQ(p->Nk, 7);
  EXPECT_EQ(p->D, 8);
  EXPECT_EQ(p->Dv, 3);
  EXPECT_EQ(p->batch, 1);
  EXPECT_EQ(p->heads, 1);
  EXPECT_EQ(p->kv_heads, 1);
  EXPECT_EQ(p->output, (Shape{5, 3}));
}

TEST(Operands, AttentionTransposedQAndK) {
  // q_transposed: raw Q per head is [D, M]; k_transposed: raw K per head is [D, Nk].
  auto p = check(attention(true, true), {T({8, 5}), T({8, 7}), T({7, 3})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->M, 5);
  EXPECT_EQ(p->Nk, 7);
  EXPECT_EQ(p->D, 8);
  EXPECT_EQ(p->output, (Shape{5, 3}));
  EXPECT_TRUE(fails_with(check(attention(false, true), {T({5, 8}), T({7, 8}), T({7, 3})}), ErrorCode::shape_mismatch,
                         {"operand K", "[8, Nk]", "[7, 8]"}));
}

TEST(Operands, AttentionGroupedQueryHeads) {
  auto p = check(attention(), {T({8, 5, 16}), T({2, 7, 16}), T({2, 7, 4})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->heads, 8);
  EXPECT_EQ(p->kv_heads, 2);
  EXPECT_EQ(p->batch, 1);
  EXPECT_EQ(p->output, (Shape{8, 5, 4}));
  p = check(attention(), {T({3, 8, 5, 16}), T({3, 4, 7, 16}), T({3, 4, 7, 4})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->batch, 3);
  EXPECT_EQ(p->heads, 8);
  EXPECT_EQ(p->kv_heads, 4);
  EXPECT_EQ(p->output, (Shape{3, 8, 5, 4}));
  // 6 query heads cannot share 4 KV heads; 0 KV heads is never valid.
  EXPECT_TRUE(fails_with(check(attention(), {T({6, 5, 16}), T({4, 7, 16}), T({4, 7, 4})}), ErrorCode::shape_mismatch,
                         {"operand K", "divide"}));
  EXPECT_TRUE(fails_with(check(attention(), {T({6, 5, 16}), T({0, 7, 16}), T({0, 7, 4})}), ErrorCode::shape_mismatch,
                         {"operand K"}));
}

TEST(Operands, AttentionShapeErrors) {
  const Region a = attention();
  EXPECT_TRUE(fails_with(check(a, {T({5}), T({7, 8}), T({7, 3})}), ErrorCode::shape_mismatch, {"operand Q"}));
  EXPECT_TRUE(
      fails_with(check(a, {T({1, 1, 1, 5, 8}), T({7, 8}), T({7, 3})}), ErrorCode::shape_mismatch, {"operand Q"}));
  EXPECT_TRUE(fails_with(check(a, {T({2, 5, 8}), T({7, 8}), T({7, 3})}), ErrorCode::shape_mismatch, {"operand K"}));
  EXPECT_TRUE(fails_with(check(a, {T({5, 8}), T({7, 9}), T({7, 3})}), ErrorCode::shape_mismatch,
                         {"operand K", "[Nk, 8]", "[7, 9]"}));
  EXPECT_TRUE(fails_with(check(a, {T({5, 8}), T({7, 8}), T({6, 3})}), ErrorCode::shape_mismatch,
                         {"operand V", "[7, Dv]", "[6, 3]"}));
  EXPECT_TRUE(fails_with(check(a, {T({5, 8}), T({7, 8}), T({1, 7, 3})}), ErrorCode::shape_mismatch, {"operand V"}));
  EXPECT_TRUE(fails_with(check(a, {T({4, 5, 8}), T({2, 7, 8}), T({4, 7, 3})}), ErrorCode::shape_mismatch,
                         {"operand V", "[2, 7, Dv]"}));
  EXPECT_TRUE(fails_with(check(a, {T({3, 4, 5, 8}), T({2, 4, 7, 8}), T({2, 4, 7, 3})}), ErrorCode::shape_mismatch,
                         {"operand K", "[3, Hkv, Nk, 8]"}));
}

TEST(Operands, AttentionWithNoKeysIsAllowed) {
  auto p = check(attention(), {T({4, 8}), T({0, 8}), T({0, 3})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->Nk, 0);
  EXPECT_EQ(p->output, (Shape{4, 3}));
}

// ---- pointwise, reduce, norm chain --------------------------------------------------------

TEST(Operands, PointwiseOutputIsTheBroadcastShape) {
  auto p = check(pointwise2(), {T({4, 3}), T({3})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->output, (Shape{4, 3}));
  p = check(pointwise2(), {T({1}), T({2, 1, 3})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->output, (Shape{2, 1, 3}));
  p = check(pointwise2(), {T({}), T({})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->output, Shape{});
  EXPECT_TRUE(
      fails_with(check(pointwise2(), {T({4, 3}), T({4})}), ErrorCode::shape_mismatch, {"'y'", "[4, 3]", "[4]"}));
  EXPECT_TRUE(fails_with(check(pointwise2(), {T({2, 3}), T({3, 3})}), ErrorCode::shape_mismatch, {"'y'"}));
}

TEST(Operands, PointwiseReduceDropsTheLastAxis) {
  auto p = check(reduce("sum"), {T({4, 3})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->output, Shape{4});
  EXPECT_EQ(p->rows, 4);
  EXPECT_EQ(p->row_len, 3);
  p = check(reduce("mean"), {T({5})}); // numpy: reducing a vector gives a 0-d scalar
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->output, Shape{});
  EXPECT_EQ(p->rows, 1);
  EXPECT_EQ(p->row_len, 5);
  p = check(reduce("sum"), {T({4, 0})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rows, 4);
  EXPECT_EQ(p->row_len, 0);
  EXPECT_TRUE(fails_with(check(reduce("sum"), {T({})}), ErrorCode::shape_mismatch, {"'x'", "rank >= 1"}));
  EXPECT_TRUE(fails_with(check(reduce("amax"), {T({4, 0})}), ErrorCode::shape_mismatch, {"'x'", "amax"}));
  EXPECT_TRUE(fails_with(check(reduce("amin"), {T({0})}), ErrorCode::shape_mismatch, {"amin"}));
}

TEST(Operands, NormChainShapes) {
  auto p = check(norm_chain(true, true, true), {T({2, 3, 8}), T({2, 3, 8}), T({8}), T({8})});
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->rows, 6);
  EXPECT_EQ(p->row_len, 8);
  EXPECT_EQ(p->output, (Shape{2, 3, 8}));
  p = check(norm_chain(false, false, false), {T({8})});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rows, 1);
  EXPECT_TRUE(fails_with(check(norm_chain(false, false, false), {T({})}), ErrorCode::shape_mismatch, {"operand x"}));
  EXPECT_TRUE(fails_with(check(norm_chain(true, false, false), {T({2, 8}), T({8})}), ErrorCode::shape_mismatch,
                         {"operand residual", "[2, 8]", "[8]"}));
  EXPECT_TRUE(fails_with(check(norm_chain(false, true, false), {T({2, 8}), T({1, 8})}), ErrorCode::shape_mismatch,
                         {"operand gamma", "[8]", "[1, 8]"}));
  EXPECT_TRUE(fails_with(check(norm_chain(false, true, true), {T({2, 8}), T({8}), T({7})}), ErrorCode::shape_mismatch,
                         {"operand beta", "[8]", "[7]"}));
  // beta alone is the second operand.
  EXPECT_TRUE(check(norm_chain(false, false, true), {T({2, 8}), T({8})}).ok());
}

// Kernels read their operands with aligned loads and the x86 lanes' packing walks whole cache
// lines, so every byte buffer a call prepares starts on one (a std::string's started 16 bytes off).
TEST(PreparedCall, OperandBytesStartOnCacheLines) {
  const std::vector<Tensor> ops = {Tensor({3, 5}, std::vector<float>(15, 1.5f)),
                                   Tensor({5, 7}, std::vector<float>(35, -2.0f))};
  for (const char* dtype : {"bf16", "f16", "f32"}) {
    const Region r{*MatmulRegion::make({dtype, false, false})};
    auto call = codegen::prepare_call(r, ops, codegen::OperandUse::borrow);
    ASSERT_TRUE(call.ok()) << call.error().str();
    const bool f32 = std::string(dtype) == "f32";
    // An f32 call borrows the tensors themselves (already on cache lines).
    ASSERT_EQ(call->operand_bytes.size(), f32 ? 0u : 2u) << dtype;
    if (f32) call = codegen::prepare_call(r, ops, codegen::OperandUse::copy);
    ASSERT_EQ(call->operand_bytes.size(), 2u) << dtype;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(call->operand_bytes[i].size(), ops[i].data.size() * (f32 ? 4 : 2)) << dtype;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(call->operand_bytes[i].data()) % 64, 0u) << dtype << " operand " << i;
    }
  }
}
