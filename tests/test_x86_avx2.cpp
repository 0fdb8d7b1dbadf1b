// The x86_avx2 lane: every kind for hosts without AVX-512, GEMM-rooted kinds and attention on
// an AVX2 + FMA register tile. Its kernels hold no AVX-512 instruction (they build for
// Haswell), every kind and storage passes the oracle, ragged shapes, K split into many blocks
// and keys into many softmax steps match the reference, and streamed outputs give the plain
// stores' bits. On a host with AVX-512 the same kernels run too (AVX2 is a subset).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
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
#include "support/scoped_env.hpp"
#include "support/vector_math.hpp"
#include "support/x86_lanes.hpp"
#include "targets/x86/x86_simd_emitter.hpp"

namespace fusor {
namespace {

namespace fs = std::filesystem;
using testing::attention_dims;
using testing::elementwise;
using testing::gemm;
using testing::grid;
using testing::measure;
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
  testing::expect_matches_reference_on("x86_avx2", region, dims, seed, scale, std::move(knobs));
}

// K blocks of 16, 8-row blocks and 4-row tiles: partial sums merge through `out` (or `part`).
const std::map<std::string, std::string> kSmallBlocks = {{"kc", "16"}, {"mc", "8"}, {"mr", "4"}, {"serial", "0"}};
const std::int64_t kRagged[] = {1, 7, 17, 129};

// Threads out of items take panels of a late thread's last K block
// (testing::expect_late_thread_panels_taken).
TEST(X86Avx2, LateThreadsPanelsAreTaken) {
  REQUIRE_AVX2();
  testing::expect_late_thread_panels_taken("x86_avx2");
}

// f32 B [K, N]: a block's first A panel packs B as its tiles read it (bfuse=1;
// testing::expect_b_packed_by_first_tiles).
TEST(X86Avx2, GemmPacksBInItsFirstTiles) {
  REQUIRE_AVX2();
  testing::expect_b_packed_by_first_tiles("x86_avx2");
  testing::expect_verified_on("x86_avx2", region_of("fused { epilogue = [bias, gelu]; residual = true }"),
                              {{"bfuse", "1"}, {"kc", "16"}, {"mr", "4"}});
}

TEST(X86Avx2, RegisteredForEveryKind) {
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::gated, RegionKind::attention,
                    RegionKind::pointwise, RegionKind::pointwise_reduce, RegionKind::norm_chain}) {
    const Candidate* c = avx2_lane(kind);
    ASSERT_NE(c, nullptr) << region_kind_name(kind);
    EXPECT_EQ(c->tier, 2);
    EXPECT_EQ(c->target, "x86");
  }
}

