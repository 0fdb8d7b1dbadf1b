// Region validation: SPEC §1.1's documented order (first failure wins) and each other
// kind's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "fusor/region.hpp"

using namespace fusor;

namespace {

template <class T> std::string code_of(const Expected<T>& e) {
  return e.ok() ? "ok" : std::string(code_name(e.error().code));
}
template <class T> std::string message_of(const Expected<T>& e) { return e.ok() ? "" : e.error().message; }

FusedSpec relu_epilogue() {
  FusedSpec s;
  s.epilogue = {"relu"};
  return s;
}

PointwiseSpec two_op_graph() {
  PointwiseSpec s;
  s.inputs = {"x", "y"};
  s.ops = {{"t", "add", {std::string("x"), std::string("y")}}, {"z", "relu", {std::string("t")}}};
  s.output = "z";
  return s;
}

} // namespace

// ---- FusedRegion: the order of SPEC §1.1 -----------------------------------------------

TEST(FusedValidation, BadLayoutWinsOverBadDtype) {
  FusedSpec s = relu_epilogue();
  s.a_layout = "diagonal";
  s.storage = "f64";
  s.epilogue = {"swish", "bias", "bias"};
  auto r = FusedRegion::make(s);
  EXPECT_EQ(code_of(r), "E_REGION_BAD_LAYOUT");
  EXPECT_NE(message_of(r).find("diagonal"), std::string::npos) << message_of(r);
  s.a_layout = "row_major";
  s.b_layout = "column_major";
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_REGION_BAD_LAYOUT");
}

TEST(FusedValidation, BadDtypeWinsOverBadOp) {
  FusedSpec s = relu_epilogue();
  s.storage = "f64";
  s.epilogue = {"swish"};
  auto r = FusedRegion::make(s);
  EXPECT_EQ(code_of(r), "E_FUSED_EPILOGUE_BAD_DTYPE");
  EXPECT_NE(message_of(r).find("f64"), std::string::npos) << message_of(r);
}

TEST(FusedValidation, BadOpWinsOverTwoBiases) {
  FusedSpec s;
  s.epilogue = {"bias", "bias", "swish"};
  auto r = FusedRegion::make(s);
  EXPECT_EQ(code_of(r), "E_FUSED_EPILOGUE_BAD_OP");
  EXPECT_NE(message_of(r).find("swish"), std::string::npos) << message_of(r);
  // An unknown prologue op or reduction is the same code, also ahead of order problems.
  s.epilogue = {"bias", "bias"};
  s.prologue = {"cube"};
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_FUSED_EPILOGUE_BAD_OP");
  s.prologue = {};
  s.reduction = "l2norm";
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_FUSED_EPILOGUE_BAD_OP");
}

TEST(FusedValidation, PointwiseOnlyOpsAreNotEpilogueOps) {
  FusedSpec s;
  s.epilogue = {"add"};
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_FUSED_EPILOGUE_BAD_OP");
  s.epilogue = {};
  s.prologue = {"exp"};
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_FUSED_EPILOGUE_BAD_OP");
}

TEST(FusedValidation, OrderErrors) {
  FusedSpec two_biases;
  two_biases.epilogue = {"bias", "relu", "bias"};
  EXPECT_EQ(code_of(FusedRegion::make(two_biases)), "E_FUSED_EPILOGUE_BAD_ORDER");

  FusedSpec bias_in_prologue;
  bias_in_prologue.prologue = {"bias"};
  bias_in_prologue.epilogue = {"relu"};
  EXPECT_EQ(code_of(FusedRegion::make(bias_in_prologue)), "E_FUSED_EPILOGUE_BAD_ORDER");

  FusedSpec residual_and_reduction;
  residual_and_reduction.residual = true;
  residual_and_reduction.reduction = "rmsnorm";
  EXPECT_EQ(code_of(FusedRegion::make(residual_and_reduction)), "E_FUSED_EPILOGUE_BAD_ORDER");
}

TEST(FusedValidation, OrderWinsOverBadEps) {
  FusedSpec s;
  s.epilogue = {"bias", "bias"};
  s.eps = -1.0;
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_FUSED_EPILOGUE_BAD_ORDER");
}

