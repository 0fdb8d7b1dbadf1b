// The x86_amx lane: GEMM-rooted kinds and attention on AMX bf16 tiles with exact f32
// products. Every kind and storage passes the oracle; ragged shapes and K split into many
// blocks match the reference; a single product keeps f32's accuracy (bf16x3 would not); NaN
// and infinities give what f32 gives (a zero part times an infinity must not make NaN);
// bf16 and f16 operands use fewer parts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fusor/operand_gen.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "fusor/toolchain.hpp"
#include "support/compare.hpp"
#include "support/x86_lanes.hpp"
#include "targets/x86/x86_simd_common.hpp"
#include "targets/x86/x86_simd_emitter.hpp"
#include "targets/x86/x86_target.hpp"

namespace fusor {
namespace {

using testing::attention_dims;
using testing::gemm;
using testing::region_of;
using testing::x86;

const Candidate* amx_lane(RegionKind kind) { return testing::x86_candidate(kind, "x86_amx"); }

#define REQUIRE_AMX()                                                                                                  \
  if (auto why = x86::amx_declines(region_of("matmul { storage = f32 }"))) {                                           \
    GTEST_SKIP() << "the x86_amx lane declines here: " << *why << " (FUSOR_AMX_EMULATE=1 emulates the tiles)";         \
  }

// Every thread however small the shape (serial = 0), unless the test's knobs say otherwise.
Expected<RunOutput> run_amx(const Region& region, const std::vector<Tensor>& operands,
                            std::map<std::string, std::string> knobs = {}) {
  ExecuteOptions o;
  o.candidate = amx_lane(region_kind(region));
  knobs.try_emplace("serial", "0");
  o.emit.options = std::move(knobs);
  o.reference_fallback = false;
  return execute_on_target(x86(), region, operands, o);
}

void expect_matches_reference(const Region& region, const std::vector<Tensor>& operands,
                              std::map<std::string, std::string> knobs = {}) {
  auto ref = evaluate_reference(region, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  auto out = run_amx(region, operands, std::move(knobs));
  ASSERT_TRUE(out.ok()) << print_region(region) << ": " << out.error().str();
  EXPECT_EQ(out->tag, "x86_amx");
  EXPECT_TRUE(testing::all_close(out->output, *ref, testing::storage_atol(region)))
      << print_region(region) << " at " << shape_str(operands[0].shape) << " x " << shape_str(operands[1].shape);
}

void expect_matches_reference(const Region& region, const ProblemShape& dims, std::uint64_t seed, double scale,
                              std::map<std::string, std::string> knobs = {}) {
  expect_matches_reference(region, make_operands(region, dims, seed, scale), std::move(knobs));
}

void expect_verified(const Region& region, std::map<std::string, std::string> knobs = {}) {
  testing::expect_verified_on("x86_amx", region, std::move(knobs));
}

// K blocks of 32 (several per probe), 32-row blocks: partial sums merge through `out`.
const std::map<std::string, std::string> kSmallBlocks = {{"kc", "32"}, {"mc", "32"}, {"serial", "0"}};
const std::int64_t kRagged[] = {1, 7, 33, 129};

TEST(X86Amx, RegisteredForGemmKindsAndAttention) {
  for (RegionKind kind : {RegionKind::fused, RegionKind::matmul, RegionKind::gated, RegionKind::attention}) {
    const Candidate* c = amx_lane(kind);
    ASSERT_NE(c, nullptr) << region_kind_name(kind);
    EXPECT_EQ(c->tier, 2);
  }
  EXPECT_EQ(amx_lane(RegionKind::norm_chain), nullptr);
  auto why = x86::amx_declines(region_of("norm_chain { norm = rmsnorm }"));
  ASSERT_TRUE(why.has_value());
  if (host_has_avx512()) {
    EXPECT_NE(why->find("GEMM-rooted kinds and attention"), std::string::npos) << *why;
  }
}

TEST(X86Amx, RejectsTheZmmTileKnobs) { // emission needs no AMX on the host
  const Region region = region_of("fused { epilogue = [bias] }");
  EmitOptions options;
  options.options = {{"mr", "12"}};
  auto src = amx_lane(RegionKind::fused)->emit(region, options);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
  EXPECT_NE(src.error().message.find("lane x86_amx"), std::string::npos) << src.error().message;
  EXPECT_NE(src.error().message.find("options: kc, mc, nb, serial, exact"), std::string::npos) << src.error().message;
}

// The lane's kernels compile with the host compiler wherever they are emitted, AMX or not (a
// host without AMX, like CI's, runs none of them, so this is where their C is checked there):
// every kind, 16-bit storage, causal attention's orders, the packs' and claims' knobs, P·V on
// zmm, the trace.
TEST(X86Amx, KernelsCompileOnAnyHost) {
  const std::pair<const char*, std::map<std::string, std::string>> kernels[] = {
      {"fused { epilogue = [bias, gelu]; residual = true }", {}},
      {"gated { gate_act = silu }", {}},
      {"matmul { storage = bf16 }", {}},
      {"attention { scale = 0.125 }", {}},
      {"attention { scale = 0.125 }", {{"xsteal", "3"}, {"trace", "1"}}},
      {"attention { scale = 0.125 }", {{"lpack", "0"}, {"kstream", "1"}}},
      {"attention { scale = 0.125; causal = true }", {{"byhead", "3"}}},
      {"attention { causal = true; storage = f16 }", {{"byhead", "0"}}},
      {"attention { scale = 0.125; causal = true }", {{"zpv", "2"}, {"trace", "1"}}},
      {"attention { scale = 0.125 }", {{"zpv", "1"}}},
      {"attention { scale = 0.125 }", {{"ppf", "0"}}},
  };
  for (const auto& [text, knobs] : kernels) {
    const Region region = region_of(text);
    EmitOptions options;
    options.options = knobs;
    auto src = amx_lane(region_kind(region))->emit(region, options);
    ASSERT_TRUE(src.ok()) << text << ": " << src.error().str();
    src->compile_flags.push_back("-march=sapphirerapids"); // (after -march=native: the tiles' ISA wherever it runs)
    auto artifact = x86::compile(*src);
    EXPECT_TRUE(artifact.ok()) << text << ": " << (artifact.ok() ? "" : artifact.error().str());
  }
}

TEST(X86Amx, OracleVerifiesEveryGemmKind) {
  REQUIRE_AMX();
  // The SIMD lanes' GEMM-rooted regions, and storages only the tiles split differently.
  const auto gemm_rooted = [](const Region& r) {
    return region_kind(r) != RegionKind::attention && amx_lane(region_kind(r)) != nullptr;
  };
  for (const char* text : testing::kEveryKindRegions)
    if (gemm_rooted(region_of(text))) expect_verified(region_of(text));
  for (const char* text : {"fused { prologue = [silu]; epilogue = [bias]; storage = bf16 }",
                           "matmul { storage = f16; transpose_b = true }"})
    expect_verified(region_of(text));
  for (const char* text : testing::kSmallBlockRegions)
    if (gemm_rooted(region_of(text))) expect_verified(region_of(text), kSmallBlocks);
}

TEST(X86Amx, RaggedShapesAndKBlocks) {
  REQUIRE_AMX();
  const Region region = region_of("fused { prologue = [relu]; epilogue = [bias, gelu]; residual = true }");
  for (auto m : kRagged)
    for (auto n : kRagged)
      for (auto k : kRagged) expect_matches_reference(region, gemm(m, n, k), 3, 0.5);
  // K = 129 in five blocks of 32 (the last padded), 32-row items.
  for (auto m : kRagged) expect_matches_reference(region, gemm(m, 33, 129), 5, 0.5, kSmallBlocks);
  const Region col = region_of("fused { epilogue = [bias, silu]; a_layout = col_major; b_layout = col_major }");
  for (auto m : kRagged) expect_matches_reference(col, gemm(m, 129, 17), 4, 0.5);
  for (const char* storage : {"f32", "f16", "bf16"})
    for (bool ta : {false, true}) {
      const Region mm =
          region_of(std::string("matmul { storage = ") + storage + "; transpose_a = " + (ta ? "true" : "false") +
                    "; transpose_b = " + (ta ? "false" : "true") + " }");
      expect_matches_reference(mm, gemm(17, 129, 7), 9, 0.4);
      expect_matches_reference(mm, gemm(64, 64, 64), 10, 0.4);
    }
  const Region silu = region_of("gated { gate_act = silu }");
  for (auto m : kRagged) expect_matches_reference(silu, gemm(m, 17, 129), 11, 0.3);
  expect_matches_reference(silu, gemm(129, 1000, 129), 12, 0.3, kSmallBlocks); // partial g|u sums
  expect_matches_reference(region_of("fused { epilogue = [bias]; reduction = layer_norm }"), gemm(33, 1000, 65), 6,
                           0.5);
}

// One product per output (K = 1) over random f32 values. bf16x6 drops part products below
// 2^-21 of the whole (three products, bf16x3, would leave 2^-14 and fail); exact=1 leaves
// only the final f32 rounding (2^-24), the small parts having summed first.
TEST(X86Amx, SingleProductsAccuracy) {
  REQUIRE_AMX();
  const Region region = region_of("matmul { storage = f32 }");
  const auto operands = make_operands(region, gemm(64, 64, 1), 21, 1.0);
  for (const char* exact : {"0", "1"}) {
    auto out = run_amx(region, operands, {{"exact", exact}});
    ASSERT_TRUE(out.ok()) << out.error().str();
    double worst = 0;
    for (std::int64_t i = 0; i < 64; ++i)
      for (std::int64_t j = 0; j < 64; ++j) {
        const double product = static_cast<double>(operands[0].data[i]) * operands[1].data[j];
        if (product == 0) continue;
        worst = std::max(worst, std::fabs(out->output.data[i * 64 + j] - product) / std::fabs(product));
      }
    const double bound = exact[0] == '1' ? std::ldexp(1.0, -24) * 1.01 : std::ldexp(1.0, -21) + std::ldexp(1.0, -24);
    EXPECT_LE(worst, bound) << "exact=" << exact;
    EXPECT_GT(worst, 0.0) << "exact=" << exact; // f32 rounding is there: the check can see errors
  }
}

// A row of A or a column of B holding an infinity or a NaN gives what f32 gives: inf * b is
// inf for b != 0 (a zero part of b must not turn it into NaN), inf * 0 and NaN * b are NaN.
TEST(X86Amx, NaNAndInfinitiesAsF32) {
  REQUIRE_AMX();
  for (const char* text :
       {"fused { epilogue = [bias]; residual = true }", "matmul { transpose_b = true }", "gated { gate_act = relu }"}) {
    const Region region = region_of(text);
    for (const auto& knobs : {std::map<std::string, std::string>{}, kSmallBlocks}) {
      auto operands = make_operands(region, gemm(40, 50, 70), 31, 0.5);
      Tensor& a = operands[0];
      Tensor& b = operands[1];
      a.data[3 * 70 + 5] = INFINITY;    // row 3
      a.data[20 * 70 + 69] = -INFINITY; // row 20, the last k (in the padded block)
      a.data[33 * 70 + 0] = NAN;        // row 33
      // Exact small values in B (zero middle and low parts), one zero, one infinity.
      for (auto& v : b.data) v = std::round(v * 8.0f) / 8.0f;
      b.data[5] = 0.0f;
      b.data[b.data.size() - 1] = INFINITY;
      if (operands.size() > 2 && region_kind(region) == RegionKind::gated) operands[2].data[7] = -INFINITY;
      expect_matches_reference(region, operands, knobs);
    }
  }
}

// GEMM packs B's next four panels between the tile products of the current ones (overlap=1,
// the default) or before them (overlap=0): the same bits either way, with several panel
// blocks per item and K block, ragged N, and special values in a later panel block (their
// columns are flagged by the overlapped packing).
TEST(X86Amx, GemmOverlapChangesOnlyTheOrder) {
  REQUIRE_AMX();
  for (const char* text : {"fused { epilogue = [bias, gelu]; residual = true }", "gated { gate_act = silu }"}) {
    const Region region = region_of(text);
    for (const auto& knobs : {std::map<std::string, std::string>{}, kSmallBlocks}) {
      auto operands = make_operands(region, gemm(45, 300, 70), 51, 0.5);
      operands[1].data[33 * 300 + 290] = INFINITY; // a column of the third panel block
      operands[1].data[60 * 300 + 170] = NAN;
      expect_matches_reference(region, operands, knobs);
      auto overlap_off = knobs;
      overlap_off["overlap"] = "0";
      auto a = run_amx(region, operands, knobs);
      auto b = run_amx(region, operands, overlap_off);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->output.data.size(), b->output.data.size());
      EXPECT_EQ(0, std::memcmp(a->output.data.data(), b->output.data.data(), a->output.data.size() * sizeof(float)))
          << text;
    }
  }
}

// The GEMM's items go to threads as they ask (dyn = 1, the default), in finer chunks of panels
// (isplit) or in a static split: each output's sums are one item's either way, so the outputs
// are the same bits, and match the reference, with many items (small row blocks) a thread.
TEST(X86Amx, GemmItemScheduleChangesOnlyWhoComputes) {
  REQUIRE_AMX();
  for (const char* text : {"fused { epilogue = [bias, gelu]; residual = true }", "gated { gate_act = silu }",
                           "fused { epilogue = [bias]; reduction = layer_norm }"}) {
    const Region region = region_of(text);
    std::map<std::string, std::string> knobs = kSmallBlocks;
    knobs["serial"] = "0";
    auto operands = make_operands(region, gemm(150, 700, 90), 57, 0.5);
    expect_matches_reference(region, operands, knobs);
    auto fixed = knobs, finer = knobs;
    fixed["dyn"] = "0";
    finer["isplit"] = "3"; // three chunks of panels a thread
    auto a = run_amx(region, operands, knobs);
    ASSERT_TRUE(a.ok()) << a.error().str();
    for (const auto& other : {fixed, finer}) {
      auto b = run_amx(region, operands, other);
      ASSERT_TRUE(b.ok()) << b.error().str();
      ASSERT_EQ(a->output.data.size(), b->output.data.size());
      EXPECT_EQ(0, std::memcmp(a->output.data.data(), b->output.data.data(), a->output.data.size() * sizeof(float)))
          << text;
    }
  }
}

TEST(X86Amx, AttentionOracleAndShapes) {
  REQUIRE_AMX();
  for (const char* text :
       {"attention { scale = 0.125; causal = true }", "attention { scale = 0.125; causal = false }",
        "attention { scale = 0.3; causal = false; q_transposed = true; k_transposed = true; storage = f16 }",
        "attention { scale = -0.5; causal = true; storage = bf16 }"})
    expect_verified(region_of(text));
  expect_verified(region_of("attention { causal = true }"), {{"nb", "32"}, {"serial", "0"}});
  for (bool causal : {false, true}) {
    const Region region =
        region_of(std::string("attention { scale = 0.2; causal = ") + (causal ? "true" : "false") + " }");
    for (std::int64_t d : {16, 17, 64, 128}) {
      expect_matches_reference(region, attention_dims(0, 1, 1, 17, 1100, d, d), 14, 1.0);
      expect_matches_reference(region, attention_dims(0, 1, 1, 129, 7, d, d), 15, 1.0);
      expect_matches_reference(region, attention_dims(0, 1, 1, 129, 129, d, d), 16, 1.0);
    }
    expect_matches_reference(region, attention_dims(2, 4, 2, 33, 65, 64, 64), 17, 1.0); // batch, heads, GQA
    expect_matches_reference(region, attention_dims(1, 6, 3, 9, 17, 24, 40), 18, 1.0);  // ragged D and Dv
    // Several key blocks (a causal diagonal inside a later one), Dv = 32 + 32 + 16.
    expect_matches_reference(region, attention_dims(0, 1, 1, 150, 300, 64, 80), 19, 1.0, {{"nb", "64"}});
  }
  const Region negative = region_of("attention { scale = -0.3; causal = false; q_transposed = true }");
  expect_matches_reference(negative, attention_dims(0, 2, 2, 29, 70, 48, 48), 21, 1.0);
}

// Decode steps (at most `fq` query rows per head) take the few-query path on zmm registers: a
// row per 32-row tile would waste the rest (testing::expect_few_query_rows says what it covers).
TEST(X86Amx, AttentionFewQueryRows) {
  EmitOptions options; // emission needs no AMX on the host
  auto src = amx_lane(RegionKind::attention)->emit(region_of("attention { scale = 0.125 }"), options);
  ASSERT_TRUE(src.ok()) << src.error().str();
  EXPECT_NE(src->source.find("if (M <= 8)"), std::string::npos);
  EXPECT_NE(src->source.find("typedef __m512 fusor_fq_v;"), std::string::npos);
  REQUIRE_AMX();
  testing::expect_few_query_rows("x86_amx");
  testing::expect_few_query_special_values("x86_amx");
}

// The tile work of a block step runs between the softmax chunks of the next (overlap=1, the
// default) or after them (overlap=0): only the order of independent work changes, so the
// outputs are the same bits. Shapes: one query block over several key blocks (P·V of a step
// adds into the rows the next step rescales), four query blocks, a causal diagonal inside a
// later key block, ragged D and Dv, and a V with a NaN (its heads keep the zmm P·V).
TEST(X86Amx, AttentionOverlapChangesOnlyTheOrder) {
  REQUIRE_AMX();
  for (bool causal : {false, true}) {
    const Region region =
        region_of(std::string("attention { scale = 0.2; causal = ") + (causal ? "true" : "false") + " }");
    std::vector<std::vector<Tensor>> cases{make_operands(region, attention_dims(0, 1, 1, 20, 300, 64, 64), 41, 1.0),
                                           make_operands(region, attention_dims(1, 2, 2, 150, 300, 64, 80), 42, 1.0),
                                           make_operands(region, attention_dims(0, 1, 1, 97, 97, 24, 40), 43, 1.0)};
    cases.push_back(make_operands(region, attention_dims(0, 1, 1, 70, 200, 32, 32), 44, 1.0));
    cases.back()[2].data[150 * 32 + 5] = NAN;
    for (const auto& operands : cases) {
      expect_matches_reference(region, operands, {{"nb", "64"}});
      auto a = run_amx(region, operands, {{"nb", "64"}});
      auto b = run_amx(region, operands, {{"nb", "64"}, {"overlap", "0"}});
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->output.data.size(), b->output.data.size());
      EXPECT_EQ(0, std::memcmp(a->output.data.data(), b->output.data.data(), a->output.data.size() * sizeof(float)))
          << print_region(region) << " at " << shape_str(operands[0].shape);
    }
  }
}

// testing::expect_causal_item_orders says what it covers. The lane's default is pairs of
// items sized for five a thread (byhead = 3, qitems = 5) on a process of 16 CPUs or more, else
// the largest blocks of every head first (0) sized for two; the emitted source shows which.
TEST(X86Amx, AttentionCausalItemOrders) {
  REQUIRE_AMX();
  testing::expect_causal_item_orders("x86_amx");
  for (const int cpus : {1, 2, 8, 15}) EXPECT_FALSE(x86::simd::causal_pairs(cpus)) << cpus;
  for (const int cpus : {16, 64}) EXPECT_TRUE(x86::simd::causal_pairs(cpus)) << cpus;
  const bool pairs = x86::simd::causal_pairs(host_affinity_cpus());
  const std::string source = testing::emitted_source("x86_amx", region_of("attention { causal = true }"), {});
  EXPECT_EQ(source.find("const int by_head = 0;") != std::string::npos, !pairs);
  EXPECT_EQ(source.find("(e == 0 ? nqb - 1 - pk : pk)") != std::string::npos, pairs);
  EXPECT_EQ(source.find(" / (5 * nthreads);") != std::string::npos, pairs);
  EXPECT_EQ(source.find(" / (2 * nthreads);") != std::string::npos, !pairs);
  // Pairs given as a knob take items sized for five a thread too, unless qitems says
  // otherwise; non-causal attention keeps two a thread.
  const Region causal = region_of("attention { causal = true }");
  EXPECT_NE(testing::emitted_source("x86_amx", causal, {{"byhead", "3"}}).find(" / (5 * nthreads);"),
            std::string::npos);
  EXPECT_NE(testing::emitted_source("x86_amx", causal, {{"byhead", "3"}, {"qitems", "2"}}).find(" / (2 * nthreads);"),
            std::string::npos);
  EXPECT_NE(testing::emitted_source("x86_amx", region_of("attention { }"), {}).find(" / (2 * nthreads);"),
            std::string::npos);
}

// testing::expect_attention_trace says what it covers.
TEST(X86Amx, AttentionTrace) {
  REQUIRE_AMX();
  testing::expect_attention_trace("x86_amx");
}

// testing::expect_query_block_claims says what it covers.
TEST(X86Amx, AttentionQueryBlockClaims) {
  REQUIRE_AMX();
  testing::expect_query_block_claims("x86_amx");
}

// The packs every thread reads (causal attention, 16-bit storage, non-causal f32 without
// ranges) keep plain stores by default (kstream = -1 on this lane: Tuning::kstream); kstream = 1
// streams K's and V's, and both match the reference (whole and ragged key panels, GQA).
TEST(X86Amx, AttentionSharedPacksStreamedOrNot) {
  REQUIRE_AMX();
  for (const char* text : {"attention { scale = 0.125; causal = true }", "attention { scale = 0.2; storage = bf16 }"}) {
    const Region region = region_of(text);
    const std::string plain = testing::emitted_source("x86_amx", region, {});
    EXPECT_NE(plain.find("FUSOR_NSB, 0);"), std::string::npos) << text;
    EXPECT_EQ(plain.find("FUSOR_NSB, 1);"), std::string::npos) << text;
    const std::map<std::string, std::string> knobs{{"kstream", "1"}};
    const std::string streamed = testing::emitted_source("x86_amx", region, knobs);
    EXPECT_NE(streamed.find("FUSOR_NSB, 1);"), std::string::npos) << text;
    EXPECT_NE(streamed.find("FUSOR_NSV, 1);"), std::string::npos) << text;
    for (const ProblemShape& dims : {attention_dims(2, 4, 2, 40, 100, 64), attention_dims(1, 3, 3, 64, 63, 37)})
      testing::expect_matches_reference_on("x86_amx", region, dims, 57, 0.5, knobs);
  }
}

// Attention with a NaN in head 2's V (of 4, 200 keys; key 17): that head's P·V runs on zmm and
// every other head's on the tiles; the output matches the reference and the NaN reaches head
// 2's rows that see key 17 (row 40, causal or not).
void expect_nan_v_head_on_zmm(const std::map<std::string, std::string>& knobs, std::uint64_t seed,
                              bool causal = false) {
  const Region plain = region_of(causal ? "attention { scale = 0.125; causal = true }" : "attention { scale = 0.125 }");
  auto operands = make_operands(plain, attention_dims(1, 4, 4, 96, 200, 64), seed, 1.0);
  operands[2].data[(2 * 200 + 17) * 64 + 5] = NAN;
  auto ref = evaluate_reference(plain, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  auto out = execute_on_target(testing::x86(), plain, operands,
                               testing::lane_options_on("x86_amx", RegionKind::attention, knobs));
  ASSERT_TRUE(out.ok()) << out.error().str();
  std::string label;
  for (const auto& [k, v] : knobs) label += k + "=" + v + " ";
  EXPECT_TRUE(testing::all_close(out->output, *ref, 2e-6, 0.0)) << label;
  EXPECT_TRUE(std::isnan(out->output.data[(2 * 96 + 40) * 64 + 5])) << label;
}

// f32 attention whose threads work from ranges (non-causal, and causal pairs) packs K and V
// where they are used: each thread packs its item's head into its own scratch when the head
// changes (lpack = 1, the default), instead of every head packed by all threads first (0).
// Both match the reference on shapes whose ranges change heads mid-range (GQA, ragged), on
// one thread and two, and with a NaN in V (that head's P·V on zmm, found by the thread's own
// V flags); the counter (claim = 0), causal items from the dynamic schedule and 16-bit
// storage keep the shared packs.
TEST(X86Amx, AttentionThreadLocalPacks) {
  REQUIRE_AMX();
  const Region plain = region_of("attention { scale = 0.125 }");
  const auto emitted = [&](const Region& region, std::map<std::string, std::string> knobs) {
    return testing::emitted_source("x86_amx", region, std::move(knobs));
  };
  EXPECT_NE(emitted(plain, {}).find("const int lpack = nr > 0;"), std::string::npos);
  EXPECT_NE(emitted(plain, {{"lpack", "0"}}).find("const int lpack = 0;"), std::string::npos);
  EXPECT_NE(emitted(plain, {{"claim", "0"}}).find("const int lpack = 0;"), std::string::npos);
  EXPECT_NE(emitted(region_of("attention { storage = bf16 }"), {}).find("const int lpack = 0;"), std::string::npos);
  // Causal: local packs for pairs claimed from ranges (byhead = 3), which never grow; the
  // dynamic schedule's items share the packs.
  const Region causal = region_of("attention { scale = 0.125; causal = true }");
  const std::string pairs = emitted(causal, {{"byhead", "3"}});
  EXPECT_NE(pairs.find("const int lpack = nr > 0;"), std::string::npos);
  EXPECT_EQ(pairs.find("++nsub, nsteps = nsub;"), std::string::npos);
  EXPECT_NE(emitted(causal, {{"byhead", "0"}}).find("const int lpack = 0;"), std::string::npos);
  EXPECT_NE(emitted(causal, {{"byhead", "3"}, {"lpack", "0"}}).find("const int lpack = 0;"), std::string::npos);
  // (qgrow = 0: the local packs with runs claimed whole; qgrow, the default, AttentionGrowingItems.)
  for (const char* lpack : {"0", "1"})
    for (const char* serial : {"0", "1073741824"}) {
      const std::map<std::string, std::string> knobs = {{"lpack", lpack}, {"qgrow", "0"}, {"serial", serial}};
      for (const ProblemShape& dims :
           {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 3, 1, 100, 333, 40, 72)}) {
        testing::expect_matches_reference_on("x86_amx", plain, dims, 71, 0.5, knobs);
        // (Pairs across heads and grouped heads, each thread packing the heads its pairs read.)
        testing::expect_matches_reference_on("x86_amx", causal, dims, 73, 0.5,
                                             {{"lpack", lpack}, {"byhead", "3"}, {"serial", serial}});
      }
      expect_nan_v_head_on_zmm(knobs, 72);
      expect_nan_v_head_on_zmm({{"lpack", lpack}, {"byhead", "3"}, {"serial", serial}}, 74, true);
    }
}

// xsteal (with thread-local packs): a thread out of its own range steals from its own head's
// ranges first and from another head's only while xsteal blocks are left there. Emitted only
// where the packs are local; every block is still computed, whatever the threshold (one that
// no range reaches: no steal across heads at all), on shapes whose ranges change heads.
TEST(X86Amx, AttentionStealsByHead) {
  REQUIRE_AMX();
  const Region plain = region_of("attention { scale = 0.125 }");
  const auto emitted = [&](std::map<std::string, std::string> knobs) {
    return testing::emitted_source("x86_amx", plain, std::move(knobs));
  };
  const std::string rule = "left = vkv == lhead || t >= team ? left + nall : left >= 3 ? left : 0;";
  EXPECT_NE(emitted({{"xsteal", "3"}}).find(rule), std::string::npos);
  EXPECT_EQ(emitted({}).find("vkv == lhead"), std::string::npos); // the default: xsteal = 0
  EXPECT_EQ(emitted({{"xsteal", "3"}, {"lpack", "0"}}).find("vkv == lhead"), std::string::npos);
  // (serial: one thread, whose range is the first of several: the others' blocks are all
  // across heads, and it alone computes them.)
  for (const char* xsteal : {"1", "3", "65536"})
    for (const char* serial : {"0", "1073741824"})
      for (const ProblemShape& dims :
           {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 6, 3, 333, 100, 40, 72)})
        testing::expect_matches_reference_on("x86_amx", plain, dims, 73, 0.5, {{"xsteal", xsteal}, {"serial", serial}});
}

