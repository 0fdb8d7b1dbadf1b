// The region text form: examples, defaults, errors with positions, and properties
// (print -> parse is the identity; print is a fixed point; mutated text never crashes).
#include "fusor/region_text.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>

namespace fusor {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <class R> Expected<Region> as_region(Expected<R> r) {
  if (!r) return r.error();
  return Region(std::move(*r));
}

std::string err(const Expected<Region>& r) { return r ? "" : r.error().str(); }
std::string err(const Expected<std::vector<Region>>& r) { return r ? "" : r.error().str(); }

// ---- the examples of the text form ------------------------------------------------------

struct Example {
  const char* text;
  const char* canonical; // written by hand
};

const Example kExamples[] = {
    {"fused { prologue = [relu]; epilogue = [bias, gelu]; residual = false; reduction = none; eps = 1e-6; storage = "
     "f32; a_layout = row_major; b_layout = row_major }",
     "fused { prologue = [relu]; epilogue = [bias, gelu]; residual = false; reduction = none; eps = 1e-06; storage = "
     "f32; a_layout = row_major; b_layout = row_major }"},
    {"matmul { storage = bf16; transpose_a = false; transpose_b = true }",
     "matmul { storage = bf16; transpose_a = false; transpose_b = true }"},
    {"attention { scale = 0.125; causal = true; q_transposed = false; k_transposed = false; storage = f32 }",
     "attention { scale = 0.125; causal = true; q_transposed = false; k_transposed = false; storage = f32 }"},
    {"gated { gate_act = silu; storage = f32 }", "gated { gate_act = silu; storage = f32 }"},
    {"pointwise { inputs = [x, y]; t0 = mul(x, y); t1 = sigmoid(t0); output = t1 }",
     "pointwise { inputs = [x, y]; t0 = mul(x, y); t1 = sigmoid(t0); output = t1 }"},
    {"pointwise_reduce { inputs = [x]; t0 = exp(x); output = t0; reduce = sum }",
     "pointwise_reduce { inputs = [x]; t0 = exp(x); output = t0; reduce = sum }"},
    {"norm_chain { norm = rmsnorm; add_residual = true; weight = true; bias = false; eps = 1e-5 }",
     "norm_chain { norm = rmsnorm; add_residual = true; weight = true; bias = false; eps = 1e-05 }"},
};

TEST(RegionText, ExamplesParseAndPrintCanonically) {
  for (const auto& ex : kExamples) {
    auto r = parse_region(ex.text);
    ASSERT_TRUE(r.ok()) << ex.text << "\n" << err(r);
    EXPECT_EQ(print_region(*r), ex.canonical);
    auto again = parse_region(ex.canonical);
    ASSERT_TRUE(again.ok()) << err(again);
    EXPECT_TRUE(*again == *r) << ex.canonical;
  }
}

TEST(RegionText, ExampleFieldsAreRead) {
  auto f = parse_region(kExamples[0].text);
  ASSERT_TRUE(f.ok());
  const auto& fused = std::get<FusedRegion>(*f);
  EXPECT_EQ(fused.prologue(), std::vector<Op>{Op::relu});
  EXPECT_EQ(fused.epilogue(), (std::vector<Op>{Op::bias, Op::gelu}));
  EXPECT_FALSE(fused.residual());
  EXPECT_FALSE(fused.reduction().has_value());
  EXPECT_EQ(fused.eps(), 1e-6);

  auto m = parse_region(kExamples[1].text);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(std::get<MatmulRegion>(*m).storage(), DType::bf16);
  EXPECT_FALSE(std::get<MatmulRegion>(*m).transpose_a());
  EXPECT_TRUE(std::get<MatmulRegion>(*m).transpose_b());

  auto a = parse_region(kExamples[2].text);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(std::get<AttentionRegion>(*a).scale(), 0.125);
  EXPECT_TRUE(std::get<AttentionRegion>(*a).causal());

  auto p = parse_region(kExamples[4].text);
  ASSERT_TRUE(p.ok());
  const auto& g = std::get<PointwiseGraphRegion>(*p).graph();
  EXPECT_EQ(g.input_names(), (std::vector<std::string>{"x", "y"}));
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[0].op, Op::mul);
  EXPECT_EQ(g.nodes()[1].op, Op::sigmoid);
  EXPECT_EQ(g.nodes()[1].args[0], (ValueRef{ValueRef::Kind::node, 0, 0.0}));
  EXPECT_EQ(g.output(), (ValueRef{ValueRef::Kind::node, 1, 0.0}));

