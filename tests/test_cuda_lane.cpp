// The CUDA lanes on a GPU: every lane passes the oracle on every probe family for every
// region kind it covers, runs match the reference at larger ragged shapes, and the oracle
// catches O(1) miscompiles, faults and out-of-bounds writes in the child process.
// Without a CUDA device every test skips and says why.
#include <gtest/gtest.h>

#include <iostream>

#include "fusor/operand_gen.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "support/compare.hpp"

namespace fusor {
namespace {

const Target* cuda_or_skip_reason(std::string& why) {
  testing::use_test_cache();
  const Target* t = builtin_registry().target("cuda");
  if (!t) {
    why = "this fusor was built without the CUDA toolkit";
    return nullptr;
  }
  if (Status s = t->available(); !s) {
    why = s.error().str();
    return nullptr;
  }
  return t;
}

#define REQUIRE_GPU(t)                                                                                                 \
  std::string skip_reason_;                                                                                            \
  const Target* t = cuda_or_skip_reason(skip_reason_);                                                                 \
  if (!t) {                                                                                                            \
    std::cout << "[ SKIPPED  ] no CUDA device: " << skip_reason_ << "\n";                                              \
    GTEST_SKIP() << skip_reason_;                                                                                      \
  }

Region region_of(const std::string& text) {
  auto r = parse_region(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().str());
  return r.value();
}

const Candidate* candidate(std::string_view name, RegionKind kind) {
  for (const auto* c : builtin_registry().candidates("cuda", kind))
    if (c->name == name) return c;
  return nullptr;
}

Expected<KernelSource> emit_lane(const Target& t, const Region& r, std::string_view lane, EmitOptions o = {}) {
  const Candidate* c = candidate(lane, region_kind(r));
  if (!c) return make_error(ErrorCode::arbiter_forced_unknown, "no candidate " + std::string(lane));
  return c->emit ? c->emit(r, o) : t.emit(r, o);
}

struct LaneCase {
  const char* text;
  const char* lane;
  const char* option = nullptr; // one lane option, KEY=VALUE (tile=wg*: Hopper wgmma kernels)
};

EmitOptions with_option(const char* option) {
  EmitOptions o;
  if (option) {
    const std::string kv(option);
    o.options[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  return o;
}

const LaneCase kLaneCases[] = {
    {"fused { epilogue = [bias, gelu]; residual = true; }", "cuda_simt"},
    {"fused { prologue = [relu]; epilogue = [bias]; reduction = softmax; b_layout = col_major; }", "cuda_simt"},
    {"fused { epilogue = [silu]; reduction = layer_norm; a_layout = col_major; storage = f16; }", "cuda_simt"},
    {"fused { epilogue = [bias, tanh]; reduction = rmsnorm; storage = bf16; }", "cuda_simt"},
    {"matmul { storage = bf16; transpose_b = true; }", "cuda_simt"},
    {"matmul { transpose_a = true; }", "cuda_simt"},
    {"attention { scale = 0.125; causal = true; }", "cuda_simt"},
    {"attention { q_transposed = true; k_transposed = true; storage = f16; }", "cuda_simt"},
    {"gated { gate_act = gelu; storage = bf16; }", "cuda_simt"},
    {"gated { gate_act = silu; }", "cuda_simt"},
    {"pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); output = t; }", "cuda_simt"},
    {"pointwise { inputs = [x, y, z]; a = add(x, y); b = maximum(a, z); c = softplus(b); output = c; }", "cuda_simt"},
    {"pointwise_reduce { inputs = [x]; sq = mul(x, x); output = sq; reduce = sum; }", "cuda_simt"},
    {"pointwise_reduce { inputs = [x, y]; d = sub(x, y); output = d; reduce = amax; }", "cuda_simt"},
    {"pointwise_reduce { inputs = [x]; e = exp(x); output = e; reduce = mean; }", "cuda_simt"},
    {"pointwise_reduce { inputs = [x]; n = neg(x); output = n; reduce = amin; }", "cuda_simt"},
    {"norm_chain { norm = rmsnorm; add_residual = true; weight = true; eps = 1e-6; }", "cuda_simt"},
    {"norm_chain { norm = layer_norm; weight = true; bias = true; }", "cuda_simt"},
    {"norm_chain { norm = softmax; add_residual = true; }", "cuda_simt"},
    {"fused { epilogue = [bias, gelu]; residual = true; storage = bf16; }", "cuda_mma_bf16"},
    {"fused { epilogue = [bias, gelu]; storage = f16; }", "cuda_mma_f16"},
    {"fused { epilogue = [bias, relu]; b_layout = col_major; storage = bf16; }", "cuda_mma_bf16", "tile=128x128"},
    {"fused { epilogue = [sigmoid]; residual = true; b_layout = col_major; storage = f16; }", "cuda_mma_f16",
     "tile=64x128"},
    {"matmul { storage = bf16; transpose_b = true; }", "cuda_mma_bf16", "tile=128x256"},
    {"matmul { storage = f16; }", "cuda_mma_f16"},
    {"gated { gate_act = silu; storage = bf16; }", "cuda_mma_bf16"},
    {"gated { gate_act = gelu; storage = f16; }", "cuda_mma_f16"},
    {"attention { scale = 0.125; causal = true; storage = bf16; }", "cuda_mma_bf16"},
    {"attention { scale = 0.25; storage = bf16; }", "cuda_mma_bf16"},
    {"attention { scale = 0.125; causal = true; storage = f16; }", "cuda_mma_f16"},
    {"attention { scale = 0.3; storage = f16; }", "cuda_mma_f16"},
    {"attention { scale = 0.125; causal = true; storage = bf16; }", "cuda_mma_bf16", "rows=64"},
    {"attention { scale = 0.3; storage = f16; }", "cuda_mma_f16", "rows=64"},
    {"fused { epilogue = [bias, gelu]; residual = true; storage = bf16; }", "cuda_mma_bf16", "tile=wg128x256"},
    {"fused { epilogue = [bias, relu]; b_layout = col_major; storage = f16; }", "cuda_mma_f16", "tile=wg128x128"},
    {"fused { epilogue = [gelu]; storage = bf16; }", "cuda_mma_bf16", "tile=wg128x256"},
    {"matmul { storage = bf16; transpose_b = true; }", "cuda_mma_bf16", "tile=wg128x256"},
    {"matmul { storage = f16; }", "cuda_mma_f16", "tile=wg128x128"},
    {"fused { epilogue = [bias, gelu]; storage = bf16; }", "cuda_cublaslt"},
    {"fused { epilogue = [bias, gelu]; storage = f16; b_layout = col_major; }", "cuda_cublaslt"},
    {"fused { epilogue = [gelu]; a_layout = col_major; }", "cuda_cublaslt"},
    {"fused { epilogue = [bias, relu]; }", "cuda_cublaslt"},
    {"fused { epilogue = [relu]; storage = bf16; }", "cuda_cublaslt"},
    {"fused { epilogue = [bias]; residual = true; storage = f16; b_layout = col_major; }", "cuda_cublaslt"},
    {"fused { residual = true; storage = bf16; a_layout = col_major; b_layout = col_major; }", "cuda_cublaslt"},
};

TEST(CudaLane, OracleVerifiesEveryLaneOnEveryProbeFamily) {
  REQUIRE_GPU(t);
  int failures = 0;
  for (const auto& c : kLaneCases) {
    const Region r = region_of(c.text);
    auto src = emit_lane(*t, r, c.lane, with_option(c.option));
    ASSERT_TRUE(src.ok()) << c.text << ": " << src.error().str();
    auto art = t->compile(*src);
    ASSERT_TRUE(art.ok()) << c.text << ": " << art.error().str();
    auto rep = verify(r, *t, *art);
    ASSERT_TRUE(rep.ok()) << c.text << ": " << rep.error().str();
    std::string families;
    for (const auto& f : rep->families) families += (families.empty() ? "" : ",") + f;
    std::cout << "ORACLE " << (rep->verified ? "PASS" : "FAIL") << " lane=" << c.lane
              << (c.option ? std::string(" ") + c.option : std::string())
              << " kind=" << region_kind_name(region_kind(r)) << " probes=" << rep->probes << " families=" << families
              << " max_abs_err=" << rep->max_abs_err << " budget_atol=" << rep->atol << " | " << c.text << "\n";
    if (!rep->verified) {
      ++failures;
      ADD_FAILURE() << c.text << " (" << c.lane << "): " << rep->summary();
    }
    // The oracle ran every family that applies: fixed, ragged, exact_int, special at least.
    for (const char* f : {"fixed", "ragged", "exact_int", "special"})
      EXPECT_NE(std::find(rep->families.begin(), rep->families.end(), f), rep->families.end()) << c.text << " " << f;
  }
  EXPECT_EQ(failures, 0);
}

double lane_atol(const std::string& tag, DType dtype) { return std::max(1e-3, lane_budget(tag, dtype).atol); }

void expect_run_matches(const Target& t, const char* text, const char* lane, const ProblemShape& dims, double scale,
                        const char* option = nullptr) {
  const Region r = region_of(text);
  const Candidate* c = candidate(lane, region_kind(r));
  ASSERT_NE(c, nullptr);
  const auto operands = make_operands(r, dims, 42, scale);
  auto ref = evaluate_reference(r, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  ExecuteOptions o;
  o.candidate = c;
  o.reference_fallback = false;
  o.emit = with_option(option);
  auto out = execute_on_target(t, r, operands, o);
  ASSERT_TRUE(out.ok()) << text << ": " << out.error().str();
  EXPECT_EQ(out->tag, lane);
  EXPECT_TRUE(out->verified);
  const Budget b = lane_budget(lane, region_storage(r));
  EXPECT_TRUE(testing::all_close(out->output, *ref, lane_atol(lane, region_storage(r)), b.rtol)) << text;
}

ProblemShape gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  ProblemShape s;
  s.M = m, s.N = n, s.K = k;
  return s;
}

ProblemShape attn(std::int64_t b, std::int64_t h, std::int64_t kv, std::int64_t m, std::int64_t nk, std::int64_t d) {
  ProblemShape s;
  s.batch = b, s.heads = h, s.kv_heads = kv, s.M = m, s.Nk = nk, s.D = d, s.Dv = d;
  return s;
}

TEST(CudaLane, LargerShapesMatchTheReference) {
  REQUIRE_GPU(t);
  // Aligned (16-byte copies) and ragged (per-element path) tensor-core GEMMs.
  expect_run_matches(*t, "fused { epilogue = [bias, gelu]; residual = true; storage = bf16; }", "cuda_mma_bf16",
                     gemm(256, 384, 520), 0.3);
  expect_run_matches(*t, "fused { epilogue = [bias, gelu]; storage = f16; }", "cuda_mma_f16", gemm(257, 301, 77), 0.3);
  expect_run_matches(*t, "gated { gate_act = silu; storage = bf16; }", "cuda_mma_bf16", gemm(300, 200, 136), 0.3);
  // Hopper wgmma tiles: aligned, ragged (per-element copies), N-major and K-major B.
  expect_run_matches(*t, "fused { epilogue = [bias, gelu]; residual = true; storage = bf16; }", "cuda_mma_bf16",
                     gemm(512, 768, 1024), 0.3, "tile=wg128x256");
  expect_run_matches(*t, "fused { epilogue = [bias, gelu]; storage = bf16; }", "cuda_mma_bf16", gemm(257, 301, 77), 0.3,
                     "tile=wg128x256");
  expect_run_matches(*t, "fused { epilogue = [bias]; b_layout = col_major; storage = f16; }", "cuda_mma_f16",
                     gemm(300, 520, 264), 0.3, "tile=wg128x128");
  // The cuBLASLt vendor lane at a size its heuristics tile differently.
  expect_run_matches(*t, "fused { epilogue = [bias, gelu]; storage = bf16; }", "cuda_cublaslt", gemm(1000, 1536, 512),
                     0.3);
  // Flash attention at both head sizes, GQA, causal, a ragged tail.
  expect_run_matches(*t, "attention { scale = 0.125; causal = true; storage = bf16; }", "cuda_mma_bf16",
                     attn(2, 4, 2, 200, 200, 64), 1.0);
  expect_run_matches(*t, "attention { scale = 0.0883883476; storage = bf16; }", "cuda_mma_bf16",
                     attn(1, 2, 1, 130, 257, 128), 1.0);
  expect_run_matches(*t, "attention { scale = 0.0883883476; causal = true; storage = f16; }", "cuda_mma_f16",
                     attn(1, 4, 4, 150, 150, 128), 1.0);
  expect_run_matches(*t, "attention { scale = 0.125; causal = true; storage = bf16; }", "cuda_mma_bf16",
                     attn(2, 4, 2, 300, 300, 64), 1.0, "rows=64");
  // Generic lane.
  expect_run_matches(*t, "fused { epilogue = [bias, gelu]; residual = true; }", "cuda_simt", gemm(130, 260, 70), 0.3);
  expect_run_matches(
      *t, "norm_chain { norm = layer_norm; add_residual = true; weight = true; bias = true; }", "cuda_simt",
      [] {
        ProblemShape s;
        s.output = {33, 4096};
        return s;
      }(),
      1.0);
}

TEST(CudaLane, AttentionHeadDimsPastTheLaneAreDeclinedByName) {
  REQUIRE_GPU(t);
  const Region r = region_of("attention { storage = bf16; }");
  auto src = emit_lane(*t, r, "cuda_mma_bf16");
  ASSERT_TRUE(src.ok());
  auto art = t->compile(*src);
  ASSERT_TRUE(art.ok());
  const auto ops = make_operands(r, attn(1, 1, 1, 4, 4, 256), 1, 1.0);
  auto out = t->run(*art, r, ops);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::emit_unsupported);
  EXPECT_NE(out.error().message.find("up to 128"), std::string::npos) << out.error().message;
}

// A lane's kernel with one textual change, compiled as the same lane.
Expected<Artifact> mutated(const Target& t, const Region& r, const char* lane, std::string_view from,
                           std::string_view to, const char* option = nullptr) {
  FUSOR_TRY_ASSIGN(KernelSource src, emit_lane(t, r, lane, with_option(option)));
  const size_t at = src.source.find(from);
  if (at == std::string::npos) return make_error(ErrorCode::internal, "mutation site not found: " + std::string(from));
  src.source.replace(at, from.size(), to);
  return t.compile(src);
}

TEST(CudaLane, BudgetsCatchOrderOneMiscompiles) {
  REQUIRE_GPU(t);
  struct Mutation {
    const char* text;
    const char* lane;
    const char* from;
    const char* to;
    const char* option = nullptr;
  };
  const Mutation ms[] = {
      // 2% too large on every output: inside no budget's rounding slack at O(1) values.
      {"fused { epilogue = [bias, gelu]; storage = bf16; }", "cuda_mma_bf16", "float v = raw[e];",
       "float v = raw[e] * 1.1f;"},
      {"gated { gate_act = silu; storage = f16; }", "cuda_mma_f16", "float u = raw_up[e];",
       "float u = raw_up[e] + 0.05f;"},
      // A wrong softmax scale.
      {"attention { scale = 0.125; causal = true; storage = bf16; }", "cuda_mma_bf16", "const float scale = (0.125f);",
       "const float scale = (0.15f);"},
      // Causal mask off by one key.
      {"attention { scale = 0.125; causal = true; storage = f16; }", "cuda_mma_f16",
       "const bool vis = key < Nk && (!CAUSAL || key <= row);",
       "const bool vis = key < Nk && (!CAUSAL || key <= row + 1);"},
      // The generic lane dropping the last K step.
      {"fused { epilogue = [bias]; }", "cuda_simt", "for (int64_t k0 = 0; k0 < K; k0 += 16)",
       "for (int64_t k0 = 0; k0 + 16 < K; k0 += 16)"},
      // wgmma reading the first 16 columns of A's tile at every k step.
      {"fused { epilogue = [bias]; storage = bf16; }", "cuda_mma_bf16", "fusor_wg_desc(st + wg * 64 * 128 + kk * 32,",
       "fusor_wg_desc(st + wg * 64 * 128,", "tile=wg128x256"},
  };
  for (const auto& m : ms) {
    const Region r = region_of(m.text);
    auto art = mutated(*t, r, m.lane, m.from, m.to, m.option);
    ASSERT_TRUE(art.ok()) << art.error().str();
    auto rep = verify(r, *t, *art);
    ASSERT_TRUE(rep.ok()) << rep.error().str();
    EXPECT_FALSE(rep->verified) << m.lane << " accepted a mutant: " << m.to;
    if (rep->failure) std::cout << "mutant rejected (" << m.lane << "): " << rep->failure->reason << "\n";
  }
}

TEST(CudaLane, FaultsAndStrayWritesAreOutcomesInTheChild) {
  REQUIRE_GPU(t);
  const Region r = region_of("pointwise { inputs = [x, y]; a = add(x, y); b = relu(a); output = b; }");
  struct Mutation {
    const char* to;
    const char* expect;
  };
  const Mutation ms[] = {
      {"out[i + 1] = v;", "out_of_bounds_write"}, // one past the end
      {"out[i] = v; if (i == 0) *(volatile float*)(out - (1LL << 40)) = 1.0f;", "crashed"},
      {"out[i] = v; if (i == 0) *status = 7;", "kernel_error"},
  };
  for (const auto& m : ms) {
    auto art = mutated(*t, r, "cuda_simt", "out[i] = v;", m.to);
    ASSERT_TRUE(art.ok()) << art.error().str();
    auto rep = verify(r, *t, *art);
    ASSERT_TRUE(rep.ok()) << rep.error().str();
    EXPECT_FALSE(rep->verified);
    ASSERT_TRUE(rep->failure.has_value());
    EXPECT_NE(rep->failure->reason.find(m.expect), std::string::npos) << rep->failure->reason;
    std::cout << "isolated: " << rep->failure->reason << "\n";
  }
  // The parent's CUDA context is untouched: a correct kernel still runs in-process.
  ProblemShape dims;
  dims.output = {3, 5};
  const auto ops = make_operands(r, dims, 3, 1.0);
  ExecuteOptions eo;
  eo.reference_fallback = false;
  auto out = execute_on_target(*t, r, ops, eo);
  ASSERT_TRUE(out.ok()) << out.error().str();
  EXPECT_EQ(out->tag, "cuda_simt");
}

TEST(CudaLane, SpecialisedKernelsRefuseOtherDims) {
  REQUIRE_GPU(t);
  const Region r = region_of("fused { epilogue = [bias, relu]; }");
  EmitOptions o;
  o.spec = SpecPolicy::static_dims;
  o.dims = gemm(8, 16, 12);
  auto src = t->emit(r, o);
  ASSERT_TRUE(src.ok());
  auto art = t->compile(*src);
  ASSERT_TRUE(art.ok());
  auto rep = verify(r, *t, *art); // probes restricted to the static dims
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->verified) << rep->summary();
  auto out = t->run(*art, r, make_operands(r, gemm(9, 16, 12), 5, 0.5));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::shape_mismatch);
}

} // namespace
} // namespace fusor