// zpv: P·V on zmm between the tile products, always (1) or where a thread measured it cheaper
// (2: its first item on the tiles, its second on zmm, then the cheaper, so a call of two items
// a thread or more runs both). The outputs match the reference either way: causal or not,
// ragged blocks, parallel and serial; 16-bit storage keeps the tiles (its V is widened for zmm
// only where it is not all finite).
TEST(X86Amx, AttentionZmmPV) {
  const Region plain = region_of("attention { scale = 0.125 }");
  const auto emitted = [&](std::map<std::string, std::string> knobs) {
    return testing::emitted_source("x86_amx", plain, std::move(knobs));
  };
  const std::string pick = "zv = zcost[0] == 0.0 ? 0 : zcost[1] == 0.0 ? 1 : zcost[1] < zcost[0];";
  EXPECT_NE(emitted({{"zpv", "2"}}).find(pick), std::string::npos);
  EXPECT_NE(emitted({{"zpv", "1"}}).find("zv = 1;"), std::string::npos);
  EXPECT_EQ(emitted({}).find("zcost"), std::string::npos); // the default: zpv = 0
  EXPECT_EQ(
      testing::emitted_source("x86_amx", region_of("attention { storage = bf16 }"), {{"zpv", "1"}}).find("zv = 1;"),
      std::string::npos);
  REQUIRE_AMX();
  for (const char* text : {"attention { scale = 0.125 }", "attention { scale = 0.125; causal = true }",
                           "attention { causal = true; storage = bf16 }", "attention { storage = f16 }"})
    for (const ProblemShape& dims :
         {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 6, 3, 333, 100, 40, 72)}) {
      for (const char* serial : {"0", "1073741824"})
        testing::expect_matches_reference_on("x86_amx", region_of(text), dims, 73, 0.5,
                                             {{"zpv", "1"}, {"serial", serial}});
      for (int call = 0; call < 3; ++call) // (zpv = 2 picks from the calls before)
        testing::expect_matches_reference_on("x86_amx", region_of(text), dims, 74 + call, 0.5, {{"zpv", "2"}});
    }
}

