// The CUDA target without a GPU: every region kind's generic kernel and every tensor-core
// kernel variant compiles through NVRTC for sm_90; launch lines give the grids computed by
// hand; the cubin cache keys on arch and toolchain; lanes decline what they cannot run with
// a named reason; with no driver the runners report E_RUNNER_UNAVAILABLE.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "fusor/operand_gen.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "support/compare.hpp"

#ifdef FUSOR_HAVE_CUDA
#include "targets/cuda/cublaslt_lane.hpp"
#include "targets/cuda/cuda_emitters.hpp"
#include "targets/cuda/cuda_launch.hpp"
#include "targets/cuda/cuda_target.hpp"
#endif

namespace fusor {
namespace {

#ifndef FUSOR_HAVE_CUDA
TEST(CudaEmit, BuiltWithoutCudaToolkit) { GTEST_SKIP() << "built without the CUDA toolkit: no cuda target"; }
#else

Region region_of(const std::string& text) {
  auto r = parse_region(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().str());
  return r.value();
}

const Target& cuda_target() {
  testing::use_test_cache();
  setenv("FUSOR_CUDA_ARCH", "sm_90", 0); // compile for the H200 whatever this machine has
  const Target* t = builtin_registry().target("cuda");
  EXPECT_NE(t, nullptr) << "target cuda is not registered";
  return *t;
}

const char* const kSimtRegions[] = {
    "fused { epilogue = [bias, gelu]; residual = true; }",
    "fused { prologue = [relu]; epilogue = [bias]; reduction = softmax; b_layout = col_major; }",
    "fused { epilogue = [silu]; reduction = layer_norm; a_layout = col_major; storage = f16; }",
    "fused { epilogue = [bias, tanh]; reduction = rmsnorm; storage = bf16; }",
    "matmul { storage = bf16; transpose_b = true; }",
    "matmul { transpose_a = true; }",
    "attention { scale = 0.125; causal = true; }",
    "attention { q_transposed = true; k_transposed = true; storage = f16; }",
    "gated { gate_act = gelu; storage = bf16; }",
    "pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); output = t; }",
    "pointwise_reduce { inputs = [x]; sq = mul(x, x); output = sq; reduce = amax; }",
    "norm_chain { norm = rmsnorm; add_residual = true; weight = true; eps = 1e-6; }",
    "norm_chain { norm = layer_norm; weight = true; bias = true; }",
    "norm_chain { norm = softmax; add_residual = true; }",
};

TEST(CudaEmit, EveryKindCompilesThroughNvrtc) {
  const Target& t = cuda_target();
  std::set<RegionKind> kinds;
  for (const char* text : kSimtRegions) {
    const Region r = region_of(text);
    kinds.insert(region_kind(r));
    auto src = t.emit(r, {});
    ASSERT_TRUE(src.ok()) << text << ": " << src.error().str();
    EXPECT_EQ(src->lane, "cuda_simt");
    EXPECT_EQ(src->lang, "cuda");
    EXPECT_TRUE(cuda::parse_launch(src->source).ok()) << text;
    auto art = t.compile(*src);
    ASSERT_TRUE(art.ok()) << text << ": " << art.error().str();
    std::ifstream f(art->path, std::ios::binary);
    const std::string cubin(std::istreambuf_iterator<char>(f), {});
    EXPECT_EQ(cubin.substr(0, 4), "\x7f"
                                  "ELF")
        << text;
    EXPECT_NE(cubin.find("fusor_kernel"), std::string::npos) << text << ": entry symbol missing from the cubin";
  }
  EXPECT_EQ(kinds.size(), 7u) << "every region kind is covered";
}

TEST(CudaEmit, StaticAndBucketSpecsCompile) {
  const Target& t = cuda_target();
  const Region r = region_of("fused { epilogue = [bias, relu]; }");
  ProblemShape dims;
  dims.M = 8, dims.N = 16, dims.K = 12;
  for (SpecPolicy p : {SpecPolicy::static_dims, SpecPolicy::bucket}) {
    EmitOptions o;
    o.spec = p;
    o.dims = dims;
    auto src = t.emit(r, o);
    ASSERT_TRUE(src.ok()) << src.error().str();
    EXPECT_EQ(src->shape_key, p == SpecPolicy::static_dims ? "static:M=8,N=16,K=12" : "bucket:M<=8,N<=16,K<=16");
    EXPECT_NE(src->source.find("*status = 1"), std::string::npos) << "specialised kernels refuse other dims";
    ASSERT_TRUE(t.compile(*src).ok());
  }
  EmitOptions missing;
  missing.spec = SpecPolicy::static_dims;
  auto err = t.emit(r, missing);
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.error().code, ErrorCode::emit_unsupported);
}

const Candidate* candidate(std::string_view name, RegionKind kind) {
  for (const auto* c : builtin_registry().candidates("cuda", kind))
    if (c->name == name) return c;
  return nullptr;
}

TEST(CudaEmit, TensorCoreVariantsCompileThroughNvrtc) {
  const Target& t = cuda_target();
  struct Case {
    const char* text;
    const char* lane;
    std::map<std::string, std::string> options;
  };
  const Case cases[] = {
      {"fused { epilogue = [bias, gelu]; residual = true; storage = bf16; }", "cuda_mma_bf16", {}},
      {"fused { epilogue = [relu]; b_layout = col_major; storage = f16; }", "cuda_mma_f16", {{"tile", "64x128"}}},
      {"matmul { storage = bf16; transpose_b = true; }", "cuda_mma_bf16", {}},
      {"gated { gate_act = silu; storage = bf16; }", "cuda_mma_bf16", {}},
      {"attention { scale = 0.125; causal = true; storage = bf16; }", "cuda_mma_bf16", {}},
      {"attention { scale = 0.0883883476; storage = f16; }", "cuda_mma_f16", {}},
      {"attention { scale = 0.125; causal = true; storage = bf16; }", "cuda_mma_bf16", {{"rows", "64"}}},
      // Hopper warpgroup MMA (sm_90a): K-major and N-major B, 256- and 128-wide tiles.
      {"fused { epilogue = [bias, gelu]; residual = true; storage = bf16; }", "cuda_mma_bf16", {{"tile", "wg128x256"}}},
      {"fused { epilogue = [bias]; b_layout = col_major; storage = f16; }", "cuda_mma_f16", {{"tile", "wg128x128"}}},
      {"matmul { storage = bf16; transpose_b = true; }", "cuda_mma_bf16", {{"tile", "wg128x256"}}},
  };
  for (const auto& c : cases) {
    const Region r = region_of(c.text);
    const Candidate* cand = candidate(c.lane, region_kind(r));
    ASSERT_NE(cand, nullptr) << c.lane;
    EXPECT_EQ(cand->tier, 2);
    EXPECT_EQ(cand->declines(r), std::nullopt) << c.text;
    EmitOptions o;
    o.options = c.options;
    auto src = cand->emit(r, o);
    ASSERT_TRUE(src.ok()) << c.text << ": " << src.error().str();
    EXPECT_EQ(src->lane, c.lane);
    // Fused and matmul kernels default to the wgmma tiles on sm_90; gated and attention use mma.sync.
    const RegionKind k = region_kind(r);
    const bool wg = c.options.count("tile") ? c.options.at("tile").starts_with("wg")
                                            : k == RegionKind::fused || k == RegionKind::matmul;
    EXPECT_NE(src->source.find(wg ? "wgmma.mma_async.sync.aligned.m64n" : "mma.sync.aligned.m16n8k16"),
              std::string::npos);
    auto art = t.compile(*src);
    ASSERT_TRUE(art.ok()) << c.text << ": " << art.error().str();
  }
}

TEST(CudaEmit, TensorCoreLanesDeclineWithNamedReasons) {
  cuda_target();
  struct Case {
    const char* text;
    const char* lane;
    const char* reason;
  };
  const Case cases[] = {
      {"fused { epilogue = [bias]; }", "cuda_mma_bf16", "bf16 storage"},
      {"fused { epilogue = [bias]; storage = f16; }", "cuda_mma_bf16", "bf16 storage"},
      {"fused { prologue = [relu]; storage = bf16; }", "cuda_mma_bf16", "prologue"},
      {"fused { epilogue = [bias]; reduction = rmsnorm; storage = bf16; }", "cuda_mma_bf16", "row reduction"},
      {"fused { epilogue = [bias]; a_layout = col_major; storage = f16; }", "cuda_mma_f16", "row-major"},
      {"matmul { storage = bf16; transpose_a = true; }", "cuda_mma_bf16", "row-major"},
      {"attention { q_transposed = true; storage = bf16; }", "cuda_mma_bf16", "natural"},
  };
  for (const auto& c : cases) {
    const Region r = region_of(c.text);
    const Candidate* cand = candidate(c.lane, region_kind(r));
    ASSERT_NE(cand, nullptr);
    const auto why = cand->declines(r);
    ASSERT_TRUE(why.has_value()) << c.text;
    EXPECT_NE(why->find(c.reason), std::string::npos) << *why;
    auto src = cand->emit(r, {});
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
  }
  // Unknown options are refused, never ignored.
  const Region r = region_of("fused { epilogue = [bias]; storage = bf16; }");
  EmitOptions o;
  o.options["tile"] = "100x100";
  auto bad = candidate("cuda_mma_bf16", RegionKind::fused)->emit(r, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("128x128"), std::string::npos) << bad.error().message;
  EmitOptions u;
  u.options["threads"] = "64";
  EXPECT_FALSE(cuda_target().emit(r, u).ok());
  // wgmma tiles need Hopper: on another architecture they decline by name.
  setenv("FUSOR_CUDA_ARCH", "sm_80", 1);
  EmitOptions w;
  w.options["tile"] = "wg128x256";
  auto hopper_only = candidate("cuda_mma_bf16", RegionKind::fused)->emit(r, w);
  setenv("FUSOR_CUDA_ARCH", "sm_90", 1);
  ASSERT_FALSE(hopper_only.ok());
  EXPECT_NE(hopper_only.error().message.find("needs sm_90"), std::string::npos) << hopper_only.error().message;
}

TEST(CudaEmit, KernelsRenderOpsFromTheOpTable) {
  const Target& t = cuda_target();
  auto src = t.emit(region_of("fused { epilogue = [bias, gelu]; }"), {});
  ASSERT_TRUE(src.ok());
  // The op table's GELU spelling (its constant 2 * sqrt(2 / pi) * log2 e) appears, no other one.
  EXPECT_NE(src->source.find("2.302208198144325f"), std::string::npos);
  EXPECT_EQ(src->source.find("__expf"), std::string::npos) << "the f32 lane keeps IEEE math";
}

TEST(CudaEmit, LaunchGeometryMatchesHandComputedGrids) {
  using cuda::LaunchSpec;
  const LaunchSpec gemm{LaunchSpec::Rule::gemm, 128, 128, 128, 75776};
  auto g = cuda::geometry(gemm, std::vector<std::int64_t>{4096, 4096, 4096});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->grid_x, 32u);
  EXPECT_EQ(g->grid_y, 32u);
  EXPECT_EQ(g->block, 128u);
  EXPECT_EQ(g->smem, 75776u);
  g = cuda::geometry(gemm, std::vector<std::int64_t>{17, 1000, 31}); // ceil(1000/128) = 8, ceil(17/128) = 1
  EXPECT_EQ(g->grid_x, 8u);
  EXPECT_EQ(g->grid_y, 1u);
  const LaunchSpec rows_gemm{LaunchSpec::Rule::gemm, 256, 64, 0, 0};
  g = cuda::geometry(rows_gemm, std::vector<std::int64_t>{129, 13, 7}); // whole rows: 1 x ceil(129/64)
  EXPECT_EQ(g->grid_x, 1u);
  EXPECT_EQ(g->grid_y, 3u);
  const LaunchSpec attn{LaunchSpec::Rule::attention, 128, 64, 0, 0};
  g = cuda::geometry(attn, std::vector<std::int64_t>{8, 16, 16, 4096, 4096, 128, 128});
  EXPECT_EQ(g->grid_x, 64u);
  EXPECT_EQ(g->grid_y, 128u);
  const LaunchSpec ew{LaunchSpec::Rule::elementwise, 256, 1, 0, 0};
  g = cuda::geometry(ew, std::vector<std::int64_t>{1000});
  EXPECT_EQ(g->grid_x, 4u);
  EXPECT_FALSE(g->empty);
  g = cuda::geometry(ew, std::vector<std::int64_t>{0});
  EXPECT_TRUE(g->empty);
  // Round trip through the source line.
  auto back = cuda::parse_launch("x\n" + cuda::launch_line(gemm) + "\ny");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, gemm);
  EXPECT_FALSE(cuda::parse_launch("// fusor-launch: gemm threads=two").ok());
  EXPECT_FALSE(cuda::parse_launch("no line").ok());
}

