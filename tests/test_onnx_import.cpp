// ONNX import: models written here byte by byte (protobuf wire format), so the test needs
// no ONNX tooling, plus the shipped transformer example.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "fusor/discovery.hpp"
#include "fusor/graph_exec.hpp"
#include "fusor/onnx_import.hpp"
#include "support/onnx_writer.hpp"

namespace fusor {
namespace {

using namespace testing::onnx_writer;

// NodeProto{input..., output, name, op_type, attribute...}
std::string node(const std::string& op, std::initializer_list<std::string> ins, const std::string& out,
                 const std::string& name, const std::string& attrs = {}) {
  std::string n;
  for (const auto& i : ins) n += field_bytes(1, i);
  return n + field_bytes(2, out) + field_bytes(3, name) + field_bytes(4, op) + attrs;
}

std::string model(const std::string& nodes, const std::string& inputs, const std::string& outputs, int opset = 20) {
  const std::string graph = nodes + field_bytes(2, "g") + inputs + outputs;
  return field_varint(1, 9) + field_bytes(8, field_bytes(1, "") + field_varint(2, static_cast<std::uint64_t>(opset))) +
         field_bytes(7, graph);
}

Expected<Graph> import(const std::string& bytes) {
  return import_onnx_bytes(std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()), "test model");
}

constexpr int kFloat = 1, kFloat16 = 10;

class OnnxImport : public ::testing::Test {
protected:
  void SetUp() override {
    if (!onnx_import_available()) GTEST_SKIP() << "built without libonnx";
  }
};

TEST_F(OnnxImport, ElementwiseModelImportsAndRuns) {
  // y = relu(x) - x  (= -min(x, 0) = max(-x, 0))
  const std::string m =
      model(field_bytes(1, node("Relu", {"x"}, "r", "relu0")) + field_bytes(1, node("Sub", {"r", "x"}, "y", "sub0")),
            field_bytes(11, value_info("x", kFloat, {3})), field_bytes(12, value_info("y", kFloat, {3})));
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.error().str();
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op, "relu");
  auto v = run_graph_native(*g, {{"x", GraphTensor::f32({3}, {-2, 0, 3})}});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->at("y").f, (std::vector<float>{2, 0, 0}));
}

TEST_F(OnnxImport, UnsupportedOpNamesOpTypeAndNode) {
  const std::string m =
      model(field_bytes(1, node("Hardmax", {"x"}, "y", "my_hardmax")), field_bytes(11, value_info("x", kFloat, {3})),
            field_bytes(12, value_info("y", kFloat, {3})));
  auto g = import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, ErrorCode::onnx_unsupported_op);
  EXPECT_NE(g.error().message.find("Hardmax"), std::string::npos) << g.error().message;
  EXPECT_NE(g.error().message.find("my_hardmax"), std::string::npos) << g.error().message;
}

TEST_F(OnnxImport, UnsupportedDtypeIsNamed) {
  const std::string m =
      model(field_bytes(1, node("Relu", {"x"}, "y", "r")), field_bytes(11, value_info("x", kFloat16, {3})),
            field_bytes(12, value_info("y", kFloat16, {3})));
  auto g = import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, ErrorCode::onnx_unsupported_dtype);
  EXPECT_NE(g.error().message.find("float16"), std::string::npos);
}

TEST_F(OnnxImport, HardSigmoidDecomposesIntoTableOps) {
  // HardSigmoid(alpha=0.5, beta=0.25): max(0, min(1, 0.5x + 0.25))
  const std::string m = model(
      field_bytes(1, node("HardSigmoid", {"x"}, "y", "hs", float_attr("alpha", 0.5f) + float_attr("beta", 0.25f))),
      field_bytes(11, value_info("x", kFloat, {4})), field_bytes(12, value_info("y", kFloat, {4})));
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.error().str();
  auto v = run_graph_native(*g, {{"x", GraphTensor::f32({4}, {-4, 0, 1, 4})}});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->at("y").f, (std::vector<float>{0, 0.25f, 0.75f, 1}));
}

TEST_F(OnnxImport, GarbageIsAnInvalidModel) {
  auto g = import("this is not protobuf \xff\xff\xff");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code, ErrorCode::graph_invalid);
}

TEST_F(OnnxImport, TransformerExampleFoldsShapesAndFindsRegions) {
  auto g = import_onnx_file(std::string(FUSOR_EXAMPLES_DIR) + "/transformer_block.onnx");
  ASSERT_TRUE(g.ok()) << g.error().str();
  auto types = infer_value_types(*g);
  ASSERT_TRUE(types.ok()) << types.error().str();
  const Discovery d = discover_regions(*g, *types);
  std::map<RegionKind, int> count;
  for (const auto& r : d.regions) ++count[region_kind(r.region)];
  EXPECT_EQ(count[RegionKind::attention], 1);
  EXPECT_EQ(count[RegionKind::norm_chain], 2);
  EXPECT_EQ(count[RegionKind::fused], 6); // q, k, v, o projections and the two MLP GEMMs
  // Only reshapes and transposes are left: the head split and merge.
  for (const auto& u : d.unfused) {
    const std::string& op = g->nodes[u.node].op;
    EXPECT_TRUE(op == "reshape" || op == "transpose") << op << ": " << u.reason;
  }
}

} // namespace
} // namespace fusor