TEST(FusedValidation, NothingToDoIsBadOp) {
  FusedSpec s;
  auto r = FusedRegion::make(s);
  EXPECT_EQ(code_of(r), "E_FUSED_EPILOGUE_BAD_OP");
  s.reduction = "none";
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_FUSED_EPILOGUE_BAD_OP");
}

TEST(FusedValidation, EpsMustBeFiniteAndNonNegative) {
  FusedSpec s = relu_epilogue();
  s.eps = -1e-6;
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_REGION_BAD_VALUE");
  s.eps = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_REGION_BAD_VALUE");
  s.eps = std::numeric_limits<double>::infinity();
  EXPECT_EQ(code_of(FusedRegion::make(s)), "E_REGION_BAD_VALUE");
  s.eps = 0.0;
  EXPECT_EQ(code_of(FusedRegion::make(s)), "ok");
}

TEST(FusedValidation, EachSingleThingToDoIsEnough) {
  FusedSpec prologue_only;
  prologue_only.prologue = {"relu", "tanh"};
  FusedSpec residual_only;
  residual_only.residual = true;
  FusedSpec reduction_only;
  reduction_only.reduction = "softmax";
  FusedSpec everything;
  everything.prologue = {"gelu"};
  everything.epilogue = {"bias", "gelu_erf", "silu"};
  everything.residual = true;
  everything.storage = "fp8_e5m2";
  everything.a_layout = "col_major";
  for (const auto& s : {prologue_only, residual_only, reduction_only, everything}) {
    auto r = FusedRegion::make(s);
    ASSERT_TRUE(r.ok()) << r.error().str();
    EXPECT_EQ(r->spec(), s); // the validated region gives back the spec it was built from
  }
  auto e = FusedRegion::make(everything);
  EXPECT_TRUE(e->has_bias());
  EXPECT_EQ(e->storage(), DType::fp8_e5m2);
  EXPECT_EQ(e->a_layout(), Layout::col_major);
  EXPECT_EQ(operand_names(Region{*e}), (std::vector<std::string>{"A", "B", "bias", "residual"}));
  EXPECT_EQ(region_storage(Region{*e}), DType::fp8_e5m2);
}

// ---- Other kinds --------------------------------------------------------------------

TEST(MatmulValidation, StorageIsF32F16OrBf16) {
  for (const char* ok : {"f32", "f16", "bf16"}) {
    MatmulSpec s;
    s.storage = ok;
    EXPECT_EQ(code_of(MatmulRegion::make(s)), "ok") << ok;
  }
  for (const char* bad : {"fp8_e4m3", "fp8_e5m2", "f64", ""}) {
    MatmulSpec s;
    s.storage = bad;
    auto r = MatmulRegion::make(s);
    EXPECT_EQ(code_of(r), "E_REGION_BAD_DTYPE") << bad;
    EXPECT_NE(message_of(r).find("matmul"), std::string::npos);
  }
}

TEST(AttentionValidation, DtypeAndScale) {
  AttentionSpec s;
  s.storage = "fp8_e4m3";
  EXPECT_EQ(code_of(AttentionRegion::make(s)), "ok");
  s.storage = "int8";
  EXPECT_EQ(code_of(AttentionRegion::make(s)), "E_REGION_BAD_DTYPE");
  s.storage = "f32";
  s.scale = std::numeric_limits<double>::infinity();
  EXPECT_EQ(code_of(AttentionRegion::make(s)), "E_REGION_BAD_VALUE");
  s.scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(code_of(AttentionRegion::make(s)), "E_REGION_BAD_VALUE");
  s.scale = -0.5; // a negative scale is odd but well defined
  EXPECT_EQ(code_of(AttentionRegion::make(s)), "ok");
}

TEST(GatedValidation, GateMustBeAUnaryActivation) {
  for (const char* bad : {"bias", "add", "exp", "swish"}) {
    GatedSpec s;
    s.gate_act = bad;
    auto r = GatedMatmulRegion::make(s);
    EXPECT_EQ(code_of(r), "E_REGION_BAD_OP") << bad;
    EXPECT_NE(message_of(r).find(bad), std::string::npos) << message_of(r);
  }
  for (const char* ok : {"relu", "gelu", "gelu_erf", "silu", "sigmoid", "tanh"}) {
    GatedSpec s;
    s.gate_act = ok;
    EXPECT_EQ(code_of(GatedMatmulRegion::make(s)), "ok") << ok;
  }
  GatedSpec s;
  s.storage = "f8";
  EXPECT_EQ(code_of(GatedMatmulRegion::make(s)), "E_REGION_BAD_DTYPE");
}

