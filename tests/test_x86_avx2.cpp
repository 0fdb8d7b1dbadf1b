// The x86_avx2 lane: GEMM-rooted kinds on an AVX2 + FMA register tile for hosts without
// AVX-512. Its kernels hold no AVX-512 instruction (they build for Haswell), every GEMM kind
// and storage passes the oracle, and ragged shapes with K split into many blocks match the
// reference. On a host with AVX-512 the same kernels run too (AVX2 is a subset).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "fusor/operand_gen.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "fusor/toolchain.hpp"
#include "support/compare.hpp"
#include "support/x86_lanes.hpp"
#include "targets/x86/x86_simd_emitter.hpp"

namespace fusor {
namespace {

namespace fs = std::filesystem;
using testing::gemm;
using testing::region_of;
using testing::x86;

const Candidate* avx2_lane(RegionKind kind) { return testing::x86_candidate(kind, "x86_avx2"); }

#define REQUIRE_AVX2()                                                                                                 \
  if (!host_has_avx2_fma())                                                                                            \
  GTEST_SKIP() << "host lacks AVX2 + FMA: the lane declines (checked in "                                              \
                  "DeclinesWithReasons)"

// Every thread however small the shape (serial = 0), unless the test's knobs say otherwise.
void expect_matches_reference(const Region& region, const ProblemShape& dims, std::uint64_t seed, double scale,
                              std::map<std::string, std::string> knobs = {}) {
  const auto operands = make_operands(region, dims, seed, scale);
  auto ref = evaluate_reference(region, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  ExecuteOptions o;
  o.candidate = avx2_lane(region_kind(region));
  knobs.try_emplace("serial", "0");
  o.emit.options = std::move(knobs);
  o.reference_fallback = false;
  auto out = execute_on_target(x86(), region, operands, o);
  ASSERT_TRUE(out.ok()) << print_region(region) << ": " << out.error().str();
  EXPECT_EQ(out->tag, "x86_avx2");
  EXPECT_TRUE(out->verified);
  EXPECT_TRUE(testing::all_close(out->output, *ref, testing::storage_atol(region)))
      << print_region(region) << " at M=" << dims.M << " N=" << dims.N << " K=" << dims.K;
}

// K blocks of 16, 8-row blocks and 4-row tiles: partial sums merge through `out` (or `part`).
const std::map<std::string, std::string> kSmallBlocks = {{"kc", "16"}, {"mc", "8"}, {"mr", "4"}, {"serial", "0"}};
const std::int64_t kRagged[] = {1, 7, 17, 129};

TEST(X86Avx2, RegisteredForGemmKindsOnly) {
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::gated}) {
    const Candidate* c = avx2_lane(kind);
    ASSERT_NE(c, nullptr) << region_kind_name(kind);
    EXPECT_EQ(c->tier, 2);
    EXPECT_EQ(c->target, "x86");
  }
  for (auto kind : {RegionKind::attention, RegionKind::pointwise, RegionKind::pointwise_reduce, RegionKind::norm_chain})
    EXPECT_EQ(avx2_lane(kind), nullptr) << region_kind_name(kind) << ": x86_c serves it on an AVX2 host";
}

TEST(X86Avx2, DeclinesWithReasons) {
  const Candidate* c = avx2_lane(RegionKind::fused);
  ASSERT_NE(c, nullptr);
  const auto why = c->declines(region_of("fused { epilogue = [relu]; storage = fp8_e4m3 }"));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find(host_has_avx2_fma() ? "fp8" : "AVX2"), std::string::npos) << *why;
  EXPECT_EQ(c->declines(region_of("fused { epilogue = [relu] }")).has_value(), !host_has_avx2_fma());
  EXPECT_NE(x86::avx2_declines(region_of("attention { causal = true }")).value_or("").find("GEMM-rooted kinds only"),
            std::string::npos);
  // The emitter writes source for any host; its knobs are checked there.
  EmitOptions bad;
  for (const auto& [key, value] : std::map<std::string, std::string>{
           {"mr", "7"}, // 14 accumulators + 2 B + a broadcast: more than 16 ymm registers
           {"mr", "3"},
           {"nb", "64"},   // attention's
           {"exact", "1"}, // AMX's
           {"stream", "1"}}) {
    bad.options = {{key, value}};
    auto src = c->emit(region_of("fused { epilogue = [relu] }"), bad);
    ASSERT_FALSE(src.ok()) << key << "=" << value;
    EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
    EXPECT_NE(src.error().message.find("lane x86_avx2"), std::string::npos) << src.error().message;
  }
  auto att = x86::emit_avx2(region_of("attention { causal = true }"), {});
  ASSERT_FALSE(att.ok());
  EXPECT_NE(att.error().message.find("only GEMM-rooted kinds"), std::string::npos) << att.error().message;
}

