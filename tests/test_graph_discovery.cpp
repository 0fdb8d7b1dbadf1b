// Discovery (SPEC §6) on hand-written graphs, and whole-graph execution of what it finds.
#include <gtest/gtest.h>

#include "fusor/discovery.hpp"
#include "fusor/model_exec.hpp"
#include "support/compare.hpp"
#include "support/discovery.hpp"

namespace fusor {
namespace {

using testing::discover;

std::vector<std::string> kinds(const Discovery& d) {
  std::vector<std::string> out;
  for (const auto& r : d.regions) out.emplace_back(region_kind_name(region_kind(r.region)));
  return out;
}

const std::string kMatmulHead = "input x: f32[4, 8]\nconst w: f32[8, 6] = normal(seed=1, scale=0.3)\n"
                                "const b: f32[6] = normal(seed=2, scale=0.1)\nconst b2: f32[6] = 0.5\n"
                                "input r: f32[4, 6]\n";

TEST(Discovery, BiasThenResidualByOperandShape) {
  auto f = discover(kMatmulHead + "y = matmul(x, w)\nz = add(y, b)\ng = gelu(z)\no = add(r, g)\noutput o\n");
  ASSERT_EQ(kinds(f.d), (std::vector<std::string>{"fused"}));
  const auto& fr = std::get<FusedRegion>(f.d.regions[0].region);
  EXPECT_EQ(fr.epilogue(), (std::vector<Op>{Op::bias, Op::gelu}));
  EXPECT_TRUE(fr.residual());
  EXPECT_EQ(f.d.regions[0].operands, (std::vector<std::string>{"x", "w", "b", "r"}));
  EXPECT_TRUE(f.d.unfused.empty());
}

TEST(Discovery, StopsBeforeASecondBias) {
  auto f = discover(kMatmulHead + "y = matmul(x, w)\nz = add(y, b)\nz2 = add(z, b2)\noutput z2\n");
  ASSERT_EQ(f.d.regions.size(), 1u);
  EXPECT_EQ(f.d.regions[0].nodes.size(), 2u); // matmul + the first bias
  EXPECT_EQ(f.d.regions[0].output, "z");
  ASSERT_EQ(f.d.unfused.size(), 1u);
  EXPECT_EQ(f.graph.nodes[f.d.unfused[0].node].outputs[0], "z2");
}

TEST(Discovery, OnlySingleConsumerValuesFuse) {
  // y feeds both the bias add and the output: the matmul stays bare.
  auto f = discover(kMatmulHead + "y = matmul(x, w)\nz = add(y, b)\noutput z, y\n");
  ASSERT_EQ(kinds(f.d), (std::vector<std::string>{"matmul"}));
  EXPECT_EQ(f.d.regions[0].nodes.size(), 1u);
}

TEST(Discovery, GatedBeforeMatmulChains) {
  auto f = discover("input a: f32[4, 8]\nconst wg: f32[8, 5] = normal(seed=1, scale=0.3)\n"
                    "const wu: f32[8, 5] = normal(seed=2, scale=0.3)\n"
                    "g = matmul(a, wg)\ns = silu(g)\nu = matmul(a, wu)\no = mul(u, s)\noutput o\n");
  ASSERT_EQ(kinds(f.d), (std::vector<std::string>{"gated"}));
  EXPECT_EQ(std::get<GatedMatmulRegion>(f.d.regions[0].region).gate_act(), Op::silu);
  EXPECT_EQ(f.d.regions[0].operands, (std::vector<std::string>{"a", "wg", "wu"}));
}

const std::string kAttention = "input q: f32[2, 4, 8]\ninput k: f32[2, 6, 8]\ninput v: f32[2, 6, 8]\n"
                               "kt = transpose(k; perm=[0, 2, 1])\ns = matmul(q, kt)\n";

TEST(Discovery, AttentionAbsorbsAScalarConstantScale) {
  auto f = discover(kAttention +
                    "const c: f32[] = 0.25\nt = mul(s, c)\np = softmax(t; axis=-1)\no = matmul(p, v)\noutput o\n");
  ASSERT_EQ(kinds(f.d), (std::vector<std::string>{"attention"}));
  const auto& a = std::get<AttentionRegion>(f.d.regions[0].region);
  EXPECT_DOUBLE_EQ(a.scale(), 0.25);
  EXPECT_FALSE(a.k_transposed()); // the transpose was absorbed: K passed as stored
  EXPECT_EQ(f.d.regions[0].nodes.size(), 5u);
}

TEST(Discovery, AttentionDoesNotAbsorbATensorScale) {
  auto f = discover(kAttention +
                    "input c: f32[2, 4, 6]\nt = mul(s, c)\np = softmax(t; axis=-1)\no = matmul(p, v)\noutput o\n");
  for (const auto& r : f.d.regions) EXPECT_NE(region_kind(r.region), RegionKind::attention);
}

TEST(Discovery, NormChainFiresOnlyBeyondTheBareNorm) {
  auto bare = discover("input x: f32[3, 8]\ny = rmsnorm(x; axis=-1)\noutput y\n");
  EXPECT_TRUE(bare.d.regions.empty());
  ASSERT_EQ(bare.d.unfused.size(), 1u);
  EXPECT_NE(bare.d.unfused[0].reason.find("bare norm"), std::string::npos);
  auto chain = discover("input x: f32[3, 8]\ninput r: f32[3, 8]\nconst g: f32[8] = 2.0\nconst b: f32[8] = 1.0\n"
                        "s = add(x, r)\ny = layer_norm(s; axis=-1)\nz = mul(y, g)\nw = add(z, b)\noutput w\n");
  ASSERT_EQ(kinds(chain.d), (std::vector<std::string>{"norm_chain"}));
  const auto& n = std::get<NormChainRegion>(chain.d.regions[0].region);
  EXPECT_TRUE(n.add_residual() && n.weight() && n.bias());
  EXPECT_EQ(chain.d.regions[0].operands, (std::vector<std::string>{"x", "r", "g", "b"}));
}

TEST(Discovery, PointwiseDagWithSharedValueAndOneExit) {
  auto f = discover("input x: f32[4, 8]\ninput y: f32[8]\ns = sigmoid(x)\nm = mul(x, s)\nt = tanh(m)\n"
                    "u = add(t, y)\nr = reduce_sum(u; axes=[-1], keepdims=0)\noutput r\n");
  ASSERT_EQ(kinds(f.d), (std::vector<std::string>{"pointwise_reduce"}));
  EXPECT_EQ(f.d.regions[0].nodes.size(), 5u);
  EXPECT_EQ(f.d.regions[0].operands, (std::vector<std::string>{"x", "y"}));
}

// The fused execution of every pattern above matches the graph run op by op natively.
TEST(Discovery, ExecutionWithRegionsMatchesNativeExecution) {
  testing::use_test_cache();
  const std::string graphs[] = {
      kMatmulHead + "y = matmul(x, w)\nz = add(y, b)\ng = gelu(z)\no = add(r, g)\noutput o\n",
      kAttention + "const c: f32[] = 0.25\nt = mul(s, c)\np = softmax(t; axis=-1)\no = matmul(p, v)\noutput o\n",
      "input x: f32[3, 8]\ninput r: f32[3, 8]\nconst g: f32[8] = normal(seed=5, scale=1.0)\ns = add(x, r)\n"
      "o = rmsnorm(s, g; axis=-1, epsilon=1e-06)\noutput o\n",
      "input x: f32[4, 8]\ninput y: f32[8]\ns = sigmoid(x)\nm = mul(x, s)\nt = tanh(m)\nu = add(t, y)\n"
      "o = reduce_max(u; axes=[-1], keepdims=1)\noutput o\n",
  };
  for (const auto& text : graphs) {
    auto f = discover(text);
    ASSERT_EQ(f.d.regions.size(), 1u) << text;
    ValueMap in;
    for (size_t k = 0; k < f.graph.inputs.size(); ++k)
      in[f.graph.inputs[k].name] =
          GraphTensor::f32(f.graph.inputs[k].shape, normal_values(shape_numel(f.graph.inputs[k].shape), 10 + k, 1.0));
    auto fused = execute_graph(f.graph, f.d, in);
    ASSERT_TRUE(fused.ok()) << fused.error().str();
    ASSERT_EQ(fused->regions.size(), 1u);
    EXPECT_NE(fused->regions[0].tag, "") << text;
    auto native = run_graph_native(f.graph, in);
    ASSERT_TRUE(native.ok());
    EXPECT_TRUE(testing::all_close(fused->values.at("o").to_tensor(), native->at("o").to_tensor(), 1e-4, 1e-4)) << text;
  }
}

// Repeated runs keep the region operands (RegionOperands): constants are converted once,
// computed values are lent and returned. New inputs must still give new results, a value
// used twice by one region (x as A and as the residual) reaches both slots, and the values
// a region borrowed are intact afterwards for the nodes after it.
TEST(Discovery, KeptOperandsFollowNewInputsAcrossRuns) {
  testing::use_test_cache();
  auto f = discover("input x: f32[4, 8]\nconst w: f32[8, 8] = normal(seed=1, scale=0.3)\n"
                    "const b: f32[8] = normal(seed=2, scale=0.1)\n"
                    "y = matmul(x, w)\nz = add(y, b)\no1 = add(z, x)\no = mul(o1, x)\noutput o\n");
  ASSERT_EQ(f.d.regions.size(), 1u);
  EXPECT_EQ(f.d.regions[0].operands, (std::vector<std::string>{"x", "w", "b", "x"}));
  RegionOperands kept;
  for (std::uint64_t seed = 0; seed < 3; ++seed) {
    ValueMap in;
    in["x"] = GraphTensor::f32({4, 8}, normal_values(32, 40 + seed, 1.0));
    auto fused = execute_graph(f.graph, f.d, in, &kept);
    ASSERT_TRUE(fused.ok()) << fused.error().str();
    ASSERT_EQ(fused->regions.size(), 1u);
    EXPECT_EQ(fused->values.at("x").f, in["x"].f) << "x was lent to the region and must come back whole";
    auto native = run_graph_native(f.graph, in);
    ASSERT_TRUE(native.ok());
    EXPECT_TRUE(testing::all_close(fused->values.at("o").to_tensor(), native->at("o").to_tensor(), 1e-4, 1e-4))
        << "run " << seed;
  }
}

} // namespace
} // namespace fusor
