// --allow-reference: ONNX ops outside fusor's set imported as "ref.<Op>" nodes, evaluated
// by the reference table (src/graph/kernels_reference.cpp), listed but never fused by
// discovery, round-tripped by the text form. Expected values are hand-computed or follow
// from identities (e.g. HardSigmoid(α=β=½)(cos x) = cos²(x/2)).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <sstream>
#include <string>
#include <unistd.h>

#include "fusor/discovery.hpp"
#include "fusor/graph_exec.hpp"
#include "fusor/model_exec.hpp"
#include "fusor/model_run.hpp"
#include "fusor/onnx_import.hpp"
#include "support/compare.hpp"
#include "support/discovery.hpp"
#include "support/onnx_writer.hpp"

namespace fusor {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();

using namespace testing::onnx_writer;

constexpr int kFloat = 1;

// AttributeProto: INT (type 2), INTS (type 7).
std::string int_attr(const std::string& name, std::int64_t v) {
  return field_bytes(5, field_bytes(1, name) + field_varint(3, static_cast<std::uint64_t>(v)) + field_varint(20, 2));
}
std::string ints_attr(const std::string& name, std::initializer_list<std::int64_t> v) {
  std::string a = field_bytes(1, name);
  for (auto x : v) a += field_varint(8, static_cast<std::uint64_t>(x));
  return field_bytes(5, a + field_varint(20, 7));
}

// A GraphProto node entry: NodeProto{input..., output, name, op_type, attribute...}.
std::string node(const std::string& op, std::initializer_list<std::string> ins, const std::string& out,
                 const std::string& name, const std::string& attrs = {}) {
  std::string n;
  for (const auto& i : ins) n += field_bytes(1, i);
  return field_bytes(1, n + field_bytes(2, out) + field_bytes(3, name) + field_bytes(4, op) + attrs);
}

std::string model(const std::string& nodes, const std::string& input, const std::string& output, int opset) {
  const std::string graph = nodes + field_bytes(2, "g") + field_bytes(11, input) + field_bytes(12, output);
  return field_varint(1, 9) + field_bytes(8, field_bytes(1, "") + field_varint(2, static_cast<std::uint64_t>(opset))) +
         field_bytes(7, graph);
}

Expected<Graph> import(const std::string& bytes, bool allow_reference) {
  return import_onnx_bytes(std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()), "test model",
                           {.allow_reference = allow_reference});
}

// x[2, 3] → Cos → HardSigmoid(½, ½) → Pow 2 → ReduceL2(axis 1, keepdims 0) → LogSoftmax.
// Cos, ReduceL2 and LogSoftmax are outside fusor's set; HardSigmoid and Pow are native.
std::string chain_model() {
  const std::string nodes =
      node("Cos", {"x"}, "c", "cos0") +
      node("HardSigmoid", {"c"}, "h", "hsig0", float_attr("alpha", 0.5f) + float_attr("beta", 0.5f)) +
      node("Constant", {}, "two", "const_two", float_attr("value_float", 2.0f)) +
      node("Pow", {"h", "two"}, "p", "pow0") +
      node("Constant", {}, "axes", "const_axes", ints_attr("value_ints", {1})) +
      node("ReduceL2", {"p", "axes"}, "r", "l2", int_attr("keepdims", 0)) + node("LogSoftmax", {"r"}, "y", "lsm0");
  return model(nodes, value_info("x", kFloat, {2, 3}), value_info("y", kFloat, {2}), 18);
}

class ReferenceImport : public ::testing::Test {
protected:
  void SetUp() override {
    if (!onnx_import_available()) GTEST_SKIP() << "built without libonnx";
  }
};

TEST_F(ReferenceImport, WithoutTheOptionAnOpOfTheTableSaysHowToRunIt) {
  auto g = import(chain_model(), false);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, ErrorCode::onnx_unsupported_op);
  const std::string& m = g.error().message;
  EXPECT_NE(m.find("'Cos'"), std::string::npos) << m;
  EXPECT_NE(m.find("cos0"), std::string::npos) << m;
  EXPECT_NE(m.find("--allow-reference"), std::string::npos) << m;
}