TEST(X86Avx2, DeclinesWithReasons) {
  const Candidate* c = avx2_lane(RegionKind::fused);
  ASSERT_NE(c, nullptr);
  const auto why = c->declines(region_of("fused { epilogue = [relu]; storage = fp8_e4m3 }"));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find(host_has_avx2_fma() ? "fp8" : "AVX2"), std::string::npos) << *why;
  EXPECT_EQ(c->declines(region_of("fused { epilogue = [relu] }")).has_value(), !host_has_avx2_fma());
  // The emitter writes source for any host; its knobs are checked there.
  EmitOptions bad;
  const std::vector<std::pair<std::string, std::string>> rejected = {
      {"mr", "7"},     // 14 accumulators + 2 B + a broadcast: more than 16 ymm registers
      {"mr", "3"},     // below the knob's range
      {"nb", "48"},    // not a whole number of 32-key panels
      {"exact", "1"},  // AMX's
      {"stream", "3"}, // 0 plain, 1 streaming, 2 past the last-level cache
      {"fq", "65"},    // attention's few-query bound: 0..64
  };
  for (const auto& [key, value] : rejected) {
    bad.options = {{key, value}};
    auto src = c->emit(region_of("fused { epilogue = [relu] }"), bad);
    ASSERT_FALSE(src.ok()) << key << "=" << value;
    EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
    EXPECT_NE(src.error().message.find("lane x86_avx2"), std::string::npos) << src.error().message;
  }
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
        "matmul { transpose_a = true }", "gated { gate_act = silu }", "gated { gate_act = gelu; storage = bf16 }",
        "attention { scale = 0.125; causal = true }",
        "attention { scale = -0.3; causal = false; q_transposed = true; storage = f16 }",
        "attention { scale = 0.3; k_transposed = true; storage = f16 }",
        "attention { scale = 0.3; causal = true; storage = bf16 }",
        "norm_chain { norm = layer_norm; add_residual = true; weight = true; bias = true }",
        "norm_chain { norm = softmax; weight = true; bias = true }",
        "pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); u = gelu(t); output = u }",
        "pointwise_reduce { inputs = [x]; t0 = exp(x); output = t0; reduce = sum }"}) {
    const Region region = region_of(text);
    auto src = avx2_lane(region_kind(region))->emit(region, {});
    ASSERT_TRUE(src.ok()) << text << ": " << src.error().str();
    for (const char* avx512 : {"_mm512", "__m512", "__mmask"})
      EXPECT_EQ(src->source.find(avx512), std::string::npos) << text << " uses " << avx512;
    const RegionKind kind = region_kind(region);
    const bool tiled =
        kind != RegionKind::pointwise && kind != RegionKind::pointwise_reduce && kind != RegionKind::norm_chain;
    if (tiled) {
      EXPECT_NE(src->source.find("_mm256_fmadd_ps"), std::string::npos) << text;
    }
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
  EXPECT_EQ(built, 14);
}