TEST(PointwiseValidation, GraphErrors) {
  const auto bad = [](auto mutate) {
    PointwiseSpec s = two_op_graph();
    mutate(s);
    return code_of(PointwiseGraphRegion::make(s));
  };
  EXPECT_EQ(bad([](PointwiseSpec&) {}), "ok");
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.inputs.clear(); }), "E_POINTWISE_BAD_GRAPH");
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.inputs = {"x", "x"}; }), "E_POINTWISE_BAD_GRAPH");
  EXPECT_EQ(bad([](PointwiseSpec& s) {
              for (int i = 0; i < 15; ++i) s.inputs.push_back("in" + std::to_string(i));
            }),
            "E_POINTWISE_BAD_GRAPH");                                                                  // 17 inputs
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops.pop_back(), s.output = "t"; }), "E_POINTWISE_BAD_GRAPH"); // 1 op
  EXPECT_EQ(bad([](PointwiseSpec& s) {
              for (int i = 0; i < 31; ++i) s.ops.push_back({"u" + std::to_string(i), "neg", {std::string("z")}});
            }),
            "E_POINTWISE_BAD_GRAPH"); // 33 ops
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[0].args[1] = std::string("w"); }), "E_POINTWISE_BAD_GRAPH");
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[0].args[1] = std::string("z"); }),
            "E_POINTWISE_BAD_GRAPH");                                                          // used before defined
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[1].out = "t"; }), "E_POINTWISE_BAD_GRAPH");       // redefinition
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[1].out = "x"; }), "E_POINTWISE_BAD_GRAPH");       // shadows an input
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[0].args.pop_back(); }), "E_POINTWISE_BAD_GRAPH"); // arity
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[1].args.push_back(1.0); }), "E_POINTWISE_BAD_GRAPH");
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.output = "nope"; }), "E_POINTWISE_BAD_GRAPH");
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.output = "x"; }), "E_POINTWISE_BAD_GRAPH");
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[1].op = "cube"; }), "E_REGION_BAD_OP");
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[0].op = "bias"; }), "E_REGION_BAD_OP"); // epilogue-only
  EXPECT_EQ(bad([](PointwiseSpec& s) { s.ops[1].args[0] = 2.5; }), "ok");            // constants are fine
}

TEST(PointwiseValidation, ReduceRegion) {
  PointwiseReduceSpec s;
  s.graph.inputs = {"x"};
  s.graph.output = "x"; // no ops: a bare reduction of the input
  s.reduce = "amax";
  auto r = PointwiseReduceRegion::make(s);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->reduce(), ReduceOp::amax);
  s.reduce = "max";
  EXPECT_EQ(code_of(PointwiseReduceRegion::make(s)), "E_REGION_BAD_OP");
  s.reduce = "sum";
  s.graph.output = "y";
  EXPECT_EQ(code_of(PointwiseReduceRegion::make(s)), "E_POINTWISE_BAD_GRAPH");
}

TEST(NormChainValidation, NormAndEps) {
  NormChainSpec s;
  s.norm = "batch_norm";
  auto r = NormChainRegion::make(s);
  EXPECT_EQ(code_of(r), "E_REGION_BAD_OP");
  EXPECT_NE(message_of(r).find("batch_norm"), std::string::npos);
  s.norm = "layer_norm";
  s.eps = -1e-5;
  EXPECT_EQ(code_of(NormChainRegion::make(s)), "E_REGION_BAD_VALUE");
  s.eps = 0.0;
  EXPECT_EQ(code_of(NormChainRegion::make(s)), "ok");
  s.eps = 1e-5;
  s.add_residual = s.weight = s.bias = true;
  auto full = NormChainRegion::make(s);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(operand_names(Region{*full}), (std::vector<std::string>{"x", "residual", "gamma", "beta"}));
  s.add_residual = false;
  s.weight = false;
  EXPECT_EQ(operand_names(Region{*NormChainRegion::make(s)}), (std::vector<std::string>{"x", "beta"}));
}