TEST_F(ReferenceImport, WithTheOptionTheChainRunsAndMatchesHandComputedValues) {
  auto g = import(chain_model(), true);
  ASSERT_TRUE(g.ok()) << g.error().str();
  std::vector<std::string> ops;
  for (const auto& n : g->nodes) ops.push_back(n.op);
  EXPECT_NE(std::find(ops.begin(), ops.end(), "ref.Cos"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "ref.ReduceL2"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "ref.LogSoftmax"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "pow"), ops.end()); // native ops stay native

  // cos x = 1, 0, -1 | -½, ½, -1 → h = cos²(x/2) = 1, ½, 0 | ¼, ¾, 0 → p = h² →
  // r = √(1 + 1/16) and √(1/256 + 9/16) → y = r − log(e^r0 + e^r1).
  constexpr double pi = std::numbers::pi;
  const std::vector<double> x = {0, pi / 2, pi, 2 * pi / 3, pi / 3, -pi};
  std::vector<float> xf(x.begin(), x.end());
  auto v = run_graph_native(*g, {{"x", GraphTensor::f32({2, 3}, xf)}});
  ASSERT_TRUE(v.ok()) << v.error().str();
  const double r0 = std::sqrt(1.0625), r1 = std::sqrt(0.3203125);
  const double lse = std::log(std::exp(r0) + std::exp(r1));
  const GraphTensor& y = v->at("y");
  ASSERT_EQ(y.shape, (Shape{2}));
  EXPECT_NEAR(y.f[0], r0 - lse, 1e-6);
  EXPECT_NEAR(y.f[1], r1 - lse, 1e-6);
  // The identity holds elementwise on the intermediate too: h = cos²(x/2).
  const GraphTensor& h = v->at("h");
  for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(h.f[k], std::pow(std::cos(xf[k] / 2.0), 2), 1e-6) << k;
}

TEST_F(ReferenceImport, AnOpInNeitherSetStillFailsNamingIt) {
  const std::string m = model(node("NonMaxSuppression", {"x"}, "y", "nms0"), value_info("x", kFloat, {1, 4, 4}),
                              value_info("y", kFloat, {1, 3}), 18);
  for (bool allow : {false, true}) {
    auto g = import(m, allow);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.error().code, ErrorCode::onnx_unsupported_op);
    EXPECT_NE(g.error().message.find("NonMaxSuppression"), std::string::npos) << g.error().message;
    EXPECT_NE(g.error().message.find("nms0"), std::string::npos) << g.error().message;
    EXPECT_EQ(g.error().message.find("--allow-reference"), std::string::npos) << g.error().message;
  }
}

TEST_F(ReferenceImport, OldOpsetSemanticsAreBroughtToTheCurrentForm) {
  // Hardmax before opset 13 flattens to 2-D at axis 1: one 1 per batch item of [2, 2, 2];
  // from opset 13 it works along the last axis.
  const std::vector<float> xv = {1, 5, 3, 2, 0, 0, 7, 1};
  for (int opset : {11, 13}) {
    auto g = import(model(node("Hardmax", {"x"}, "y", "hm"), value_info("x", kFloat, {2, 2, 2}),
                          value_info("y", kFloat, {2, 2, 2}), opset),
                    true);
    ASSERT_TRUE(g.ok()) << g.error().str();
    auto v = run_graph_native(*g, {{"x", GraphTensor::f32({2, 2, 2}, xv)}});
    ASSERT_TRUE(v.ok()) << v.error().str();
    const std::vector<float> want =
        opset == 11 ? std::vector<float>{0, 1, 0, 0, 0, 0, 1, 0} : std::vector<float>{0, 1, 1, 0, 1, 0, 1, 0};
    EXPECT_EQ(v->at("y").f, want) << "opset " << opset;
  }
  // Clip before opset 11 takes min/max as attributes.
  auto g = import(model(node("Clip", {"x"}, "y", "clip6", float_attr("min", -1.0f) + float_attr("max", 1.0f)),
                        value_info("x", kFloat, {3}), value_info("y", kFloat, {3}), 6),
                  true);
  ASSERT_TRUE(g.ok()) << g.error().str();
  auto v = run_graph_native(*g, {{"x", GraphTensor::f32({3}, {-2.0f, 0.5f, 3.0f})}});
  ASSERT_TRUE(v.ok()) << v.error().str();
  EXPECT_EQ(v->at("y").f, (std::vector<float>{-1.0f, 0.5f, 1.0f}));
}