// qgrow (the default): items that start as one query block and grow by their own range's next
// one compute every block once (thieves take the rest from the back; NaN in V keeps the zmm P·V).
TEST(X86Amx, AttentionGrowingItems) {
  const Region plain = region_of("attention { scale = 0.125 }");
  const std::string grown = testing::emitted_source("x86_amx", plain, {});
  EXPECT_NE(grown.find("if (Nk <= NB) qn = 1;"), std::string::npos);
  EXPECT_NE(grown.find("++nsub, nsteps = nsub;"), std::string::npos);
  const std::string whole = testing::emitted_source("x86_amx", plain, {{"qgrow", "0"}});
  EXPECT_EQ(whole.find("++nsub, nsteps = nsub;"), std::string::npos);
  EXPECT_EQ(whole.find("if (Nk <= NB) qn = 1;"), std::string::npos);
  REQUIRE_AMX();
  for (const char* qs : {"0", "2"})
    for (const char* serial : {"0", "1073741824"}) {
      const std::map<std::string, std::string> knobs = {{"qgrow", "1"}, {"qs", qs}, {"serial", serial}};
      for (const ProblemShape& dims : {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 3, 1, 100, 333, 40, 72),
                                       attention_dims(1, 8, 8, 600, 200, 64)})
        testing::expect_matches_reference_on("x86_amx", plain, dims, 78, 0.5, knobs);
      expect_nan_v_head_on_zmm(knobs, 79);
    }
}