  auto n = parse_region(kExamples[6].text);
  ASSERT_TRUE(n.ok());
  const auto& nc = std::get<NormChainRegion>(*n);
  EXPECT_EQ(nc.norm(), RowNorm::rmsnorm);
  EXPECT_TRUE(nc.add_residual());
  EXPECT_TRUE(nc.weight());
  EXPECT_FALSE(nc.bias());
  EXPECT_EQ(nc.eps(), 1e-5);
}

TEST(RegionText, OmittedFieldsTakeSpecDefaults) {
  const std::pair<const char*, const char*> cases[] = {
      {"fused { epilogue = [relu] }", "fused { prologue = []; epilogue = [relu]; residual = false; reduction = none; "
                                      "eps = 1e-06; storage = f32; a_layout = row_major; b_layout = row_major }"},
      {"matmul {}", "matmul { storage = f32; transpose_a = false; transpose_b = false }"},
      {"attention { }",
       "attention { scale = 1; causal = false; q_transposed = false; k_transposed = false; storage = f32 }"},
      {"gated {}", "gated { gate_act = silu; storage = f32 }"},
      {"pointwise_reduce { inputs = [x]; output = x }", "pointwise_reduce { inputs = [x]; output = x; reduce = sum }"},
      {"norm_chain {}",
       "norm_chain { norm = rmsnorm; add_residual = false; weight = false; bias = false; eps = 1e-05 }"},
  };
  for (const auto& [text, canonical] : cases) {
    auto r = parse_region(text);
    ASSERT_TRUE(r.ok()) << text << "\n" << err(r);
    EXPECT_EQ(print_region(*r), canonical);
  }
  auto a = parse_region("attention {}");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(std::get<AttentionRegion>(*a).scale(), 1.0);
  auto f = parse_region("fused { epilogue = [relu] }");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(std::get<FusedRegion>(*f).eps(), 1e-6);
  EXPECT_EQ(std::get<FusedRegion>(*f).a_layout(), Layout::row_major);
}

TEST(RegionText, CommentsWhitespaceAndTrailingSemicolon) {
  auto r =
      parse_region("# header\r\nmatmul { # open\n  storage = f16 # the dtype\n  ; transpose_a = true; # trailing ;\n"
                   "}\t# done\n# end");
  ASSERT_TRUE(r.ok()) << err(r);
  const auto& m = std::get<MatmulRegion>(*r);
  EXPECT_EQ(m.storage(), DType::f16);
  EXPECT_TRUE(m.transpose_a());
  EXPECT_FALSE(m.transpose_b());
  // '#' inside a quoted name is part of the name, not a comment.
  auto p = parse_region(R"(pointwise { inputs = ["#x"]; t0 = neg("#x"); t1 = abs(t0); output = t1 })");
  ASSERT_TRUE(p.ok()) << err(p);
  EXPECT_EQ(std::get<PointwiseGraphRegion>(*p).graph().input_names(), std::vector<std::string>{"#x"});
}

TEST(RegionText, MultipleBlocksKeepTheirOrder) {
  std::string text;
  for (const auto& ex : kExamples) text += std::string("# next\n") + ex.text + "\n\n";
  auto all = parse_regions(text);
  ASSERT_TRUE(all.ok()) << err(all);
  ASSERT_EQ(all->size(), 7u);
  const RegionKind kinds[] = {RegionKind::fused,     RegionKind::matmul,    RegionKind::attention,
                              RegionKind::gated,     RegionKind::pointwise, RegionKind::pointwise_reduce,
                              RegionKind::norm_chain};
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(region_kind((*all)[i]), kinds[i]);
    EXPECT_EQ(print_region((*all)[i]), kExamples[i].canonical);
  }
  // Blocks need no separator, not even whitespace.
  auto tight = parse_regions("matmul{}gated{}");
  ASSERT_TRUE(tight.ok()) << err(tight);
  EXPECT_EQ(tight->size(), 2u);
}

