// The op-graph text form: parse, print, round-trip, errors with positions.
#include <gtest/gtest.h>

#include <cmath>

#include "fusor/graph.hpp"
#include "fusor/graph_exec.hpp"

namespace fusor {
namespace {

constexpr const char* kGraph = R"(# a comment
graph small
input x: f32[2, 3]
const w: f32[3, 2] = [1, 0, 0, 1, 1, 1]
const half: f32[] = 0.5
const idx: i64[2] = [1, -1]
y = matmul(x, w)
z = mul(y, half)
s = softmax(z; axis=-1)
a, b = layer_norm(z, _, _; axis=-1, epsilon=1e-05)
g = gather(x, idx; axis=1)
output s, a, g
)";

TEST(GraphText, ParsesNodesAttributesAndAbsentInputs) {
  auto g = parse_graph(kGraph);
  ASSERT_TRUE(g.ok()) << g.error().str();
  EXPECT_EQ(g->name, "small");
  ASSERT_EQ(g->inputs.size(), 1u);
  EXPECT_EQ(g->inputs[0].shape, (Shape{2, 3}));
  ASSERT_EQ(g->nodes.size(), 5u);
  const Node& ln = g->nodes[3];
  EXPECT_EQ(ln.outputs, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ln.inputs, (std::vector<std::string>{"z", "", ""}));
  EXPECT_EQ(ln.attr_int("axis", 0), -1);
  EXPECT_DOUBLE_EQ(ln.attr_float("epsilon", 0), 1e-5);
  EXPECT_EQ(g->constants.at("idx").i, (std::vector<std::int64_t>{1, -1}));
  EXPECT_EQ(g->outputs, (std::vector<std::string>{"s", "a", "g"}));
}

TEST(GraphText, PrintThenParseIsTheSameGraph) {
  auto g = parse_graph(kGraph);
  ASSERT_TRUE(g.ok());
  const std::string text = print_graph(*g);
  auto again = parse_graph(text);
  ASSERT_TRUE(again.ok()) << again.error().str() << "\n" << text;
  EXPECT_EQ(print_graph(*again), text);
  EXPECT_EQ(again->constants, g->constants);
  EXPECT_EQ(again->nodes.size(), g->nodes.size());
  // A float attribute stays a float (1.0 prints with its point).
  Graph h = *g;
  h.nodes[0].attrs["alpha"] = 1.0;
  auto h2 = parse_graph(print_graph(h));
  ASSERT_TRUE(h2.ok());
  EXPECT_TRUE(std::holds_alternative<double>(h2->nodes[0].attrs.at("alpha")));
}

TEST(GraphText, RunsNatively) {
  auto g = parse_graph(kGraph);
  ASSERT_TRUE(g.ok());
  ValueMap in{{"x", GraphTensor::f32({2, 3}, {1, 2, 3, 4, 5, 6})}};
  auto v = run_graph_native(*g, in);
  ASSERT_TRUE(v.ok()) << v.error().str();
  // y = x @ w: rows [1+3, 2+3] = [4, 5] and [4+6, 5+6] = [10, 11]; z = y / 2.
  const auto& s = v->at("s");
  // softmax([2, 2.5]) = [1/(1+e^0.5), e^0.5/(1+e^0.5)]
  EXPECT_NEAR(s.f[0], 1.0 / (1.0 + std::exp(0.5)), 1e-6);
  EXPECT_NEAR(s.f[3], std::exp(0.5) / (1.0 + std::exp(0.5)), 1e-6);
  // layer_norm of two values a < b: [-1, 1] up to eps.
  EXPECT_NEAR(v->at("a").f[0], -1.0, 1e-3);
  EXPECT_NEAR(v->at("a").f[1], 1.0, 1e-3);
  // gather columns 1 and -1 (= 2).
  EXPECT_EQ(v->at("g").f, (std::vector<float>{2, 3, 5, 6}));
}

TEST(GraphText, NormalConstantsAreDeterministic) {
  auto a = parse_graph("input x: f32[4]\nconst w: f32[4] = normal(seed=3, scale=0.5)\ny = add(x, w)\noutput y\n");
  auto b = parse_graph("input x: f32[4]\nconst w: f32[4] = normal(seed=3, scale=0.5)\ny = add(x, w)\noutput y\n");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->constants.at("w").f, b->constants.at("w").f);
  EXPECT_EQ(a->constants.at("w").f, normal_values(4, 3, 0.5));
  EXPECT_NE(normal_values(4, 3, 0.5), normal_values(4, 4, 0.5));
}

TEST(GraphText, ErrorsNameLineAndColumn) {
  auto bad = parse_graph("input x: f32[2]\ny = add(x x)\noutput y\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::parse);
  EXPECT_NE(bad.error().message.find("2:11"), std::string::npos) << bad.error().message;
  auto undefined = parse_graph("input x: f32[2]\ny = add(x, q)\noutput y\n");
  ASSERT_FALSE(undefined.ok());
  EXPECT_EQ(undefined.error().code, ErrorCode::graph_invalid);
  EXPECT_NE(undefined.error().message.find("'q'"), std::string::npos);
  auto count = parse_graph("const w: f32[3] = [1, 2]\noutput w\n");
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.error().message.find("needs 3 values"), std::string::npos) << count.error().message;
  EXPECT_FALSE(parse_graph("input x: f32[2]\n").ok()); // no output line
}

} // namespace
} // namespace fusor