// ppf: the K, V and query packs prefetch the source lines they read next (the next panel where
// it is whole, query rows below M; a ragged last chunk of features may reach past an operand's
// end, where a prefetch never faults): by default where the call's team has fewer than 16
// threads, always with ppf = 1, never (none emitted) with ppf = 0. They change no value: the
// outputs of ppf = 1 are bitwise those of ppf = 0, on shared and thread-local packs, ragged keys
// and features, grouped heads and 16-bit storage.
TEST(X86Amx, AttentionPacksPrefetch) {
  const Region plain = region_of("attention { scale = 0.125 }");
  const std::string on = testing::emitted_source("x86_amx", plain, {});
  EXPECT_NE(on.find("const int ppf = nthreads < 16;"), std::string::npos);
  EXPECT_NE(on.find("if (ppf && n0 + 64 <= Nk)"), std::string::npos);
  EXPECT_NE(on.find("if (ppf && kb + 32 < Nk) _mm_prefetch((const char*)(vh + (ka + 32) * Dv + c0 + h * 16)"),
            std::string::npos);
  EXPECT_NE(on.find("if (ppf && i + 4 < M) _mm_prefetch((const char*)(qh + (i + 4) * D + k0 + h * 16), _MM_HINT_T0);"),
            std::string::npos);
  EXPECT_NE(testing::emitted_source("x86_amx", plain, {{"ppf", "1"}}).find("const int ppf = 1;"), std::string::npos);
  const std::string off = testing::emitted_source("x86_amx", plain, {{"ppf", "0"}});
  for (const char* source : {"(kh + (n0 + 32", "(vh + (ka + 32)", "(qh + (i + 4)"})
    EXPECT_EQ(off.find(source), std::string::npos) << source;
  REQUIRE_AMX();
  for (const char* text : {"attention { scale = 0.125 }", "attention { scale = 0.2; causal = true }",
                           "attention { scale = 0.2; storage = bf16 }"})
    for (const char* lpack : {"0", "1"})
      for (const ProblemShape& dims : {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 3, 1, 100, 333, 40, 72),
                                       attention_dims(1, 2, 2, 70, 64, 128)}) {
        const Region region = region_of(text);
        const auto operands = make_operands(region, dims, 81, 0.5);
        auto with = run_amx(region, operands, {{"lpack", lpack}, {"ppf", "1"}});
        auto without = run_amx(region, operands, {{"lpack", lpack}, {"ppf", "0"}});
        ASSERT_TRUE(with.ok()) << text << ": " << with.error().str();
        ASSERT_TRUE(without.ok()) << text << ": " << without.error().str();
        EXPECT_TRUE(with->verified) << text;
        EXPECT_EQ(with->output.data, without->output.data) << text << " lpack=" << lpack << " Nk=" << dims.Nk;
      }
}