TEST(RegionText, NumberForms) {
  const std::pair<const char*, double> cases[] = {
      {"1", 1.0},
      {"1.", 1.0},
      {".5", 0.5},
      {"+0.5", 0.5},
      {"5E-3", 5e-3},
      {"1e+2", 100.0},
      {"-2.5e-3", -2.5e-3},
      {"0.1", 0.1},
      {"-0", -0.0},
      {"5e-324", 5e-324},
      {"1.7976931348623157e308", 1.7976931348623157e308},
      // Long mantissas are read exactly as from_chars rounds them.
      {"1000000000000000000000000000000e-30", 1.0},
  };
  for (const auto& [spelling, value] : cases) {
    auto r = parse_region(std::string("attention { scale = ") + spelling + " }");
    ASSERT_TRUE(r.ok()) << spelling << ": " << err(r);
    EXPECT_EQ(std::get<AttentionRegion>(*r).scale(), value) << spelling;
    EXPECT_EQ(std::signbit(std::get<AttentionRegion>(*r).scale()), std::signbit(value)) << spelling;
  }
}

TEST(RegionText, PointwiseConstantsIncludingInfAndNan) {
  auto r = parse_region("pointwise { inputs = [x]; t0 = add(x, -1e-3); t1 = mul(t0, 0.5); t2 = maximum(t1, -inf); "
                        "t3 = minimum(t2, +inf); t4 = add(t3, nan); t5 = sub(inf, t4); output = t5 }");
  ASSERT_TRUE(r.ok()) << err(r);
  const auto& ops = std::get<PointwiseGraphRegion>(*r).spec().ops;
  ASSERT_EQ(ops.size(), 6u);
  EXPECT_EQ(std::get<double>(ops[0].args[1]), -1e-3);
  EXPECT_EQ(std::get<double>(ops[1].args[1]), 0.5);
  EXPECT_EQ(std::get<double>(ops[2].args[1]), -kInf);
  EXPECT_EQ(std::get<double>(ops[3].args[1]), kInf);
  EXPECT_TRUE(std::isnan(std::get<double>(ops[4].args[1])));
  EXPECT_EQ(std::get<double>(ops[5].args[0]), kInf);
  const std::string printed = print_region(*r);
  EXPECT_EQ(printed, "pointwise { inputs = [x]; t0 = add(x, -0.001); t1 = mul(t0, 0.5); t2 = maximum(t1, -inf); "
                     "t3 = minimum(t2, inf); t4 = add(t3, nan); t5 = sub(inf, t4); output = t5 }");
  // NaN != NaN, so a region holding a NaN constant is compared through its text.
  auto again = parse_region(printed);
  ASSERT_TRUE(again.ok()) << err(again);
  EXPECT_EQ(print_region(*again), printed);
}