TEST_F(ReferenceImport, TextFormRoundTripsAnImportedReferenceNode) {
  auto g = import(chain_model(), true);
  ASSERT_TRUE(g.ok()) << g.error().str();
  const std::string text = print_graph(*g);
  EXPECT_NE(text.find("= ref.Cos(x)"), std::string::npos) << text;
  auto back = parse_graph(text);
  ASSERT_TRUE(back.ok()) << back.error().str() << "\n" << text;
  ASSERT_EQ(back->nodes.size(), g->nodes.size());
  for (size_t k = 0; k < g->nodes.size(); ++k) {
    EXPECT_EQ(back->nodes[k].op, g->nodes[k].op);
    EXPECT_EQ(back->nodes[k].inputs, g->nodes[k].inputs);
    EXPECT_EQ(back->nodes[k].attrs, g->nodes[k].attrs) << g->nodes[k].op;
  }
  EXPECT_EQ(print_graph(*back), text);
}

// ---- the table, node by node ------------------------------------------------------------
std::vector<GraphTensor> run1(const std::string& op, std::vector<GraphTensor> ins,
                              std::map<std::string, Attr> attrs = {}) {
  Node n;
  n.op = op;
  n.name = "t";
  n.attrs = std::move(attrs);
  std::vector<const GraphTensor*> args;
  for (auto& t : ins) {
    n.inputs.push_back("in" + std::to_string(args.size()));
    args.push_back(&t);
  }
  n.outputs = {"y"};
  auto out = run_native_node(n, args);
  EXPECT_TRUE(out.ok()) << op << ": " << out.error().str();
  return out.ok() ? *out : std::vector<GraphTensor>{};
}

FloatBuffer unary(const std::string& op, FloatBuffer x, std::map<std::string, Attr> attrs = {}) {
  const Shape s{static_cast<std::int64_t>(x.size())};
  auto out = run1(op, {GraphTensor::f32(s, std::move(x))}, std::move(attrs));
  return out.empty() ? FloatBuffer{} : out[0].f;
}

void expect_near(const FloatBuffer& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(got[k])) << k;
    } else if (std::isinf(want[k])) {
      EXPECT_EQ(got[k], want[k]) << k;
    } else {
      EXPECT_NEAR(got[k], want[k], tol * std::max(1.0, std::fabs(want[k]))) << k;
    }
  }
}

TEST(ReferenceTable, UnaryOpsWithOnnxDefaults) {
  const double ln2 = std::numbers::ln2;
  // Round is half to even; Floor/Ceil on negatives.
  EXPECT_EQ(unary("ref.Round", {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 2.4f}),
            (std::vector<float>{-2, -2, -0.0f, 0, 2, 2, 2}));
  EXPECT_EQ(unary("ref.Floor", {-1.5f, 1.5f}), (std::vector<float>{-2, 1}));
  EXPECT_EQ(unary("ref.Ceil", {-1.5f, 1.5f}), (std::vector<float>{-1, 2}));
  // Trig identities: sin(π/6) = ½, tan(π/4) = 1, acos(½) = π/3, atanh(½) = ½·ln 3.
  expect_near(unary("ref.Sin", {static_cast<float>(std::numbers::pi / 6)}), {0.5});
  expect_near(unary("ref.Tan", {static_cast<float>(std::numbers::pi / 4)}), {1.0});
  expect_near(unary("ref.Acos", {0.5f}), {std::numbers::pi / 3});
  expect_near(unary("ref.Atanh", {0.5f}), {0.5 * std::log(3.0)});
  expect_near(unary("ref.Acos", {2.0f}), {std::nan("")}); // outside the domain: NaN, as IEEE says
  // cosh/sinh of ln 2: (2 ± ½)/2.
  expect_near(unary("ref.Cosh", {static_cast<float>(ln2)}), {1.25});
  expect_near(unary("ref.Sinh", {static_cast<float>(ln2)}), {0.75});
  expect_near(unary("ref.Softsign", {3.0f, -1.0f}), {0.75, -0.5});
  // Mish(x) = x·tanh(ln(1 + eˣ)): tanh(ln(1 + e)) = 0.8650983882673103.
  expect_near(unary("ref.Mish", {0.0f, 1.0f}), {0.0, 0.8650983882673103});
  // LeakyRelu α = 0.01, Elu α = 1 (e^(−ln 2) − 1 = −½), ThresholdedRelu α = 1.
  expect_near(unary("ref.LeakyRelu", {-2.0f, 3.0f}), {-0.02, 3.0});
  expect_near(unary("ref.LeakyRelu", {-2.0f}, {{"alpha", 0.5}}), {-1.0});
  expect_near(unary("ref.Elu", {static_cast<float>(-ln2), 2.0f}), {-0.5, 2.0});
  expect_near(unary("ref.ThresholdedRelu", {0.5f, 1.0f, 1.5f}), {0, 0, 1.5});
  // Selu: γ·x above 0, γ·α·(eˣ − 1) below; γ = 1.0507009873554805, γα·(−½) = −0.8790496731715152.
  expect_near(unary("ref.Selu", {1.0f, static_cast<float>(-ln2)}), {1.0507010221481323, -0.8790496731715152});
  // Celu α = 2: 2·(e^(−2 ln 2 / 2) − 1) = −1; NaN stays NaN.
  expect_near(unary("ref.Celu", {static_cast<float>(-2 * ln2), 3.0f, kNan}, {{"alpha", 2.0}}),
              {-1.0, 3.0, std::nan("")});
}

