// Mutation proof (issue: the oracle): plant real miscompiles in emitted x86 source and
// require the oracle to reject every one. Prints "mutants: N, killed: K".
#include <gtest/gtest.h>

#include <iostream>

#include "fusor/oracle.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "support/compare.hpp"

namespace fusor {
namespace {

struct Edit {
  std::string find, replace;
};

struct Mutant {
  std::string name;
  std::string region;
  std::vector<Edit> edits; // each `find` must occur in the emitted source
};

const std::vector<Mutant>& mutants() {
  static const std::vector<Mutant> list = {
      // ---- fused GEMM epilogues, prologues, residual, reductions, layouts, tiles
      {"gelu constant wrong", "fused { epilogue = [bias, gelu] }", {{"0.044715f", "0.04715f"}}},
      {"silu sign flipped",
       "fused { epilogue = [silu] }",
       {{"exp2f(-1.44269504088896341f * v)", "exp2f(1.44269504088896341f * v)"}}},
      {"tanh instead of sigmoid",
       "fused { epilogue = [sigmoid] }",
       {{"(1.0f / (1.0f + fusor_exp2f(-1.44269504088896341f * v)))", "fusor_tanhf(v)"}}},
      {"gelu_erf without the 1/sqrt2", "fused { epilogue = [gelu_erf] }", {{"v * 0.70710678118654752f", "v"}}},
      {"dropped bias", "fused { epilogue = [bias, relu] }", {{"v = (v + bv);", ""}}},
      {"bias off by one column",
       "fused { epilogue = [bias] }",
       {{"bias[j0 + j]", "bias[j0 + j + 1 < N ? j0 + j + 1 : 0]"}}},
      {"residual added twice",
       "fused { epilogue = [relu]; residual = true }",
       {{"v = (v + rv);", "v = (v + rv); v = (v + rv);"}}},
      {"residual from the wrong row",
       "fused { residual = true }",
       {{"res[(i0 + r) * N + j0 + j]", "res[i0 * N + j0 + j]"}}},
      {"relu drops NaN", "fused { prologue = [relu] }", {{"(v < 0.0f ? 0.0f : v)", "fmaxf(v, 0.0f)"}}},
      {"prologue skipped", "fused { prologue = [tanh] }", {{"v = fusor_tanhf(v);", ""}}},
      {"uninitialised accumulator", "fused { epilogue = [relu] }", {{"acc[r][j] = 0.0f;", ""}}},
      {"A row off by one", "fused { epilogue = [relu] }", {{"(i0 + r) * K + k]", "(i0 + r) * K + (k + 1) % K]"}}},
      {"K loop drops the last term",
       "fused { epilogue = [tanh] }",
       {{"for (int64_t k = 0; k < K; ++k) {", "for (int64_t k = 0; k < K - 1; ++k) {"}}},
      {"last column tile skipped", "fused { epilogue = [relu] }", {{"j0 < N; j0 +=", "j0 + 256 <= N; j0 +="}}},
      {"last row block skipped", "fused { epilogue = [relu] }", {{"i0 < M; i0 +=", "i0 < M - 3; i0 +="}}},
      {"col_major B with row stride",
       "fused { epilogue = [relu]; b_layout = col_major }",
       {{"B[n * K + k]", "B[(n * N + k) % (N * K)]"}}},
      {"col_major A read as row_major",
       "fused { epilogue = [relu]; a_layout = col_major }",
       {{"A[k * M + (i0 + r)]", "A[(i0 + r) * K + k]"}}},
      {"rmsnorm eps wrong", "fused { reduction = rmsnorm; eps = 1e-6 }", {{"(1e-06f)", "(0.1f)"}}},
      {"softmax without max-subtraction",
       "fused { reduction = softmax }",
       {{"c_ = -INFINITY;", "c_ = 0.0f;"}, {"c_ = row[j_] > c_ ? row[j_] : c_;", ";"}}},
      {"softmax sum halved",
       "fused { reduction = softmax }",
       {{"s_ += fusor_expf(d_);", "s_ += 0.5f * fusor_expf(d_);"}}},
      {"layer_norm without the mean", "fused { reduction = layer_norm }", {{"c_ /= (float)N;", "c_ = 0.0f;"}}},
      // ---- bare matmul and storage
      {"transpose_b ignored", "matmul { transpose_b = true }", {{"B[n * K + k]", "B[k * N + n]"}}},
      {"bf16 conversion drops a mantissa bit",
       "matmul { storage = bf16 }",
       {{"fusor_bits_to_float((uint32_t)h << 16)", "fusor_bits_to_float((uint32_t)(h & 0xfffeu) << 16)"}}},
      {"f16 exponent bias wrong", "matmul { storage = f16 }", {{"(exp + 112u) << 23", "(exp + 113u) << 23"}}},
      // ---- gated
      {"gate applied to the up projection",
       "gated { gate_act = silu }",
       {{"float u = acc2[r][j];", "float u = acc[r][j];"}}},
      {"gate activation missing", "gated { gate_act = gelu }", {{"v = (v / (1.0f", "v = (2.0f * v / (1.0f"}}},
      // ---- attention
      {"causal mask off", "attention { causal = true }", {{"(i + 1 < Nk ? i + 1 : Nk)", "Nk"}}},
      {"causal mask one key late",
       "attention { causal = true }",
       {{"(i + 1 < Nk ? i + 1 : Nk)", "(i + 2 < Nk ? i + 2 : Nk)"}}},
      {"causal mask one key early",
       "attention { causal = true }",
       {{"(i + 1 < Nk ? i + 1 : Nk)", "(i < Nk ? i : Nk)"}}},
      {"attention scale dropped", "attention { scale = 0.125 }", {{"sc[n] = scale * dot;", "sc[n] = dot;"}}},
      {"attention softmax not normalised", "attention { }", {{"o[c] = acc[c] * rf;", "o[c] = acc[c];"}}},
      {"attention without max-subtraction",
       "attention { }",
       {{"const float dd = sc[n] - mx;", "const float dd = sc[n];"}}},
      {"GQA head mapping wrong", "attention { }", {{"b * kv_heads + h / group", "b * kv_heads + h % kv_heads"}}},
      {"masked row not zeroed",
       "attention { causal = true }",
       {{"if (n_end <= 0) { for (int64_t c = 0; c < Dv; ++c) o[c] = 0.0f; continue; }", "if (n_end <= 0) continue;"},
        {"(i + 1 < Nk ? i + 1 : Nk)", "(i < Nk ? i : Nk)"}}},
      // ---- pointwise DAGs
      // The broadcast probe's y is [7] on a [5, 3, 7] x: i % 7 would be its right index there,
      // so the general loop's mutant reads a wrong in-bounds element instead.
      {"broadcast input read at the wrong index",
       "pointwise { inputs = [x, y]; t0 = mul(x, y); t1 = exp(t0); output = t1 }",
       {{"x1[mode1 == 0 ? i :", "x1[mode1 == 0 || 1 ? i % 5 :"}}},
      {"contiguous input read at the wrong index",
       "pointwise { inputs = [x, y]; t0 = mul(x, y); t1 = exp(t0); output = t1 }",
       {{"= x1[i];", "= x1[i / 2];"}}},
      {"maximum drops NaN",
       "pointwise { inputs = [x, y]; t0 = maximum(x, y); t1 = abs(t0); output = t1 }",
       {{"(((in0_ != in0_) || (in1_ != in1_)) ? (in0_ + in1_) : fusor_fmaxf(in0_, in1_))", "fusor_fmaxf(in0_, in1_)"}}},
      {"wrong constant",
       "pointwise { inputs = [x]; t0 = mul(x, 0.5); t1 = add(t0, 1); output = t1 }",
       {{"(0.5f)", "(0.25f)"}}},
      // ---- pointwise reduce
      {"amax drops NaN",
       "pointwise_reduce { inputs = [x]; t0 = abs(x); output = t0; reduce = amax }",
       {{"|| (v) != (v)", ""}}},
      {"mean divides by n-1",
       "pointwise_reduce { inputs = [x]; t0 = exp(x); output = t0; reduce = mean }",
       {{"(acc / (float)row_len)", "(acc / (float)(row_len > 1 ? row_len - 1 : 1))"}}},
      {"sum starts at one",
       "pointwise_reduce { inputs = [x]; t0 = neg(x); output = t0; reduce = sum }",
       {{"float acc = 0.0f;", "float acc = 1.0f;"}}},
      // ---- norm chains
      {"norm residual dropped", "norm_chain { norm = rmsnorm; add_residual = true }", {{"v = (v + rv);", ""}}},
      {"gamma ignored", "norm_chain { norm = layer_norm; weight = true }", {{"v = (v * g);", ""}}},
      {"beta subtracted", "norm_chain { norm = layer_norm; bias = true }", {{"v = (v + bb);", "v = (v - bb);"}}},
      {"norm eps wrong", "norm_chain { norm = rmsnorm }", {{"(1e-05f)", "(1e-01f)"}}},
      {"norm chain softmax overflow",
       "norm_chain { norm = softmax }",
       {{"c_ = -INFINITY;", "c_ = 0.0f;"}, {"c_ = o[j_] > c_ ? o[j_] : c_;", ";"}}},
  };
  return list;
}

TEST(Mutation, OracleRejectsEveryPlantedMiscompile) {
  testing::use_test_cache();
  const Target& x86 = *builtin_registry().target("x86");
  int killed = 0, total = 0;
  std::vector<std::string> survivors;
  for (const auto& m : mutants()) {
    SCOPED_TRACE(m.name);
    const Region region = parse_region(m.region).value();
    auto src = x86.emit(region, {});
    ASSERT_TRUE(src.ok()) << src.error().str();
    // The unmutated kernel passes: the mutant's failure is the mutation's doing.
    auto clean = x86.compile(*src);
    ASSERT_TRUE(clean.ok()) << clean.error().str();
    auto clean_report = verify(region, x86, *clean);
    ASSERT_TRUE(clean_report.ok()) << clean_report.error().str();
    ASSERT_TRUE(clean_report->verified) << m.region << "\n" << clean_report->summary();

    KernelSource mutated = *src;
    for (const auto& e : m.edits) {
      const auto at = mutated.source.find(e.find);
      ASSERT_NE(at, std::string::npos) << "stale mutant: '" << e.find << "' not in\n" << mutated.source;
      mutated.source.replace(at, e.find.size(), e.replace);
    }
    auto artifact = x86.compile(mutated);
    ASSERT_TRUE(artifact.ok()) << artifact.error().str();
    auto report = verify(region, x86, *artifact);
    ASSERT_TRUE(report.ok()) << report.error().str();
    ++total;
    if (!report->verified) {
      ++killed;
      std::cout << "  killed  " << m.name << ": " << report->failure->family << " probe, " << report->failure->reason
                << "\n";
    } else {
      survivors.push_back(m.name);
    }
  }
  std::cout << "mutants: " << total << ", killed: " << killed << std::endl;
  EXPECT_GE(total, 30);
  EXPECT_EQ(killed, total) << "survivors: " << ::testing::PrintToString(survivors);
}

} // namespace
} // namespace fusor