TEST(RegionText, QuotedNamesRoundTrip) {
  const std::string text = R"(pointwise { inputs = ["a b", "inf"]; "output" = add("a b", "inf"); )"
                           R"("x\"y\\z\n" = mul("output", 2); output = "x\"y\\z\n" })";
  auto r = parse_region(text);
  ASSERT_TRUE(r.ok()) << err(r);
  const PointwiseSpec s = std::get<PointwiseGraphRegion>(*r).spec();
  EXPECT_EQ(s.inputs, (std::vector<std::string>{"a b", "inf"}));
  ASSERT_EQ(s.ops.size(), 2u);
  EXPECT_EQ(s.ops[0].out, "output");
  EXPECT_EQ(s.ops[0].args[1], PointwiseArgSpec{std::string("inf")});
  EXPECT_EQ(s.ops[1].out, "x\"y\\z\n");
  EXPECT_EQ(s.ops[1].args[1], PointwiseArgSpec{2.0});
  EXPECT_EQ(s.output, "x\"y\\z\n");
  EXPECT_EQ(print_region(*r), R"(pointwise { inputs = ["a b", "inf"]; "output" = add("a b", "inf"); )"
                              R"("x\"y\\z\x0a" = mul("output", 2); output = "x\"y\\z\x0a" })");
  // Bare inf in a list is a name; in an argument it is a number.
  auto bare = parse_region("pointwise { inputs = [inf]; t0 = add(\"inf\", inf); t1 = neg(t0); output = t1 }");
  ASSERT_TRUE(bare.ok()) << err(bare);
  const PointwiseSpec b = std::get<PointwiseGraphRegion>(*bare).spec();
  EXPECT_EQ(b.inputs, std::vector<std::string>{"inf"});
  EXPECT_EQ(b.ops[0].args[1], PointwiseArgSpec{kInf});
}

TEST(RegionText, ErrorStrMatchesTheDocumentedForm) {
  auto r = parse_region("matmul {\n  storage = f32;\n transpose_a }");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().str(), "E_PARSE at 3:14: expected '=', found '}'");
  auto empty = parse_regions("  # nothing here\n");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().str(), "E_PARSE at 2:1: expected a region block, found end of input");
}

struct BadInput {
  const char* text;
  const char* where; // "LINE:COL" of the E_PARSE
};

TEST(RegionText, SyntaxErrorsCarryLineAndColumn) {
  const BadInput cases[] = {
      {"", "1:1"},
      {"# only a comment\n  ", "2:3"},
      {"fusd { }", "1:1"},
      {"{ }", "1:1"},
      {"fused { epilog = [bias] }", "1:9"},
      {"fused { epilogue = [bias]; epilogue = [relu] }", "1:28"},
      {"fused { epilogue [bias] }", "1:18"},
      {"fused {\n  epilogue = [bias]\n  residual = true }", "3:3"},
      {"fused { residual = 3 }", "1:20"},
      {"fused { eps = relu }", "1:15"},
      {"fused { epilogue = [bias, ] }", "1:27"},
      {"fused { epilogue = [bias", "1:25"},
      {"fused { eps = 1e400 }", "1:15"},
      {"fused { eps = 1e-400 }", "1:15"},
      {"matmul { storage = f32 } extra", "1:26"},
      {"matmul { storage = \"f32 }", "1:20"},
      {"matmul { storage = f32 @ }", "1:24"},
      {"pointwise { inputs = [x]; t0 = 3; output = t0 }", "1:27"},
      {"pointwise { inputs = [x]; t0 = exp(x,; output = t0 }", "1:38"},
      {"pointwise { inputs = [x]; t0 = mul(x, 1x) }", "1:39"},
      {"pointwise { inputs = x }", "1:22"},
      {"fused { epilogue = [bias] };", "1:28"},
      {"attention { causal = True }", "1:22"},
      {"fused { epilogue = [bias];; }", "1:27"},
      {"matmul", "1:7"},
      {"matmul { } }", "1:12"},
      {"attention { scale = - 1 }", "1:21"},
      {"pointwise { inputs = [x]; reduce = sum }", "1:27"},
      {"matmul { transpose_a = true transpose_b = true }", "1:29"},
      {"fused { \"eps\" = 1 }", "1:9"},
      {"matmul { storage = \"f\\q\" }", "1:20"},
      {"fused { epilogue = [bias] }\nmatmul { storage = f16; storage = f32 }", "2:25"},
      {"norm_chain { eps = 0x10 }", "1:20"},
      {"fused { prologue = [relu, 1] }", "1:27"},
      {"pointwise { inputs = add(x, y) }", "1:22"},
      {"\tfoo {}", "1:2"},
      {"matmul { storage = f32 }\xff", "1:25"},
      {"matmul { storage = f32; transpose_a = \"true\" }", "1:39"},
      {"pointwise { inputs = [x]; t0 = exp(x) t1 = exp(t0) }", "1:39"},
  };
  for (const auto& c : cases) {
    auto r = parse_regions(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().code, ErrorCode::parse) << c.text << "\n" << r.error().str();
    EXPECT_EQ(r.error().message.rfind(std::string(" at ") + c.where + ": expected ", 0), 0u) << c.text << "\n"
                                                                                             << r.error().str();
  }
}

