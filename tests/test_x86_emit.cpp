// The x86 emitter's contract: readable source with a header naming region, lane and spec;
// one renderer driven by the op table; unsupported requests and unknown options refused.
#include <gtest/gtest.h>

#include "codegen/abi.hpp"
#include "codegen/c_renderer.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "targets/x86/x86_emitter.hpp"

namespace fusor {
namespace {

Region region_of(const std::string& text) { return parse_region(text).value(); }

ProblemShape gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  ProblemShape s;
  s.M = m;
  s.N = n;
  s.K = k;
  return s;
}

TEST(X86Emit, SourceOpensWithRegionLaneAndSpec) {
  const Region region = region_of("fused { epilogue = [bias, gelu] }");
  auto src = x86::emit(region, {});
  ASSERT_TRUE(src.ok()) << src.error().str();
  const std::string first_line = src->source.substr(0, src->source.find('\n'));
  EXPECT_NE(first_line.find(print_region(region)), std::string::npos) << first_line;
  EXPECT_NE(first_line.find(std::string("lane: ") + std::string(x86::lane_tag())), std::string::npos);
  EXPECT_NE(first_line.find("spec: dynamic:M,N,K"), std::string::npos);
  EXPECT_EQ(src->lang, "c");
  EXPECT_EQ(src->target, "x86");
  EXPECT_EQ(src->entry, "fusor_kernel");
}

TEST(X86Emit, OpFormulasComeFromTheTable) {
  // The gelu spelling in the kernel is exactly the op table's C expression, rendered (with
  // the vectorisable math helpers in place of libm's).
  const Region region = region_of("fused { epilogue = [gelu] }");
  auto src = x86::emit(region, {});
  ASSERT_TRUE(src.ok());
  EXPECT_NE(src->source.find(codegen::render_op(codegen::c99_simd_dialect(), Op::gelu, "v")), std::string::npos);
}

TEST(X86Emit, SpecPoliciesAndShapeKeys) {
  const Region region = region_of("matmul { }");
  EmitOptions opts;
  opts.spec = SpecPolicy::static_dims;
  opts.dims = gemm(8, 16, 12);
  auto st = x86::emit(region, opts);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->shape_key, "static:M=8,N=16,K=12");
  EXPECT_NE(st->source.find("const int64_t M = 8LL;"), std::string::npos);
  opts.spec = SpecPolicy::bucket;
  opts.dims = gemm(7, 129, 1);
  auto bk = x86::emit(region, opts);
  ASSERT_TRUE(bk.ok());
  EXPECT_EQ(bk->shape_key, "bucket:M<=8,N<=256,K<=1");
  opts.spec = SpecPolicy::dynamic;
  auto dy = x86::emit(region, opts);
  ASSERT_TRUE(dy.ok());
  EXPECT_EQ(dy->shape_key, "dynamic:M,N,K");
}

TEST(X86Emit, StaticWithoutDimsIsUnsupported) {
  EmitOptions opts;
  opts.spec = SpecPolicy::static_dims;
  auto src = x86::emit(region_of("matmul { }"), opts);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
  EXPECT_NE(src.error().message.find("matmul"), std::string::npos);
  EXPECT_NE(src.error().message.find("x86"), std::string::npos);
}

TEST(X86Emit, UnknownOptionIsRejectedNotIgnored) {
  EmitOptions opts;
  opts.options["tile_m"] = "64";
  auto src = x86::emit(region_of("matmul { }"), opts);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
  EXPECT_NE(src.error().message.find("tile_m"), std::string::npos);
}

TEST(X86Emit, Fp8NamesKindTargetAndReason) {
  auto src = x86::emit(region_of("gated { storage = fp8_e5m2 }"), {});
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
  EXPECT_NE(src.error().message.find("region gated, target x86"), std::string::npos) << src.error().message;
  EXPECT_NE(src.error().message.find("fp8_e5m2"), std::string::npos);
}

TEST(X86Emit, EveryKindEmits) {
  for (const char* text :
       {"fused { prologue = [relu]; epilogue = [bias]; residual = true; a_layout = col_major }",
        "matmul { storage = bf16 }", "attention { causal = true }", "gated { }",
        "pointwise { inputs = [x]; t0 = exp(x); t1 = neg(t0); output = t1 }",
        "pointwise_reduce { inputs = [x]; reduce = amax; output = x }", "norm_chain { norm = layer_norm }"}) {
    auto src = x86::emit(region_of(text), {});
    ASSERT_TRUE(src.ok()) << text << ": " << src.error().str();
    EXPECT_NE(src->source.find("int fusor_kernel("), std::string::npos);
  }
}

TEST(X86Registry, GenericLaneServesEveryKind) {
  const Registry& reg = builtin_registry();
  ASSERT_NE(reg.target("x86"), nullptr);
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::attention, RegionKind::gated,
                    RegionKind::pointwise, RegionKind::pointwise_reduce, RegionKind::norm_chain}) {
    const Candidate* generic = nullptr;
    for (const Candidate* c : reg.candidates("x86", kind))
      if (c->name == x86::kGenericLane) generic = c;
    ASSERT_NE(generic, nullptr) << region_kind_name(kind);
    EXPECT_EQ(generic->tier, 1);
    EXPECT_FALSE(generic->emit) << "the generic lane uses the target's own emitter";
  }
  const Region fp8 = region_of("fused { epilogue = [relu]; storage = fp8_e4m3 }");
  for (const Candidate* c : reg.candidates("x86", RegionKind::fused))
    EXPECT_TRUE(c->declines(fp8).has_value()) << c->name << " must decline fp8";
}

TEST(Registry, ReRegisteringANameReplacesIt) {
  Registry reg;
  reg.add_candidate({"a", "t", RegionKind::matmul, 1, [](const Region&) { return std::nullopt; }});
  reg.add_candidate({"b", "t", RegionKind::matmul, 3, [](const Region&) { return std::nullopt; }});
  reg.add_candidate({"a", "t", RegionKind::matmul, 2, [](const Region&) { return std::nullopt; }});
  auto cands = reg.candidates("t", RegionKind::matmul);
  ASSERT_EQ(cands.size(), 2u);
  EXPECT_EQ(cands[0]->name, "a");
  EXPECT_EQ(cands[0]->tier, 2);
  EXPECT_TRUE(reg.candidates("t", RegionKind::fused).empty());
}

} // namespace
} // namespace fusor