TEST(CudaEmit, CacheKeysOnArchAndReusesCubins) {
  const Target& t = cuda_target();
  auto src = t.emit(region_of("pointwise { inputs = [x, y]; a = add(x, y); b = relu(a); output = b; }"), {});
  ASSERT_TRUE(src.ok());
  EXPECT_NE(cuda::cubin_cache_key(*src, "sm_90"), cuda::cubin_cache_key(*src, "sm_80"));
  auto first = t.compile(*src);
  auto second = t.compile(*src);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(first->sha256, second->sha256);
  EXPECT_EQ(first->path, second->path);
}

TEST(CudaEmit, CublasLtLaneDeclinesWhatItWouldApproximate) {
  cuda_target();
  struct Case {
    const char* text;
    const char* reason;
  };
  const Case cases[] = {
      {"fused { epilogue = [bias, gelu_erf]; storage = bf16; }", "tanh approximation"},
      {"fused { epilogue = [relu, bias]; }", "bias before its activation"},
      {"fused { epilogue = [bias, gelu]; residual = true; }", "residual after"},
      {"fused { epilogue = [bias, silu]; }", "no epilogue for silu"},
      {"fused { epilogue = [relu, gelu]; }", "one activation"},
      {"fused { prologue = [relu]; }", "prologue"},
      {"fused { reduction = rmsnorm; }", "row reduction"},
      {"fused { epilogue = [bias]; storage = fp8_e4m3; }", "fp8_e4m3"},
  };
  const Candidate* lt = candidate("cuda_cublaslt", RegionKind::fused);
  ASSERT_NE(lt, nullptr);
  EXPECT_EQ(lt->tier, 3);
  for (const auto& c : cases) {
    const Region r = region_of(c.text);
    const auto why = lt->declines(r);
    ASSERT_TRUE(why.has_value()) << c.text;
    EXPECT_NE(why->find(c.reason), std::string::npos) << *why;
    auto src = lt->emit(r, {});
    ASSERT_FALSE(src.ok()) << c.text;
    EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
  }
  // What the library computes exactly applies: bias first, one of relu / tanh-gelu, and a
  // residual only without an activation (cuBLASLt adds C before it).
  for (const char* ok : {"fused { epilogue = [bias, gelu]; storage = bf16; }", "fused { epilogue = [relu]; }",
                         "fused { epilogue = [bias]; residual = true; storage = f16; b_layout = col_major; }",
                         "fused { epilogue = [bias]; a_layout = col_major; }"})
    EXPECT_FALSE(lt->declines(region_of(ok)).has_value()) << ok;
  EmitOptions o;
  o.options["tile"] = "128x128";
  auto bad = lt->emit(region_of("fused { epilogue = [bias]; }"), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown option 'tile'"), std::string::npos) << bad.error().message;
}

TEST(CudaEmit, CublasLtPlansRoundTripAndAreCached) {
  const Target& t = cuda_target();
  const Candidate* lt = candidate("cuda_cublaslt", RegionKind::fused);
  ASSERT_NE(lt, nullptr);
  auto src = lt->emit(region_of("fused { epilogue = [bias, gelu]; a_layout = col_major; storage = bf16; }"), {});
  ASSERT_TRUE(src.ok()) << src.error().str();
  EXPECT_EQ(src->lang, "cublaslt");
  EXPECT_EQ(src->lane, "cuda_cublaslt");
  auto launch = cuda::parse_launch(src->source);
  ASSERT_TRUE(launch.ok()) << launch.error().str();
  EXPECT_EQ(launch->rule, cuda::LaunchSpec::Rule::library);
  auto plan = cuda::parse_plan(src->source);
  ASSERT_TRUE(plan.ok()) << plan.error().str();
  EXPECT_EQ(plan->storage, DType::bf16);
  EXPECT_TRUE(plan->a_col_major);
  EXPECT_FALSE(plan->b_col_major);
  EXPECT_TRUE(plan->bias);
  EXPECT_FALSE(plan->residual);
  EXPECT_EQ(plan->act, cuda::CublasPlan::Act::gelu);
  EXPECT_EQ(plan->text(), "plan storage=bf16 a=col b=row bias=1 act=gelu residual=0");
  EXPECT_FALSE(cuda::parse_plan("plan storage=bf16 a=diagonal b=row bias=1 act=gelu residual=0").ok());
  EXPECT_FALSE(cuda::parse_plan("// no plan here").ok());
  // The plan goes through the shared cache like a cubin: a second compile is a hit.
  auto first = t.compile(*src);
  ASSERT_TRUE(first.ok()) << first.error().str();
  auto second = t.compile(*src);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(first->sha256, second->sha256);
  EXPECT_EQ(first->path.extension(), ".plan");
  // 16-bit bias and residual widen exactly to f32 (D's type); A and B stay as stored.
  // bf16 0x3FC0 is 1.5, 0xC020 is -2.5.
  const ByteBuffer a{'\x01', '\x02'}, b{'\x03', '\x04'}, bias{'\xC0', '\x3F', '\x20', '\xC0'};
  const std::vector<ByteBuffer> bytes{a, b, bias};
  const auto wide = cuda::plan_operands(*plan, bytes);
  ASSERT_EQ(wide.size(), 3u);
  EXPECT_EQ(wide[0], a);
  EXPECT_EQ(wide[1], b);
  ASSERT_EQ(wide[2].size(), 8u);
  float v[2];
  std::memcpy(v, wide[2].data(), 8);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.5f);
  // Without a GPU the plan's runner declines cleanly.
  if (!t.available().ok()) {
    const Region r = region_of("fused { epilogue = [bias, gelu]; a_layout = col_major; storage = bf16; }");
    ProblemShape dims;
    dims.M = 4, dims.N = 8, dims.K = 3;
    auto run = t.run(*first, r, make_operands(r, dims, 1, 0.5));
    ASSERT_FALSE(run.ok());
    EXPECT_EQ(run.error().code, ErrorCode::runner_unavailable) << run.error().str();
  }
}