TEST(RegionText, MisspelledFieldIsNamedWithTheValidOnes) {
  auto r = parse_region("fused { prologue = [relu]; epilog = [bias] }");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::parse);
  const std::string& msg = r.error().message;
  EXPECT_NE(msg.find("found 'epilog'"), std::string::npos) << msg;
  for (const char* field : {"prologue", "epilogue", "residual", "reduction", "eps", "storage", "a_layout", "b_layout"})
    EXPECT_NE(msg.find(field), std::string::npos) << field << " missing from: " << msg;
  auto p = parse_region("pointwise { inputs = [x]; t0 = exp(x); t1 = exp(t0); outputs = t1 }");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("found 'outputs'"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("inputs, output"), std::string::npos) << p.error().message;
}

TEST(RegionText, RepeatedFieldIsAnError) {
  auto r = parse_region("norm_chain { eps = 1e-5; weight = true; eps = 1e-6 }");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::parse);
  EXPECT_EQ(r.error().message.rfind(" at 1:41: ", 0), 0u) << r.error().message;
  EXPECT_NE(r.error().message.find("'eps' again (first set at 1:14)"), std::string::npos) << r.error().message;
}

TEST(RegionText, UnknownKindListsTheSevenKinds) {
  auto r = parse_region("fused_matmul { }");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::parse);
  for (const char* kind :
       {"fused,", "matmul,", "attention,", "gated,", "pointwise,", "pointwise_reduce,", "norm_chain"})
    EXPECT_NE(r.error().message.find(kind), std::string::npos) << kind << " missing from: " << r.error().message;
}

TEST(RegionText, ParseRegionWantsExactlyOneBlock) {
  auto two = parse_region("matmul {} matmul {}");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error().code, ErrorCode::parse);
  EXPECT_EQ(two.error().message.rfind(" at 1:11: ", 0), 0u) << two.error().message;
  auto none = parse_region("# nothing");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().str(), "E_PARSE at 1:10: expected a region block, found end of input");
}