TEST(ReferenceTable, IsNanIsInfAreBool) {
  auto nan = run1("ref.IsNaN", {GraphTensor::f32({4}, {1, kNan, kInf, -kInf})});
  ASSERT_EQ(nan.size(), 1u);
  EXPECT_EQ(nan[0].type, ElemType::boolean);
  EXPECT_EQ(nan[0].i, (std::vector<std::int64_t>{0, 1, 0, 0}));
  auto inf = run1("ref.IsInf", {GraphTensor::f32({4}, {1, kNan, kInf, -kInf})}, {{"detect_negative", std::int64_t{0}}});
  ASSERT_EQ(inf.size(), 1u);
  EXPECT_EQ(inf[0].i, (std::vector<std::int64_t>{0, 0, 1, 0}));
}

TEST(ReferenceTable, ClipAndPRelu) {
  auto c = run1("ref.Clip",
                {GraphTensor::f32({4}, {-3, 0.5f, 5, kNan}), GraphTensor::f32({}, {-1}), GraphTensor::f32({}, {2})});
  ASSERT_EQ(c.size(), 1u);
  expect_near(c[0].f, {-1, 0.5, 2, std::nan("")});
  // min > max: every value becomes max (ONNX Clip).
  auto swapped =
      run1("ref.Clip", {GraphTensor::f32({2}, {-3, 5}), GraphTensor::f32({}, {2}), GraphTensor::f32({}, {1})});
  ASSERT_EQ(swapped.size(), 1u);
  EXPECT_EQ(swapped[0].f, (std::vector<float>{1, 1}));
  // PRelu: the slope [½, ¼] broadcasts along the last axis: column 0 halves, column 1 quarters.
  auto p = run1("ref.PRelu", {GraphTensor::f32({2, 2}, {-1, -2, -3, 4}), GraphTensor::f32({2}, {0.5f, 0.25f})});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].f, (std::vector<float>{-0.5f, -0.5f, -1.5f, 4}));
}