// Infinite queries and keys take the f32 recomputation of their scores; a NaN value of a key
// masked for earlier queries must reach only the queries that see it (a head whose V is not
// all finite keeps the zmm P·V, which never multiplies masked keys).
TEST(X86Amx, AttentionNaNAndInfinities) {
  REQUIRE_AMX();
  testing::expect_masked_values_never_leak("x86_amx");
  const Region plain = region_of("attention { scale = 0.25; causal = false }");
  auto operands = make_operands(plain, attention_dims(0, 1, 1, 40, 70, 16, 16), 34, 1.0);
  for (auto& v : operands[1].data) v = std::round(v * 4.0f) / 4.0f; // keys with zero lower parts
  operands[0].data[3 * 16 + 2] = -INFINITY; // query 3: -inf scores where k > 0, +inf where k < 0
  operands[1].data[5 * 16 + 7] = INFINITY;  // key 5
  operands[0].data[9 * 16 + 0] = NAN;       // query 9
  expect_matches_reference(plain, operands);
}

// Attention's parts follow the storage too: Q, K and V of bf16 storage are one part each
// (one product for the scores, three for P·V: the probabilities are any f32), of f16 two
// (four and five). The products stay exact, so 16-bit attention keeps f32's accuracy on its
// (exactly representable) inputs, far inside the storage's budget; so does a head whose V
// holds a NaN (its P·V on zmm).
TEST(X86Amx, AttentionHugeScores) {
  REQUIRE_AMX();
  testing::expect_attention_huge_scores("x86_amx");
}