TEST(RegionText, SemanticErrorsKeepTheirCodeAndGainThePosition) {
  const std::pair<const char*, ErrorCode> cases[] = {
      {"fused { epilogue = [bias, bias] }", ErrorCode::fused_epilogue_bad_order},
      {"fused { prologue = [bias] }", ErrorCode::fused_epilogue_bad_order},
      {"fused { residual = true; reduction = softmax }", ErrorCode::fused_epilogue_bad_order},
      {"fused { epilogue = [relu]; a_layout = diagonal }", ErrorCode::region_bad_layout},
      {"fused { epilogue = [relu]; storage = f64 }", ErrorCode::fused_epilogue_bad_dtype},
      {"fused { epilogue = [relux] }", ErrorCode::fused_epilogue_bad_op},
      {"fused { }", ErrorCode::fused_epilogue_bad_op},
      {"fused { epilogue = [relu]; eps = inf }", ErrorCode::region_bad_value},
      {"pointwise { inputs = [x]; t0 = exp(y); t1 = exp(t0); output = t1 }", ErrorCode::pointwise_bad_graph},
      {"pointwise { inputs = [x]; t0 = exp(x); output = t0 }", ErrorCode::pointwise_bad_graph},
      {"pointwise { }", ErrorCode::pointwise_bad_graph},
      {"pointwise { inputs = [x]; t0 = exp(x); t0 = exp(t0); output = t0 }", ErrorCode::pointwise_bad_graph},
      {"pointwise { inputs = [x]; t0 = exp(x, x); t1 = neg(t0); output = t1 }", ErrorCode::pointwise_bad_graph},
      {"pointwise { inputs = [x]; t0 = bias(x, x); t1 = neg(t0); output = t1 }", ErrorCode::region_bad_op},
      {"pointwise_reduce { inputs = [x]; output = x; reduce = prod }", ErrorCode::region_bad_op},
      {"matmul { storage = fp8_e4m3 }", ErrorCode::region_bad_dtype},
      {"attention { scale = inf }", ErrorCode::region_bad_value},
      {"attention { scale = nan }", ErrorCode::region_bad_value},
      {"norm_chain { eps = -1 }", ErrorCode::region_bad_value},
      {"norm_chain { norm = batchnorm }", ErrorCode::region_bad_op},
      {"gated { gate_act = bias }", ErrorCode::region_bad_op},
  };
  for (const auto& [text, code] : cases) {
    auto r = parse_region(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code, code) << text << "\n" << r.error().str();
    EXPECT_EQ(r.error().message.rfind("at 1:1: ", 0), 0u) << r.error().message;
  }
  auto later = parse_regions("matmul {}\n\n  fused { epilogue = [bias, bias] }");
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.error().code, ErrorCode::fused_epilogue_bad_order);
  EXPECT_EQ(later.error().message.rfind("at 3:3: ", 0), 0u) << later.error().message;
}

TEST(RegionText, PathologicalInputsEndInAnError) {
  const std::string huge_ident(1 << 20, 'a');
  const std::string cases[] = {
      std::string(100000, '['),
      "pointwise { inputs = [x]; t0 = add(" + std::string(100000, '(') + ")",
      "fused { epilogue = [" + std::string(200000, '[') + "] }",
      huge_ident,
      "matmul { " + huge_ident + " = 1 }",
      "attention { scale = 1" + std::string(100000, '0') + " }",
      std::string(100000, '"'),
      std::string(1000, '\0'),
  };
  for (const auto& text : cases) {
    auto r = parse_regions(text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::parse);
    EXPECT_LT(r.error().message.size(), 400u) << "messages stay short whatever the input";
  }
  // Many DAG statements parse; the graph's own limit rejects them.
  std::string many = "pointwise { inputs = [x]; t0 = neg(x)";
  for (int i = 1; i < 5000; ++i) many += "; t" + std::to_string(i) + " = neg(t" + std::to_string(i - 1) + ")";
  auto r = parse_region(many + "; output = t4999 }");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::pointwise_bad_graph);
}

TEST(RegionText, LoadRegionFile) {
  const std::filesystem::path dir = std::filesystem::path(FUSOR_TEST_DATA) / "regions";
  auto all = load_region_file(dir / "examples.region");
  ASSERT_TRUE(all.ok()) << err(all);
  ASSERT_EQ(all->size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(print_region((*all)[i]), kExamples[i].canonical);

  auto missing = load_region_file(dir / "no_such_file.region");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::io_error);
  EXPECT_NE(missing.error().message.find("no_such_file.region"), std::string::npos) << missing.error().message;

  auto directory = load_region_file(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().code, ErrorCode::io_error);
}

// ---- property tests ---------------------------------------------------------------------

// A seeded generator of VALID regions of every kind, drawing names from the op tables.
class RegionGen {
public:
  explicit RegionGen(uint64_t seed) : rng_(seed) {
    for (const auto& row : op_table()) {
      if (row.in_epilogue_vocabulary && row.arity == 1) unary_.emplace_back(row.name);
      if (row.in_pointwise_vocabulary) pointwise_.push_back(&row);
    }
  }

  size_t below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool coin() { return below(2) == 1; }