TEST(ReferenceTable, Reductions) {
  const GraphTensor m = GraphTensor::f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto prod = run1("ref.ReduceProd", {m, GraphTensor::i64({1}, {1})}, {{"keepdims", std::int64_t{0}}});
  ASSERT_EQ(prod.size(), 1u);
  EXPECT_EQ(prod[0].shape, (Shape{2}));
  EXPECT_EQ(prod[0].f, (std::vector<float>{6, 120}));
  const GraphTensor s = GraphTensor::f32({2, 2}, {-1, 2, 3, -4});
  auto l1 = run1("ref.ReduceL1", {s}); // no axes: all of them, keepdims = 1
  ASSERT_EQ(l1.size(), 1u);
  EXPECT_EQ(l1[0].shape, (Shape{1, 1}));
  EXPECT_EQ(l1[0].f, (std::vector<float>{10}));
  EXPECT_EQ(run1("ref.ReduceSumSquare", {s})[0].f, (std::vector<float>{30}));
  // Axes as an attribute (before opset 18): log Σ over axis 0 of [[1, 2], [3, 4]] = log 4, log 6.
  auto ls = run1("ref.ReduceLogSum", {GraphTensor::f32({2, 2}, {1, 2, 3, 4})},
                 {{"axes", std::vector<std::int64_t>{0}}, {"keepdims", std::int64_t{0}}});
  expect_near(ls[0].f, {std::log(4.0), std::log(6.0)});
  // noop_with_empty_axes: each element reduced alone, so ReduceL2 is |x|.
  EXPECT_EQ(run1("ref.ReduceL2", {GraphTensor::f32({2}, {-3, 4})}, {{"noop_with_empty_axes", std::int64_t{1}}})[0].f,
            (std::vector<float>{3, 4}));
  // LogSumExp does not overflow (1000 + ln 2) and is −inf over −inf or an empty set.
  expect_near(run1("ref.ReduceLogSumExp", {GraphTensor::f32({2}, {1000, 1000})})[0].f, {1000 + std::numbers::ln2});
  EXPECT_EQ(run1("ref.ReduceLogSumExp", {GraphTensor::f32({2}, {-kInf, -kInf})})[0].f, (std::vector<float>{-kInf}));
  EXPECT_EQ(run1("ref.ReduceLogSumExp", {GraphTensor::f32({0}, {})})[0].f, (std::vector<float>{-kInf}));
  EXPECT_EQ(run1("ref.ReduceProd", {GraphTensor::f32({0}, {})})[0].f, (std::vector<float>{1}));
}

TEST(ReferenceTable, LogSoftmaxAndHardmaxAlongAnyAxis) {
  // log-softmax of [0, 1, 2] is k − log(1 + e + e²); shifting by 1000 changes nothing.
  const double l = std::log(1 + std::exp(1.0) + std::exp(2.0));
  expect_near(unary("ref.LogSoftmax", {1000, 1001, 1002}), {-l, 1 - l, 2 - l}, 1e-6);
  // A probability below double's range stays finite: log-softmax of [0, −1000] is [0, −1000].
  expect_near(unary("ref.LogSoftmax", {0, -1000}), {0, -1000});
  // axis 0 of [[0, 5], [0, 5]]: each column is log(½) twice.
  auto cols = run1("ref.LogSoftmax", {GraphTensor::f32({2, 2}, {0, 5, 0, 5})}, {{"axis", std::int64_t{0}}});
  expect_near(cols[0].f, {-std::numbers::ln2, -std::numbers::ln2, -std::numbers::ln2, -std::numbers::ln2});
  // Hardmax marks the first maximum.
  const GraphTensor h = GraphTensor::f32({2, 3}, {1, 3, 3, 2, 0, 1});
  EXPECT_EQ(run1("ref.Hardmax", {h})[0].f, (std::vector<float>{0, 1, 0, 1, 0, 0}));
  EXPECT_EQ(run1("ref.Hardmax", {h}, {{"axis", std::int64_t{0}}})[0].f, (std::vector<float>{0, 1, 1, 1, 0, 0}));
}

TEST(ReferenceTable, ErrorsNameTheNode) {
  Node n;
  n.op = "ref.Cos";
  n.name = "cos_i64";
  n.inputs = {"x"};
  n.outputs = {"y"};
  const GraphTensor i = GraphTensor::i64({1}, {1});
  const GraphTensor* args[] = {&i};
  auto bad_type = run_native_node(n, args);
  ASSERT_FALSE(bad_type.ok());
  EXPECT_EQ(bad_type.error().code, ErrorCode::graph_invalid);
  EXPECT_NE(bad_type.error().message.find("cos_i64"), std::string::npos) << bad_type.error().message;
  n.op = "ref.NoSuchOp";
  const GraphTensor f = GraphTensor::f32({1}, {1});
  const GraphTensor* fargs[] = {&f};
  auto unknown = run_native_node(n, fargs);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, ErrorCode::onnx_unsupported_op);
  EXPECT_NE(unknown.error().message.find("NoSuchOp"), std::string::npos) << unknown.error().message;
  // PRelu's slope must broadcast to X's shape, not beyond it.
  n.op = "ref.PRelu";
  n.inputs = {"x", "s"};
  const GraphTensor x = GraphTensor::f32({2}, {1, 2}), s = GraphTensor::f32({2, 2}, {1, 1, 1, 1});
  const GraphTensor* pargs[] = {&x, &s};
  auto wide = run_native_node(n, pargs);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.error().code, ErrorCode::shape_mismatch);
}