TEST(X86Amx, AttentionPartsFollowStorage) {
  REQUIRE_AMX();
  struct Case {
    const char* storage;
    int qk, pv;
  };
  for (const Case c : {Case{"f32", 6, 6}, Case{"f16", 4, 5}, Case{"bf16", 1, 3}}) {
    const Region region =
        region_of(std::string("attention { scale = 0.2; causal = true; storage = ") + c.storage + " }");
    auto src = amx_lane(RegionKind::attention)->emit(region, {});
    ASSERT_TRUE(src.ok()) << c.storage;
    EXPECT_NE(src->source.find("#define FUSOR_NPROD_qk " + std::to_string(c.qk) + "\n"), std::string::npos)
        << c.storage;
    EXPECT_NE(src->source.find("#define FUSOR_NPROD_pv " + std::to_string(c.pv) + "\n"), std::string::npos)
        << c.storage;
    for (int nan_v = 0; nan_v < 3; ++nan_v) {
      const ProblemShape dims =
          nan_v == 1 ? attention_dims(0, 1, 1, 97, 97, 24, 40) : attention_dims(1, 2, 2, 150, 300, 64, 80);
      auto operands = make_operands(region, dims, 51, 1.0);
      // A NaN in V (the last case): that head keeps the zmm P·V, on V converted to f32.
      if (nan_v == 2) operands[2].data[120 * 80 + 7] = NAN;
      auto ref = evaluate_reference(region, operands);
      ASSERT_TRUE(ref.ok()) << ref.error().str();
      for (const char* overlap : {"0", "1"}) {
        auto out = run_amx(region, operands, {{"nb", "64"}, {"overlap", overlap}});
        ASSERT_TRUE(out.ok()) << out.error().str();
        EXPECT_TRUE(testing::all_close(out->output, *ref, 2e-6, 0.0))
            << c.storage << " at " << shape_str(operands[0].shape) << ", overlap=" << overlap;
        if (nan_v == 2) {
          EXPECT_TRUE(std::isnan(out->output.data[130 * 80 + 7])); // query 130 sees key 120
        }
      }
    }
  }
}