  // Awkward doubles: fixed nasty values, random bit patterns, random decimals.
  double number(bool finite, bool nonneg) {
    static const double kNasty[] = {0.0,
                                    -0.0,
                                    1e-300,
                                    5e-324,
                                    2.2250738585072014e-308,
                                    0.1,
                                    3.0000000000000004,
                                    1e-6,
                                    1e-5,
                                    0.125,
                                    1e21,
                                    1.7976931348623157e308,
                                    1.0 / 3.0,
                                    1e-7,
                                    2.5,
                                    -1e-3,
                                    123456789.125,
                                    kInf,
                                    -kInf};
    while (true) {
      double v = 0.0;
      switch (below(3)) {
      case 0: v = kNasty[below(std::size(kNasty))]; break;
      case 1: v = std::bit_cast<double>(static_cast<uint64_t>(rng_())); break;
      default:
        v = std::uniform_real_distribution<double>(-1.0, 1.0)(rng_) *
            std::pow(10.0, static_cast<double>(below(41)) - 20.0);
      }
      if (std::isnan(v) || (finite && !std::isfinite(v))) continue;
      return nonneg ? std::fabs(v) : v;
    }
  }

  std::string storage(bool all) { return std::string(dtype_name(kDTypes[below(all ? 5 : 3)])); }
  std::string unary() { return unary_[below(unary_.size())]; }

  // Unique names; now and then one that must be quoted to read back.
  std::string fresh_name(std::set<std::string>& used, const char* stem) {
    static const char* kOdd[] = {"a b",
                                 "inf",
                                 "nan",
                                 "output",
                                 "inputs",
                                 "reduce",
                                 "true",
                                 "false",
                                 "9lives",
                                 "",
                                 "q\"\\\n\t\x01",
                                 "\xc3\xbcml\xc3\xa4ut",
                                 "/layer.0/Mul_output_0",
                                 "#hash",
                                 "t-1"};
    if (below(8) == 0) {
      std::string odd = kOdd[below(std::size(kOdd))];
      if (used.insert(odd).second) return odd;
    }
    std::string plain = stem + std::to_string(used.size());
    while (!used.insert(plain).second) plain += "_";
    return plain;
  }

  PointwiseSpec graph(size_t min_ops) {
    PointwiseSpec g;
    std::set<std::string> used;
    const size_t n_in = 1 + below(16);
    for (size_t i = 0; i < n_in; ++i) g.inputs.push_back(fresh_name(used, "x"));
    std::vector<std::string> defined = g.inputs;
    const size_t n_ops = min_ops + below(33 - min_ops);
    for (size_t i = 0; i < n_ops; ++i) {
      const OpInfo& op = *pointwise_[below(pointwise_.size())];
      PointwiseOpSpec s{fresh_name(used, "t"), std::string(op.name), {}};
      for (int a = 0; a < op.arity; ++a) {
        if (below(5) == 0)
          s.args.emplace_back(number(false, false));
        else
          s.args.emplace_back(defined[below(defined.size())]);
      }
      defined.push_back(s.out);
      g.ops.push_back(std::move(s));
    }
    // pointwise needs an op's result; pointwise_reduce may reduce an input directly.
    g.output = g.ops.empty() ? g.inputs[below(g.inputs.size())] : g.ops[below(g.ops.size())].out;
    return g;
  }