// ---- discovery and the report -------------------------------------------------------------
using testing::discover;

TEST(ReferenceDiscovery, ReferenceNodeStaysUnfusedWhileTheGemmChainFuses) {
  testing::use_test_cache();
  auto f = discover("input x: f32[4, 8]\nconst w: f32[8, 6] = normal(seed=1, scale=0.3)\n"
                    "const b: f32[6] = normal(seed=2, scale=0.1)\n"
                    "y = matmul(x, w)\nz = add(y, b)\nr = relu(z)\nc = ref.Cos(r)\noutput c\n");
  ASSERT_EQ(f.d.regions.size(), 1u);
  EXPECT_EQ(f.d.regions[0].ops, "matmul + bias + relu");
  ASSERT_EQ(f.d.unfused.size(), 1u);
  EXPECT_EQ(f.graph.nodes[f.d.unfused[0].node].op, "ref.Cos");
  EXPECT_EQ(f.d.unfused[0].reason, "reference evaluator (--allow-reference)");
  EXPECT_NE(format_discovery(f.graph, f.d).find("(ref.Cos): reference evaluator (--allow-reference)"),
            std::string::npos);
  // Fused and native runs agree: cos of relu(x·w + b).
  ValueMap in{{"x", GraphTensor::f32({4, 8}, normal_values(32, 7, 1.0))}};
  auto fused = execute_graph(f.graph, f.d, in);
  ASSERT_TRUE(fused.ok()) << fused.error().str();
  auto native = run_graph_native(f.graph, in);
  ASSERT_TRUE(native.ok()) << native.error().str();
  EXPECT_TRUE(testing::all_close(fused->values.at("c").to_tensor(), native->at("c").to_tensor(), 1e-5));
}

TEST(ReferenceDiscovery, PointwiseRegionsStopAtAReferenceNode) {
  auto f =
      discover("input x: f32[4, 8]\na = exp(x)\nb = neg(a)\nc = ref.Cos(b)\nd = tanh(c)\ne = sigmoid(d)\noutput e\n");
  ASSERT_EQ(f.d.regions.size(), 2u);
  EXPECT_EQ(f.d.regions[0].ops, "exp + neg");
  EXPECT_EQ(f.d.regions[1].ops, "tanh + sigmoid");
  ASSERT_EQ(f.d.unfused.size(), 1u);
  EXPECT_EQ(f.graph.nodes[f.d.unfused[0].node].op, "ref.Cos");
}

TEST(ReferenceReport, RunModelCountsAndNamesReferenceOps) {
  testing::use_test_cache();
  const auto path = std::filesystem::temp_directory_path() / ("fusor_ref_" + std::to_string(::getpid()) + ".graph");
  std::ofstream(path) << "input x: f32[2, 4]\nc = ref.Cos(x)\ns = ref.LogSoftmax(c; axis=-1)\noutput s\n";
  ModelRunOptions o;
  o.model = path.string();
  o.repeats = 1;
  o.compare_onnxruntime = false;
  std::ostringstream out, err;
  const int rc = run_model(o, out, err);
  std::filesystem::remove(path);
  ASSERT_EQ(rc, 0) << err.str() << out.str();
  EXPECT_NE(out.str().find("reference evaluator (--allow-reference): 2 op(s)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("(ref.LogSoftmax)"), std::string::npos) << out.str();
}

TEST_F(ReferenceImport, RunModelOnAnOnnxFileNeedsTheOption) {
  testing::use_test_cache();
  const auto path = std::filesystem::temp_directory_path() / ("fusor_ref_" + std::to_string(::getpid()) + ".onnx");
  std::ofstream(path, std::ios::binary) << chain_model();
  ModelRunOptions o;
  o.model = path.string();
  o.repeats = 1;
  o.compare_onnxruntime = false;
  std::ostringstream out, err, out2, err2;
  EXPECT_EQ(run_model(o, out, err), 2);
  EXPECT_NE(err.str().find("--allow-reference"), std::string::npos) << err.str();
  o.allow_reference = true;
  const int rc = run_model(o, out2, err2);
  std::filesystem::remove(path);
  EXPECT_EQ(rc, 0) << err2.str() << out2.str();
  EXPECT_NE(out2.str().find("3 op(s) outside fusor's set"), std::string::npos) << out2.str();
}

} // namespace
} // namespace fusor