// Parts per operand: bf16 values are one bf16, f16 values two; a prologue makes any f32.
TEST(X86Amx, PartsFollowStorage) {
  REQUIRE_AMX();
  auto source = [](const std::string& text) {
    const Region region = region_of(text);
    auto src = amx_lane(region_kind(region))->emit(region, {});
    EXPECT_TRUE(src.ok()) << text;
    return src.ok() ? src->source : std::string();
  };
  const std::string f32 = source("matmul { storage = f32 }"), f16 = source("matmul { storage = f16 }"),
                    bf16 = source("matmul { storage = bf16 }"),
                    bf16_prologue = source("fused { prologue = [silu]; epilogue = [bias]; storage = bf16 }");
  EXPECT_NE(f32.find("#define FUSOR_NSA 3\n#define FUSOR_NSB 3"), std::string::npos);
  EXPECT_NE(f16.find("#define FUSOR_NSA 2\n#define FUSOR_NSB 2"), std::string::npos);
  EXPECT_NE(bf16.find("#define FUSOR_NSA 1\n#define FUSOR_NSB 1"), std::string::npos);
  EXPECT_NE(bf16_prologue.find("#define FUSOR_NSA 3\n#define FUSOR_NSB 1"), std::string::npos);
  // Six products for f32 (x6), all four for f16 (its 11 bits are 8 + 3), one for bf16: four
  // tile products each, in the micro-kernel's k step (fusor_amx_ukr).
  auto count = [](const std::string& s) {
    const size_t from = s.find("static void fusor_amx_ukr("), to = s.find("\n}\n", from);
    size_t n = 0;
    for (size_t at = s.find("_tile_dpbf16ps(", from); at < to; at = s.find("_tile_dpbf16ps(", at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(f32), 24u);
  EXPECT_EQ(count(f16), 16u);
  EXPECT_EQ(count(bf16), 4u);
  const Region mm = region_of("matmul { storage = f32 }");
  EmitOptions exact;
  exact.options = {{"exact", "1"}};
  auto all_nine = amx_lane(RegionKind::matmul)->emit(mm, exact);
  ASSERT_TRUE(all_nine.ok());
  EXPECT_EQ(count(all_nine->source), 36u);
  expect_verified(mm, {{"exact", "1"}});
}

} // namespace
} // namespace fusor