  Expected<Region> region(RegionKind kind) {
    switch (kind) {
    case RegionKind::fused: {
      FusedSpec s;
      for (size_t i = below(4); i > 0; --i) s.prologue.push_back(unary());
      for (size_t i = below(5); i > 0; --i) s.epilogue.push_back(unary());
      if (coin()) s.epilogue.insert(s.epilogue.begin() + static_cast<long>(below(s.epilogue.size() + 1)), "bias");
      s.residual = coin();
      const auto norms = row_norm_table();
      if (!s.residual && coin()) s.reduction = std::string(norms[below(norms.size())].name);
      if (s.prologue.empty() && s.epilogue.empty() && !s.residual && s.reduction == "none") s.residual = true;
      s.eps = number(true, true);
      s.storage = storage(true);
      s.a_layout = coin() ? "row_major" : "col_major";
      s.b_layout = coin() ? "row_major" : "col_major";
      return as_region(FusedRegion::make(s));
    }
    case RegionKind::matmul: return as_region(MatmulRegion::make({storage(false), coin(), coin()}));
    case RegionKind::attention:
      return as_region(AttentionRegion::make({number(true, false), coin(), coin(), coin(), storage(true)}));
    case RegionKind::gated: return as_region(GatedMatmulRegion::make({unary(), storage(true)}));
    case RegionKind::pointwise: return as_region(PointwiseGraphRegion::make(graph(2)));
    case RegionKind::pointwise_reduce: {
      const auto reduces = reduce_table();
      return as_region(PointwiseReduceRegion::make({graph(0), std::string(reduces[below(reduces.size())].name)}));
    }
    case RegionKind::norm_chain: {
      const auto norms = row_norm_table();
      return as_region(NormChainRegion::make(
          {std::string(norms[below(norms.size())].name), coin(), coin(), coin(), number(true, true)}));
    }
    }
    return make_error(ErrorCode::internal, "unknown kind");
  }

  std::mt19937_64& rng() { return rng_; }

private:
  static constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3, DType::fp8_e5m2};
  std::mt19937_64 rng_;
  std::vector<std::string> unary_;
  std::vector<const OpInfo*> pointwise_;
};

TEST(RegionTextProperty, PrintThenParseIsTheIdentity) {
  RegionGen gen(20240601);
  std::vector<Region> batch;
  std::string batch_text;
  for (int i = 0; i < 3500; ++i) {
    auto r = gen.region(static_cast<RegionKind>(i % 7));
    ASSERT_TRUE(r.ok()) << "generator made an invalid region: " << r.error().str();
    const std::string text = print_region(*r);
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    auto back = parse_region(text);
    ASSERT_TRUE(back.ok()) << text << "\n" << err(back);
    EXPECT_TRUE(*back == *r) << text;
    EXPECT_EQ(print_region(*back), text);
    if (i % 50 == 0) {
      batch.push_back(*r);
      batch_text += "# region " + std::to_string(i) + "\n" + text + "\n";
    }
  }
  auto all = parse_regions(batch_text);
  ASSERT_TRUE(all.ok()) << err(all);
  EXPECT_TRUE(*all == batch);
}

TEST(RegionTextProperty, MutatedTextNeverCrashes) {
  RegionGen gen(77);
  static const char kAlphabet[] = "{}[]()=;,#\"\\-+.eE0123456789 \n\txyz_infa";
  int parsed = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    auto r = gen.region(static_cast<RegionKind>(gen.below(7)));
    ASSERT_TRUE(r.ok());
    std::string text = print_region(*r);
    for (size_t m = 1 + gen.below(4); m > 0; --m) {
      const size_t at = gen.below(text.size() + 1);
      switch (gen.below(4)) {
      case 0:
        if (at < text.size()) text[at] = static_cast<char>(gen.below(256));
        break;
      case 1: text.erase(at, gen.below(8)); break;
      case 2: text.insert(at, 1, kAlphabet[gen.below(sizeof kAlphabet - 1)]); break;
      default: text.insert(at, text.substr(gen.below(text.size() + 1), gen.below(16))); break;
      }
    }
    auto result = parse_regions(text);
    if (!result) {
      ++rejected;
      if (result.error().code == ErrorCode::parse) {
        EXPECT_EQ(result.error().message.rfind(" at ", 0), 0u) << result.error().message;
      }
      continue;
    }
    ++parsed;
    for (const auto& region : *result) {
      const std::string printed = print_region(region);
      auto back = parse_region(printed);
      ASSERT_TRUE(back.ok()) << printed << "\n" << err(back);
      EXPECT_EQ(print_region(*back), printed);
    }
  }
  // Both outcomes occur, so the loop really exercised the parser's error and success paths.
  EXPECT_GT(parsed, 300);
  EXPECT_GT(rejected, 1000);
}

} // namespace
} // namespace fusor