TEST(CudaEmit, NvrtcDiagnosticsAreCompileErrors) {
  const Target& t = cuda_target();
  KernelSource bad;
  bad.source = "extern \"C\" __global__ void fusor_kernel() { undeclared_thing = 1; }\n";
  bad.entry = "fusor_kernel";
  bad.lang = "cuda";
  bad.target = "cuda";
  bad.lane = "cuda_simt";
  auto art = t.compile(bad);
  ASSERT_FALSE(art.ok());
  EXPECT_EQ(art.error().code, ErrorCode::compile_failed);
  EXPECT_NE(art.error().message.find("undeclared_thing"), std::string::npos) << art.error().message;
  bad.lang = "c";
  EXPECT_EQ(t.compile(bad).error().code, ErrorCode::bad_argument);
}

TEST(CudaEmit, WithoutADriverRunnersDecline) {
  const Target& t = cuda_target();
  if (t.available().ok()) GTEST_SKIP() << "a CUDA device is present; the no-GPU paths are not reachable here";
  EXPECT_EQ(t.available().error().code, ErrorCode::runner_unavailable);
  std::cout << "cuda unavailable, as expected here: " << t.available().error().str() << "\n";
  const Region r = region_of("fused { epilogue = [bias, relu]; }");
  ProblemShape dims;
  dims.M = 4, dims.N = 8, dims.K = 3;
  const auto operands = make_operands(r, dims, 1, 0.5);
  auto src = t.emit(r, {});
  ASSERT_TRUE(src.ok());
  auto art = t.compile(*src);
  ASSERT_TRUE(art.ok());
  auto run = t.run(*art, r, operands);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().code, ErrorCode::runner_unavailable);
  auto iso = t.run_isolated(*art, {}, std::chrono::milliseconds(1000));
  ASSERT_FALSE(iso.ok());
  EXPECT_EQ(iso.error().code, ErrorCode::runner_unavailable);
  // Operand errors still come first, before anything about the device.
  auto missing = t.run(*art, r, std::span<const Tensor>(operands).first(2));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::fused_epilogue_missing_operand);
  // The generic path declines to the reference, saying why.
  auto out = execute_on_target(t, r, operands);
  ASSERT_TRUE(out.ok()) << out.error().str();
  EXPECT_EQ(out->tag, "reference");
  EXPECT_NE(out->note.find("E_RUNNER_UNAVAILABLE"), std::string::npos) << out->note;
}

#endif

} // namespace
} // namespace fusor