// The lane's point is hosts without AVX-512: its kernels must hold no AVX-512 instruction.
// Each builds for Haswell (AVX2 + FMA, the oldest such core) with warnings as errors.
TEST(X86Avx2, KernelsBuildForHaswellWithoutAvx512) {
  const fs::path dir = fs::temp_directory_path() / ("fusor-avx2-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int built = 0;
  for (const char* text :
       {"fused { prologue = [silu]; epilogue = [bias, gelu]; residual = true }",
        "fused { epilogue = [bias, relu]; reduction = layer_norm; storage = bf16 }",
        "fused { epilogue = [bias, gelu_erf]; residual = true; storage = f16; b_layout = col_major }",
        "matmul { transpose_a = true }", "gated { gate_act = silu }", "gated { gate_act = gelu; storage = bf16 }"}) {
    const Region region = region_of(text);
    auto src = avx2_lane(region_kind(region))->emit(region, {});
    ASSERT_TRUE(src.ok()) << text << ": " << src.error().str();
    for (const char* avx512 : {"_mm512", "__m512", "__mmask"})
      EXPECT_EQ(src->source.find(avx512), std::string::npos) << text << " uses " << avx512;
    EXPECT_NE(src->source.find("_mm256_fmadd_ps"), std::string::npos) << text;
    std::ofstream(dir / "k.c") << src->source;
    const fs::path log = dir / "cc.txt";
    const std::string cmd = "cc -O2 -march=haswell -std=c11 -fopenmp -Wall -Wextra -Werror -Wno-unused -c '" +
                            (dir / "k.c").string() + "' -o /dev/null > '" + log.string() + "' 2>&1";
    std::stringstream out;
    const int rc = std::system(cmd.c_str());
    out << std::ifstream(log).rdbuf();
    EXPECT_EQ(rc, 0) << text << ":\n" << out.str();
    ++built;
  }
  fs::remove_all(dir);
  EXPECT_EQ(built, 6);
}

TEST(X86Avx2, OracleVerifiesEveryGemmKind) {
  REQUIRE_AVX2();
  const char* regions[] = {
      "fused { epilogue = [bias, gelu] }",
      "fused { prologue = [relu]; epilogue = [bias, gelu_erf, sigmoid]; residual = true; a_layout = col_major }",
      "fused { prologue = [gelu, tanh]; epilogue = [relu, bias, silu]; b_layout = col_major }",
      "fused { epilogue = [bias]; reduction = softmax }",
      "fused { epilogue = [bias]; reduction = rmsnorm }",
      "fused { epilogue = [bias, relu]; reduction = layer_norm; storage = bf16 }",
      "fused { epilogue = [bias, relu]; residual = true; storage = f16 }",
      "matmul { transpose_a = true; transpose_b = true }",
      "matmul { storage = bf16 }",
      "gated { gate_act = silu }",
      "gated { gate_act = gelu; storage = bf16 }",
  };
  for (const char* text : regions) testing::expect_verified_on("x86_avx2", region_of(text));
  for (const char* text : {"fused { epilogue = [bias, gelu]; residual = true }", "gated { gate_act = silu }",
                           "fused { epilogue = [bias]; reduction = softmax }"})
    testing::expect_verified_on("x86_avx2", region_of(text), kSmallBlocks);
}

TEST(X86Avx2, RaggedShapesAndKBlocks) {
  REQUIRE_AVX2();
  const Region region = region_of("fused { prologue = [relu]; epilogue = [bias, gelu]; residual = true }");
  for (auto m : kRagged)
    for (auto n : kRagged)
      for (auto k : kRagged) expect_matches_reference(region, gemm(m, n, k), 3, 0.5);
  for (auto m : kRagged) expect_matches_reference(region, gemm(m, 17, 129), 5, 0.5, kSmallBlocks);
  const Region col = region_of("fused { epilogue = [bias, silu]; a_layout = col_major; b_layout = col_major }");
  for (auto m : kRagged) expect_matches_reference(col, gemm(m, 129, 17), 4, 0.5);
  for (const char* storage : {"f32", "f16", "bf16"}) {
    const Region mm = region_of(std::string("matmul { storage = ") + storage + "; transpose_b = true }");
    expect_matches_reference(mm, gemm(17, 129, 7), 9, 0.4);
  }
  for (const char* act : {"silu", "gelu_erf", "relu"}) {
    const Region g = region_of(std::string("gated { gate_act = ") + act + " }");
    for (auto m : kRagged) expect_matches_reference(g, gemm(m, 17, 129), 11, 0.3);
  }
  expect_matches_reference(region_of("gated { gate_act = silu }"), gemm(129, 1000, 129), 12, 0.3, kSmallBlocks);
  const Region red = region_of("fused { epilogue = [bias]; reduction = rmsnorm }");
  expect_matches_reference(red, gemm(7, 4096, 17), 6, 0.5);
  expect_matches_reference(red, gemm(17, 1000, 129), 7, 0.5, kSmallBlocks);
}

} // namespace
} // namespace fusor