// On a host with AVX-512, -march=native alone lets the compiler encode the lane's ymm code in
// EVEX (longer instructions, ymm16-31): the lane's compile flag (-mno-avx512f) keeps it out, under
// GCC and Clang alike. Built through the toolchain as fusor builds it, then disassembled.
TEST(X86Avx2, KernelsHoldNoEvexWithGccOrClang) {
  if (!host_has_avx512()) GTEST_SKIP() << "host lacks AVX-512: -march=native cannot encode EVEX here";
  const fs::path dir = fs::temp_directory_path() / ("fusor-avx2-evex-" + std::to_string(::getpid()));
  auto cache = DiskCache::open(dir / "cache");
  ASSERT_TRUE(cache.ok()) << cache.error().str();
  int checked = 0;
  for (const char* cc_name : {"gcc", "clang"}) {
    testing::ScopedEnv env("FUSOR_CC", cc_name);
    auto cc = detect_host_compiler();
    if (!cc.ok()) {
      std::printf("%s: not usable here (%s), skipped\n", cc_name, cc.error().message.c_str());
      continue;
    }
    for (const char* text : {"fused { epilogue = [bias, gelu]; residual = true }", "gated { gate_act = silu }",
                             "attention { scale = 0.125; causal = true }",
                             "pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); output = t }"}) {
      const Region region = region_of(text);
      auto src = avx2_lane(region_kind(region))->emit(region, {});
      ASSERT_TRUE(src.ok()) << src.error().str();
      EXPECT_EQ(src->compile_flags, std::vector<std::string>{"-mno-avx512f"}) << text;
      auto built = compile_shared_object(*src, *cc, *cache);
      ASSERT_TRUE(built.ok()) << cc_name << ", " << text << ": " << built.error().str();
      const fs::path listing = dir / "objdump.txt";
      const std::string cmd =
          "objdump -d --no-addresses '" + built->artifact.string() + "' > '" + listing.string() + "'";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      std::ifstream in(listing);
      int evex = 0, lines = 0;
      for (std::string line; std::getline(in, line); ++lines) {
        // An instruction's bytes follow a tab, its mnemonic a second one (a long instruction's
        // bytes continue on a line without it); in 64-bit code a leading 0x62 is EVEX.
        const auto tab = line.find('\t');
        const bool is_evex = tab != std::string::npos && line.compare(tab + 1, 3, "62 ") == 0 &&
                             line.find('\t', tab + 1) != std::string::npos;
        if (is_evex || line.find("%zmm") != std::string::npos) {
          if (evex++ < 3) ADD_FAILURE() << cc_name << ", " << text << ": " << line;
        }
      }
      EXPECT_GT(lines, 100) << cmd;
      EXPECT_EQ(evex, 0) << cc_name << ", " << text;
      ++checked;
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  EXPECT_GE(checked, 4) << "GCC at least";
}

TEST(X86Avx2, SkinnyPathSplitsKOrColumns) {
  REQUIRE_AVX2();
  testing::expect_skinny_splits("x86_avx2");
}

TEST(X86Avx2, OracleVerifiesEveryKind) {
  REQUIRE_AVX2();
  // The AVX-512 lane's list, and two the AVX2 lane's own paths add (bf16 attention, a norm
  // chain without residual).
  for (const char* text : testing::kEveryKindRegions) testing::expect_verified_on("x86_avx2", region_of(text));
  for (const char* text : {"attention { scale = 0.2; causal = false; storage = bf16 }",
                           "norm_chain { norm = softmax; add_residual = false }"})
    testing::expect_verified_on("x86_avx2", region_of(text));

  for (const char* text : testing::kSmallBlockRegions)
    testing::expect_verified_on("x86_avx2", region_of(text), kSmallBlocks);
  testing::expect_verified_on("x86_avx2", region_of("attention { causal = false }"), {{"nb", "32"}, {"mr", "4"}});
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
  // Sub-blocks off (sums restart at K blocks only) and of 7 steps (ragged in every K block).
  for (const char* ksub : {"0", "7"}) {
    expect_matches_reference(region, gemm(29, 300, 129), 16, 0.5, {{"ksub", ksub}, {"kc", "40"}});
    // Few rows, operands in place: the row path (zmm) or the skinny one, sub-blocks off or ragged.
    expect_matches_reference(region_of("fused { epilogue = [bias, gelu]; residual = true }"), gemm(5, 300, 129), 16,
                             0.5, {{"ksub", ksub}});
  }
  // B's packing with its prefetches off and 3 rows ahead (the last rows of every K block have none).
  for (const char* ahead : {"0", "3"}) expect_matches_reference(region, gemm(129, 300, 129), 14, 0.5, {{"bpf", ahead}});
  // The last K block's tiles with and without their output and residual prefetches.
  const Region res = region_of("fused { epilogue = [bias]; residual = true; storage = f16 }");
  for (const char* epf : {"0", "1"}) expect_matches_reference(res, gemm(45, 300, 129), 17, 0.5, {{"epf", epf}});
}

// Narrow GEMMs read A and B in place (x86_simd's NarrowGemmReadsOperandsInPlace): the ymm
// direct tiles of 6, 4, 2 and 1 rows; 2 to 15 rows through a B of 16 MiB or more take the row path.
TEST(X86Avx2, NarrowGemmReadsOperandsInPlace) {
  REQUIRE_AVX2();
  for (const char* text : testing::kInPlaceGemmRegions) {
    const Region region = region_of(text);
    auto src = avx2_lane(region_kind(region))->emit(region, {});
    ASSERT_TRUE(src.ok()) << text;
    EXPECT_NE(src->source.find("fusor_ukr_direct("), std::string::npos) << text;
    EXPECT_NE(src->source.find("if (M >= 2 && M < 16 && !direct && (double)K * N >= 4194304.0)"), std::string::npos)
        << text;
    for (const ProblemShape& dims : testing::kInPlaceShapes) expect_matches_reference(region, dims, 40, 0.5);
    expect_matches_reference(region, gemm(37, 100, 129), 41, 0.5, kSmallBlocks);
    testing::expect_verified_on("x86_avx2", region);
  }
  for (const char* text : testing::kPackedGemmRegions) {
    auto src = avx2_lane(region_kind(region_of(text)))->emit(region_of(text), {});
    ASSERT_TRUE(src.ok()) << text;
    EXPECT_EQ(src->source.find("fusor_ukr_direct("), std::string::npos) << text;
  }
}

// (Off by default on the ymm tile: crows = 0.)
TEST(X86Avx2, ColdBRowsPath) {
  REQUIRE_AVX2();
  testing::expect_cold_b_rows_path("x86_avx2");
}

TEST(X86Avx2, KBlocksSumFromZero) {
  REQUIRE_AVX2();
  testing::expect_k_blocks_sum_from_zero("x86_avx2");
}

// Attention: one or many online-softmax steps (nb), a causal diagonal inside a later key
// block, query blocks of 4..6 rows with ragged last ones, batch, heads and GQA, Dv not a
// multiple of the 32-column panel, transposed operands, 16-bit storage, negative and zero
// scales (the max of scale * s is scale times the scores' min when scale < 0).
TEST(X86Avx2, AttentionShapesAndKeyBlocks) {
  REQUIRE_AVX2();
  const std::map<std::string, std::string> knobs[] = {{}, {{"nb", "32"}}, {{"nb", "64"}, {"mr", "4"}}};
  for (bool causal : {false, true}) {
    const Region region =
        region_of(std::string("attention { scale = 0.2; causal = ") + (causal ? "true" : "false") + " }");
    for (const auto& k : knobs) {
      expect_matches_reference(region, attention_dims(0, 1, 1, 129, 300, 64), 30, 1.0, k);
      expect_matches_reference(region, attention_dims(2, 4, 2, 61, 77, 40), 31, 1.0, k); // GQA, Dv = 32 + 8
      expect_matches_reference(region, attention_dims(0, 1, 1, 50, 50, 80), 32, 1.0, k); // Dv = 32 + 32 + 16
    }
    expect_matches_reference(region, attention_dims(0, 1, 1, 17, 4096, 128), 14, 1.0);
    expect_matches_reference(region, attention_dims(1, 6, 3, 9, 17, 24), 18, 1.0);
  }
  const Region half = region_of("attention { scale = 0.3; causal = true; k_transposed = true; storage = f16 }");
  expect_matches_reference(half, attention_dims(0, 1, 1, 17, 129, 64), 19, 1.0);
  for (const char* text : {"attention { scale = -0.3; causal = false }", "attention { scale = -0.3; causal = true }",
                           "attention { scale = 0 }"})
    expect_matches_reference(region_of(text), attention_dims(0, 1, 1, 33, 100, 64), 20, 1.0);
  const Region q_transposed = region_of("attention { scale = 0.3; causal = true; q_transposed = true }");
  expect_matches_reference(q_transposed, attention_dims(0, 2, 2, 29, 70, 48), 21, 1.0);
  // D past the 8 x 8 transposes of K's panels (37 = 4 x 8 + 5), query blocks read in place
  // and the last one packed (M = 31 = 5 x 6 + 1), with and without the mr knob.
  for (const auto& k : knobs)
    for (bool causal : {false, true})
      expect_matches_reference(
          region_of(std::string("attention { scale = 0.2; causal = ") + (causal ? "true" : "false") + " }"),
          attention_dims(0, 2, 1, 31, 45, 37), 22, 1.0, k);
}

// The flash loop's softmax step (fusor_softmax_step): a NaN score never becomes a row's max
// (nor, with a negative scale, the min it takes), and the row is NaN through it; a row whose
// scores are thousands apart keeps only its largest scaled score's keys; every other row is
// untouched by both.
TEST(X86Avx2, AttentionSpecialScores) {
  REQUIRE_AVX2();
  for (const char* text : {"attention { scale = 0.125 }", "attention { scale = -0.125 }"}) {
    const Region region = region_of(text);
    const std::int64_t m = 20, nk = 90, d = 16;
    auto operands = make_operands(region, attention_dims(0, 1, 1, m, nk, d), 34, 1.0);
    operands[0].data[3 * d + 5] = NAN;
    for (std::int64_t c = 0; c < d; ++c) operands[0].data[7 * d + c] *= 1e4f;
    auto ref = evaluate_reference(region, operands);
    ASSERT_TRUE(ref.ok()) << ref.error().str();
    auto out = execute_on_target(x86(), region, operands, testing::lane_options_on("x86_avx2", RegionKind::attention));
    ASSERT_TRUE(out.ok()) << out.error().str();
    EXPECT_TRUE(testing::all_close(out->output, *ref)) << text;
    for (std::int64_t i = 0; i < m; ++i)
      EXPECT_EQ(std::isnan(out->output.data[i * d]), i == 3) << text << ", query " << i;
  }
}

// testing::expect_k_panels_streamed_or_not says what it covers.
TEST(X86Avx2, AttentionKPanelsStreamedOrNot) {
  REQUIRE_AVX2();
  testing::expect_k_panels_streamed_or_not("x86_avx2", "_mm256_stream_ps(dst");
}

// testing::expect_causal_item_orders says what it covers.
TEST(X86Avx2, AttentionCausalItemOrders) {
  REQUIRE_AVX2();
  testing::expect_causal_item_orders("x86_avx2");
}

// testing::expect_attention_trace says what it covers.
TEST(X86Avx2, AttentionTrace) {
  REQUIRE_AVX2();
  testing::expect_attention_trace("x86_avx2");
}

// testing::expect_query_block_claims says what it covers.
TEST(X86Avx2, AttentionQueryBlockClaims) {
  REQUIRE_AVX2();
  testing::expect_query_block_claims("x86_avx2");
}

// testing::expect_masked_values_never_leak says what it covers.
TEST(X86Avx2, AttentionMaskedValuesNeverLeak) {
  REQUIRE_AVX2();
  testing::expect_masked_values_never_leak("x86_avx2");
}

// Decode steps: the few-query path on ymm registers (testing::expect_few_query_rows says what
// it covers), partial vectors of 16-bit K and V through a zeroed copy.
TEST(X86Avx2, AttentionFewQueryRows) {
  REQUIRE_AVX2();
  testing::expect_few_query_rows("x86_avx2");
}

TEST(X86Avx2, AttentionFewQueryRowsSpecialValues) {
  REQUIRE_AVX2();
  testing::expect_few_query_special_values("x86_avx2");
}

TEST(X86Avx2, AttentionHugeScores) {
  REQUIRE_AVX2();
  testing::expect_attention_huge_scores("x86_avx2");
}

TEST(X86Avx2, SoftmaxRowsInBase2KeepExtremeRows) {
  REQUIRE_AVX2();
  testing::expect_softmax_row_extremes("x86_avx2");
}

// Norm chains, pointwise DAGs and reductions: outputs past the last-level cache are streamed
// from L1 chunks with ymm streaming stores; `stream=1` forces them on small shapes, which
// must give the plain stores' bits (rows off a cache line, ragged chunk tails; a re-read
// residual row's sum in four-vector steps, whole vectors and a masked tail).
TEST(X86Avx2, StreamingKindsAndStores) {
  REQUIRE_AVX2();
  std::vector<Region> regions;
  for (const char* norm : {"rmsnorm", "layer_norm", "softmax"})
    for (bool res : {false, true})
      regions.push_back(region_of(std::string("norm_chain { norm = ") + norm +
                                  "; add_residual = " + (res ? "true" : "false") + "; weight = true; bias = true }"));
  regions.push_back(region_of("pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); "
                              "h = mul(x, 0.5); out = add(t, h); output = out }"));
  regions.push_back(region_of("pointwise { inputs = [x, g]; a = abs(x); r = relu(g); out = add(a, r); output = out }"));
  for (const Region& region : regions) {
    EmitOptions forced;
    forced.options = {{"stream", "1"}};
    auto streamed = avx2_lane(region_kind(region))->emit(region, forced);
    ASSERT_TRUE(streamed.ok()) << streamed.error().str();
    EXPECT_NE(streamed->source.find("_mm256_stream_ps"), std::string::npos) << print_region(region);
    EXPECT_EQ(streamed->source.find("_mm512"), std::string::npos) << print_region(region);
    for (const Shape& shape : std::vector<Shape>{{33, 4099}, {5, 2500}, {4, 100}, {3, 16}, {1, 7}}) {
      const auto operands = make_operands(region, elementwise(shape), 38, 1.0);
      auto run = [&](const char* stream) {
        ExecuteOptions o;
        o.candidate = avx2_lane(region_kind(region));
        o.emit.options = {{"stream", stream}, {"serial", "0"}};
        o.reference_fallback = false;
        return execute_on_target(x86(), region, operands, o);
      };
      auto plain = run("0"), nt = run("1");
      ASSERT_TRUE(plain.ok() && nt.ok()) << print_region(region);
      EXPECT_EQ(nt->tag, "x86_avx2");
      EXPECT_TRUE(nt->verified);
      EXPECT_EQ(std::memcmp(plain->output.data.data(), nt->output.data.data(), 4 * plain->output.data.size()), 0)
          << print_region(region) << " " << shape_str(shape);
      expect_matches_reference(region, elementwise(shape), 38, 1.0, {{"stream", "1"}});
    }
    testing::expect_verified_on("x86_avx2", region, {{"stream", "1"}});
  }
  for (const char* reduce : {"sum", "mean", "amax", "amin"}) {
    const Region region =
        region_of(std::string("pointwise_reduce { inputs = [x]; t0 = tanh(x); output = t0; reduce = ") + reduce + " }");
    expect_matches_reference(region, elementwise({3, 5, 129}), 23, 1.0);
  }
}

// The 8-lane helpers (pointwise DAGs and softmax rows on this lane) keep the 16-lane ones'
// error bounds and special values: the same polynomials, 2^n through the exponent field
// instead of vscalefps.
TEST(X86Avx2, VectorExp8ErrorBoundsAndSpecialValues) {
  REQUIRE_AVX2();
  testing::expect_vector_exp(8);
}

TEST(X86Avx2, VectorExp2_8ErrorBoundsAndSpecialValues) {
  REQUIRE_AVX2();
  testing::expect_vector_exp2(8);
}

TEST(X86Avx2, VectorTanhErf8ErrorBoundsAndSpecialValues) {
  REQUIRE_AVX2();
  testing::expect_vector_tanh_erf(8);
}

TEST(X86Avx2, VectorMinMax8NaNRule) {
  REQUIRE_AVX2();
  testing::expect_vector_minmax_nan_rule(8);
}

// A DAG whose ops all have 8-lane spellings (gelu: fmaxf with a literal) runs four vectors a
// step (masked in whichever ends the output) and matches the reference, special values
// included.
TEST(X86Avx2, PointwiseVectorPath) {
  REQUIRE_AVX2();
  const Region region = region_of("pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); "
                                  "h = mul(x, 0.5); e = erf(h); m = gelu(e); out = add(t, m); output = out }");
  auto src = avx2_lane(RegionKind::pointwise)->emit(region, {});
  ASSERT_TRUE(src.ok()) << src.error().str();
  EXPECT_NE(src->source.find("i += 32"), std::string::npos);
  EXPECT_NE(src->source.find("fusor_tanhf8(t1_3)"), std::string::npos);
  EXPECT_NE(src->source.find("_mm256_maskstore_ps(out + i + 24, m3, v3)"), std::string::npos);
  for (const Shape& shape : std::vector<Shape>{{7, 129}, {3}, {2, 8}, {1, 52}, {1, 61}})
    expect_matches_reference(region, elementwise(shape), 36, 3.0);
  testing::expect_dag_specials_match_reference(region, avx2_lane(RegionKind::pointwise));
}

} // namespace
} // namespace fusor
