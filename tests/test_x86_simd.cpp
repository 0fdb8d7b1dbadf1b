// The x86_avx512 lane: every kind it emits passes the oracle, matches the reference on
// ragged shapes (K split into several blocks, tails of every tile), keeps the op table's
// NaN semantics, and its vector exp/tanh/erf stay within their documented error.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "codegen/c_renderer.hpp"
#include "fusor/operand_gen.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "fusor/toolchain.hpp"
#include "support/compare.hpp"
#include "support/vector_math.hpp"
#include "support/x86_lanes.hpp"
#include "targets/x86/x86_simd_common.hpp"
#include "targets/x86/x86_simd_emitter.hpp"

namespace fusor {
namespace {

using testing::attention_dims;
using testing::elementwise;
using testing::gemm;
using testing::grid;
using testing::measure;
using testing::region_of;
using testing::x86;

const Candidate* lane(RegionKind kind) { return testing::x86_candidate(kind, "x86_avx512"); }

#define REQUIRE_AVX512()                                                                                               \
  if (!host_has_avx512()) GTEST_SKIP() << "host lacks AVX-512: the lane declines (checked in DeclinesWithReasons)"

// Unless a test says otherwise, kernels run on every thread however small the shape (the
// default `serial` threshold would keep the tests' small shapes on one thread, and the row
// and panel splits untested); the oracle runs (expect_verified) keep the default.
ExecuteOptions lane_options(RegionKind kind, std::map<std::string, std::string> knobs = {}) {
  return testing::lane_options_on("x86_avx512", kind, std::move(knobs));
}

void expect_matches_reference(const Region& region, const ProblemShape& dims, std::uint64_t seed, double scale,
                              std::map<std::string, std::string> knobs = {}) {
  testing::expect_matches_reference_on("x86_avx512", region, dims, seed, scale, std::move(knobs));
}

// The oracle's verdict on the lane's own artifact, with tuning knobs that force every tail
// and K split.
void expect_verified(const Region& region, std::map<std::string, std::string> knobs = {}) {
  testing::expect_verified_on("x86_avx512", region, std::move(knobs));
}

const std::int64_t kRagged[] = {1, 7, 17, 129};
// serial = 0: the oracle's small shapes run on every thread too.
const std::map<std::string, std::string> kSmallBlocks = {{"kc", "16"}, {"mc", "8"}, {"mr", "6"}, {"serial", "0"}};

TEST(X86Simd, RegisteredAsTier2WithOwnEmitter) {
  for (auto kind : {RegionKind::fused, RegionKind::matmul, RegionKind::attention, RegionKind::gated,
                    RegionKind::pointwise, RegionKind::pointwise_reduce, RegionKind::norm_chain}) {
    const Candidate* c = lane(kind);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->tier, 2);
    EXPECT_EQ(c->target, "x86");
    EXPECT_TRUE(static_cast<bool>(c->emit));
  }
}

TEST(X86Simd, DeclinesWithReasons) {
  const Candidate* c = lane(RegionKind::fused);
  ASSERT_NE(c, nullptr);
  const auto why = c->declines(region_of("fused { epilogue = [relu]; storage = fp8_e4m3 }"));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find(host_has_avx512() ? "fp8" : "AVX-512"), std::string::npos) << *why;
  EXPECT_EQ(c->declines(region_of("fused { epilogue = [relu] }")).has_value(), !host_has_avx512());
  // A run forced onto the lane is refused with the reason before anything is emitted.
  const Region fp8 = region_of("fused { epilogue = [relu]; storage = fp8_e4m3 }");
  auto forced =
      execute_on_target(x86(), fp8, make_operands(fp8, gemm(4, 4, 4), 1, 1.0), lane_options(RegionKind::fused));
  ASSERT_FALSE(forced.ok());
  EXPECT_EQ(forced.error().code, ErrorCode::emit_unsupported);
  EXPECT_NE(forced.error().message.find("lane x86_avx512: " + *why), std::string::npos) << forced.error().message;
  // The emitter alone writes source for any host (`fusor emit` for another machine); its
  // knobs are checked there.
  EXPECT_TRUE(c->emit(region_of("fused { epilogue = [relu] }"), {}).ok());
  EmitOptions bad;
  bad.options = {{"tile", "9"}};
  auto src = c->emit(region_of("fused { epilogue = [relu] }"), bad);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.error().code, ErrorCode::emit_unsupported);
  bad.options = {{"mr", "15"}}; // 30 accumulators + 2 B registers would spill
  EXPECT_FALSE(c->emit(region_of("fused { epilogue = [relu] }"), bad).ok());
  // Attention's key block must be a whole number of 32-key panels, within range.
  for (const char* nb : {"48", "16", "8192", "x"}) {
    bad.options = {{"nb", nb}};
    auto a = lane(RegionKind::attention)->emit(region_of("attention { causal = true }"), bad);
    ASSERT_FALSE(a.ok()) << nb;
    EXPECT_EQ(a.error().code, ErrorCode::emit_unsupported);
  }
}

// Kernels below the `serial` work threshold skip the thread pool (an OpenMP `if` clause in
// the emitted source); the result is the same either way.
TEST(X86Simd, SerialThresholdIsAKnob) {
  REQUIRE_AVX512();
  const Region region = region_of("norm_chain { norm = layer_norm; weight = true; bias = true }");
  const Candidate* c = lane(RegionKind::norm_chain);
  auto dflt = c->emit(region, {});
  ASSERT_TRUE(dflt.ok()) << dflt.error().str();
  EXPECT_NE(dflt->source.find("#define FUSOR_SERIAL_BELOW 65536.0"), std::string::npos);
  EXPECT_NE(dflt->source.find("if (parallel: (double)(rows * row_len * 16) >= FUSOR_SERIAL_BELOW)"), std::string::npos);
  EmitOptions bad;
  bad.options = {{"serial", "-1"}};
  EXPECT_FALSE(c->emit(region, bad).ok());
  ProblemShape rows;
  rows.rows = 64, rows.row_len = 64, rows.output = {64, 64};
  for (const char* serial : {"0", "1073741824"}) expect_matches_reference(region, rows, 11, 1.0, {{"serial", serial}});
  const Region gemm_region = region_of("fused { epilogue = [bias, gelu_erf] }");
  for (const char* serial : {"0", "1073741824"})
    expect_matches_reference(gemm_region, gemm(64, 64, 64), 12, 1.0, {{"serial", serial}});
}

TEST(X86Simd, OracleVerifiesEveryKind) {
  REQUIRE_AVX512();

  for (const char* text : testing::kEveryKindRegions) expect_verified(region_of(text));
  // Small blocks: several K blocks, many row blocks, a 6-row tile (merges of partial sums).
  for (const char* text : testing::kSmallBlockRegions) expect_verified(region_of(text), kSmallBlocks);
}

TEST(X86Simd, FusedRaggedShapes) {
  REQUIRE_AVX512();
  const Region region = region_of("fused { prologue = [relu]; epilogue = [bias, gelu]; residual = true }");
  for (auto m : kRagged)
    for (auto n : kRagged)
      for (auto k : kRagged) expect_matches_reference(region, gemm(m, n, k), 3, 0.5);
  const Region col = region_of("fused { epilogue = [bias, silu]; a_layout = col_major; b_layout = col_major }");
  for (auto m : kRagged) expect_matches_reference(col, gemm(m, 129, 17), 4, 0.5);
  // K split into 9 blocks, an 8-row block per thread item and 6-row tiles.
  for (auto m : kRagged) expect_matches_reference(region, gemm(m, 17, 129), 5, 0.5, kSmallBlocks);
  // Wide rows with a reduction, and a wide N.
  for (const char* red : {"softmax", "rmsnorm", "layer_norm"}) {
    const Region r = region_of(std::string("fused { epilogue = [bias]; reduction = ") + red + " }");
    expect_matches_reference(r, gemm(7, 4096, 17), 6, 0.5);
    expect_matches_reference(r, gemm(17, 1000, 129), 7, 0.5, kSmallBlocks);
  }
  expect_matches_reference(region_of("fused { epilogue = [bias, gelu] }"), gemm(129, 4096, 129), 8, 0.3);
  // Sub-blocks off (sums restart at K blocks only) and of 7 steps (ragged in every K block).
  for (const char* ksub : {"0", "7"}) {
    expect_matches_reference(region, gemm(29, 300, 129), 16, 0.5, {{"ksub", ksub}, {"kc", "40"}});
    // Few rows, operands in place: the row path (zmm) or the skinny one, sub-blocks off or ragged.
    expect_matches_reference(region_of("fused { epilogue = [bias, gelu]; residual = true }"), gemm(5, 300, 129), 16,
                             0.5, {{"ksub", ksub}});
  }
  // B's packing with its prefetches off and 3 rows ahead (the last rows of every K block have none).
  for (const char* ahead : {"0", "3"}) {
    expect_matches_reference(region, gemm(129, 300, 129), 14, 0.5, {{"bpf", ahead}, {"kc", "40"}});
    expect_matches_reference(region_of("gated { gate_act = silu; storage = bf16 }"), gemm(30, 300, 50), 15, 0.3,
                             {{"bpf", ahead}});
  }
  // The last K block's tiles prefetch the output and residual rows they will touch (epf=1),
  // or not; a 16-bit residual's rows are half as long. Results the same either way.
  for (const char* storage : {"f32", "bf16"}) {
    const Region res =
        region_of(std::string("fused { epilogue = [bias, gelu]; residual = true; storage = ") + storage + " }");
    for (const char* epf : {"0", "1"}) {
      EmitOptions o;
      o.options = {{"epf", epf}};
      auto src = lane(RegionKind::fused)->emit(res, o);
      ASSERT_TRUE(src.ok()) << src.error().str();
      EXPECT_EQ(src->source.find("_mm_prefetch((const char*)(res + (r0 + r) * N + c0), _MM_HINT_T0)") !=
                    std::string::npos,
                epf[0] == '1');
      expect_matches_reference(res, gemm(45, 300, 129), 17, 0.5, {{"epf", epf}, {"kc", "40"}});
    }
  }
}

// f32 B [K, N]: a block's first A panel packs B as its tiles read it (bfuse=1;
// testing::expect_b_packed_by_first_tiles).
TEST(X86Simd, GemmPacksBInItsFirstTiles) {
  REQUIRE_AVX512();
  testing::expect_b_packed_by_first_tiles("x86_avx512");
  expect_verified(region_of("fused { epilogue = [bias, gelu]; residual = true }"),
                  {{"bfuse", "1"}, {"kc", "16"}, {"mr", "6"}});
}

TEST(X86Simd, MatmulAndGatedRagged) {
  REQUIRE_AVX512();
  for (const char* storage : {"f32", "f16", "bf16"})
    for (bool ta : {false, true}) {
      const Region region =
          region_of(std::string("matmul { storage = ") + storage + "; transpose_a = " + (ta ? "true" : "false") +
                    "; transpose_b = " + (ta ? "false" : "true") + " }");
      expect_matches_reference(region, gemm(17, 129, 7), 9, 0.4);
      expect_matches_reference(region, gemm(16, 16, 16), 10, 0.4);
    }
  for (const char* act : {"silu", "gelu", "gelu_erf", "relu", "sigmoid", "tanh"}) {
    const Region region = region_of(std::string("gated { gate_act = ") + act + " }");
    for (auto m : kRagged) expect_matches_reference(region, gemm(m, 17, 129), 11, 0.3);
  }
  const Region silu = region_of("gated { gate_act = silu }");
  expect_matches_reference(silu, gemm(129, 1000, 129), 12, 0.3, kSmallBlocks); // K split: partial g|u sums
  expect_matches_reference(silu, gemm(7, 4096, 17), 13, 0.3);
}

// Narrow GEMMs (N <= 256, f32, row-major, no prologue) read A and B in place, with edge
// panels as smaller tiles and rows split in blocks of 4, and fewer than 8 rows stream B
// unpacked (2 to 13 rows through the row path's register block, more where B or each thread's
// share of it is large); the other GEMMs keep packing.
TEST(X86Simd, NarrowGemmReadsOperandsInPlace) {
  REQUIRE_AVX512();
  const auto source = [](const char* text) {
    const Region region = region_of(text);
    auto src = lane(region_kind(region))->emit(region, {});
    EXPECT_TRUE(src.ok()) << text;
    return src.ok() ? src->source : std::string();
  };
  for (const char* text : testing::kInPlaceGemmRegions) {
    EXPECT_NE(source(text).find("fusor_ukr_direct("), std::string::npos) << text;
    EXPECT_NE(source(text).find("if (M < 8 && !direct)"), std::string::npos) << text;
    // 2 to 13 rows; 14 to 24 where B is larger than the host's last-level cache; 14 to 32 where
    // each thread has 1024 columns or more.
    const std::string llc = std::to_string(host_llc_share_bytes()) + ".0";
    const std::string wide = " || (M < 33 && N >= (int64_t)1024 * wnt)";
    EXPECT_NE(source(text).find(host_llc_share_bytes() > 0
                                    ? "if (M >= 2 && (M < 14 || (M < 25 && 4.0 * (double)K * N > " + llc + ")" + wide +
                                          ") && !direct)"
                                    : "if (M >= 2 && (M < 14" + wide + ") && !direct)"),
              std::string::npos)
        << text;
    for (const ProblemShape& dims : testing::kInPlaceShapes) expect_matches_reference(region_of(text), dims, 40, 0.5);
    // K in blocks of 16, 6-row tiles (edge pieces 4, 2, 1).
    expect_matches_reference(region_of(text), gemm(37, 100, 129), 41, 0.5, kSmallBlocks);
    expect_verified(region_of(text));
  }
  for (const char* text : testing::kPackedGemmRegions)
    EXPECT_EQ(source(text).find("fusor_ukr_direct("), std::string::npos) << text;
}

// Threads out of items take panels of a late thread's last K block
// (testing::expect_late_thread_panels_taken).
TEST(X86Simd, ColdBRowsPath) {
  REQUIRE_AVX512();
  testing::expect_cold_b_rows_path("x86_avx512");
}

// Up to 32 rows take the row path where each thread has wcols columns or more (Tuning::wrows).
TEST(X86Simd, WideBRowsPath) {
  REQUIRE_AVX512();
  testing::expect_wide_b_rows_path("x86_avx512");
}

TEST(X86Simd, SkinnyPathSplitsKOrColumns) {
  REQUIRE_AVX512();
  testing::expect_skinny_splits("x86_avx512");
}

TEST(X86Simd, LateThreadsPanelsAreTaken) {
  REQUIRE_AVX512();
  testing::expect_late_thread_panels_taken("x86_avx512");
}

TEST(X86Simd, KBlocksSumFromZero) {
  REQUIRE_AVX512();
  testing::expect_k_blocks_sum_from_zero("x86_avx512");
}

// The GEMM epilogue runs 16 lanes at a time when every op of the chain renders over __m512
// (16-bit bias and residual widened as they load); selects (relu) keep the
// compiler-vectorised float loop. Either way the oracle passes the kernel.
TEST(X86Simd, GemmEpilogueVectorPathAndFallback) {
  REQUIRE_AVX512();
  const auto& v16 = codegen::c99_avx512_dialect();
  for (Op op : {Op::bias, Op::gelu, Op::silu, Op::sigmoid, Op::add, Op::mul, Op::div, Op::neg, Op::exp, Op::tanh,
                Op::gelu_erf, Op::erf})
    EXPECT_TRUE(codegen::renders_in(v16, op)) << op_info(op).name;
  for (Op op : {Op::relu, Op::maximum, Op::sign, Op::log, Op::abs})
    EXPECT_FALSE(codegen::renders_in(v16, op)) << op_info(op).name;
  EXPECT_TRUE(codegen::renders_in(codegen::c99_simd_dialect(), Op::relu));
  const std::string vector_store = "_mm512_mask_storeu_ps(o + j, m, v)";
  auto source = [&](const std::string& text) {
    const Region region = region_of(text);
    auto src = lane(region_kind(region))->emit(region, {});
    EXPECT_TRUE(src.ok()) << text;
    expect_verified(region);
    return src.ok() ? src->source : std::string();
  };
  EXPECT_NE(source("fused { epilogue = [bias, gelu]; residual = true }").find(vector_store), std::string::npos);
  EXPECT_NE(source("gated { gate_act = silu }").find(vector_store), std::string::npos);
  EXPECT_NE(source("fused { epilogue = [bias, gelu_erf] }").find(vector_store), std::string::npos);
  EXPECT_NE(source("fused { epilogue = [tanh]; residual = true }").find(vector_store), std::string::npos);
  EXPECT_EQ(source("fused { epilogue = [bias, relu] }").find(vector_store), std::string::npos);
  for (const char* storage : {"f16", "bf16"}) {
    const std::string text =
        std::string("fused { epilogue = [bias, gelu]; residual = true; storage = ") + storage + " }";
    EXPECT_NE(source(text).find(vector_store), std::string::npos) << storage;
    expect_matches_reference(region_of(text), gemm(33, 40, 70), 16, 1.0); // ragged columns: masked widening loads
  }
  // A is packed 16 k at a time through a register transpose when f32, row-major and the
  // prologue renders over __m512 (whole 14-row panels; tails and partial panels scalar).
  const std::string silu_prologue = "fused { prologue = [silu]; epilogue = [bias] }";
  EXPECT_NE(source(silu_prologue).find("fusor_transpose16(t_)"), std::string::npos);
  EXPECT_EQ(
      source("fused { prologue = [relu]; epilogue = [bias]; a_layout = col_major }").find("fusor_transpose16(t_)"),
      std::string::npos);
  for (auto k : {16, 70}) expect_matches_reference(region_of(silu_prologue), gemm(33, 40, k), 15, 0.5);
  // Sums of large magnitude: GELU is x itself above and ~0 below (the exponent is held
  // above -80, where a subnormal e^x would cost a microcode assist per vector).
  expect_matches_reference(region_of("fused { epilogue = [bias, gelu] }"), gemm(33, 70, 40), 14, 20.0);
}

TEST(X86Simd, AttentionCausalAndNot) {
  REQUIRE_AVX512();
  for (bool causal : {false, true}) {
    const Region region =
        region_of(std::string("attention { scale = 0.125; causal = ") + (causal ? "true" : "false") + " }");
    for (std::int64_t d : {16, 64, 128}) {
      expect_matches_reference(region, attention_dims(0, 1, 1, 17, 4096, d), 14, 1.0);
      expect_matches_reference(region, attention_dims(0, 1, 1, 129, 7, d), 15, 1.0);
      expect_matches_reference(region, attention_dims(0, 1, 1, 129, 129, d), 16, 1.0);
    }
    expect_matches_reference(region, attention_dims(2, 4, 2, 33, 65, 64), 17, 1.0); // batch, heads, GQA
    expect_matches_reference(region, attention_dims(1, 6, 3, 9, 17, 24), 18, 1.0);  // ragged Dv
  }
  const Region half = region_of("attention { scale = 0.3; causal = true; k_transposed = true; storage = f16 }");
  expect_matches_reference(half, attention_dims(0, 1, 1, 17, 129, 64), 19, 1.0);
  // A positive scale takes the max over the raw scores; a negative one keeps a scaled copy.
  const Region negative = region_of("attention { scale = -0.3; causal = false }");
  expect_matches_reference(negative, attention_dims(0, 1, 1, 33, 100, 64), 20, 1.0);
  const Region q_transposed = region_of("attention { scale = 0.3; causal = true; q_transposed = true }");
  expect_matches_reference(q_transposed, attention_dims(0, 2, 2, 29, 70, 48), 21, 1.0);
}

// Key blocks smaller than the keys (several online-softmax steps, a causal diagonal inside a
// later block), query blocks of 4..14 rows (padding rows of the 12-row P·V tile), several query
// blocks per work item with a ragged last one, and Dv not a multiple of the 32-column chunk.
TEST(X86Simd, AttentionKeyBlocksAndTiles) {
  REQUIRE_AVX512();
  const std::map<std::string, std::string> knobs[] = {{{"nb", "32"}}, {{"nb", "64"}, {"mr", "14"}}, {{"mr", "4"}}};
  for (bool causal : {false, true}) {
    const Region region =
        region_of(std::string("attention { scale = 0.2; causal = ") + (causal ? "true" : "false") + " }");
    for (const auto& k : knobs) {
      expect_matches_reference(region, attention_dims(0, 1, 1, 129, 300, 64), 30, 1.0, k);
      expect_matches_reference(region, attention_dims(2, 4, 2, 61, 77, 40), 31, 1.0, k); // GQA, Dv = 32 + 8
      expect_matches_reference(region, attention_dims(0, 1, 1, 50, 50, 80), 32, 1.0, k); // Dv = 32 + 32 + 16
    }
    expect_verified(region, {{"nb", "32"}, {"mr", "14"}});
  }
}

// testing::expect_k_panels_streamed_or_not says what it covers.
TEST(X86Simd, AttentionKPanelsStreamedOrNot) {
  REQUIRE_AVX512();
  testing::expect_k_panels_streamed_or_not("x86_avx512", "_mm512_stream_ps(dst");
}

// Thread-local K packs (lpack, the default): where the threads work from ranges (non-causal
// items, causal pairs) each packs the K of its item's head when its head changes; the counter,
// the dynamic schedule and 16-bit storage keep the shared panels, as does lpack = 0, and the
// ymm lane takes no such knob. Both match the reference on every thread and on one (whose
// range is the first: it packs every head in turn), across heads, grouped heads, ragged keys
// and features, and K transposed.
TEST(X86Simd, AttentionThreadLocalPacks) {
  REQUIRE_AVX512();
  const Region plain = region_of("attention { scale = 0.125 }");
  const Region causal = region_of("attention { scale = 0.125; causal = true }");
  const auto emitted = [&](const Region& region, std::map<std::string, std::string> knobs) {
    return testing::emitted_source("x86_avx512", region, std::move(knobs));
  };
  const std::string local = "const int lpack = nr > 0;";
  EXPECT_NE(emitted(plain, {}).find(local), std::string::npos);
  EXPECT_NE(emitted(causal, {{"byhead", "3"}}).find(local), std::string::npos);
  EXPECT_EQ(emitted(plain, {{"lpack", "0"}}).find("lpack"), std::string::npos);
  EXPECT_EQ(emitted(plain, {{"claim", "0"}}).find("lpack"), std::string::npos);
  EXPECT_EQ(emitted(causal, {{"byhead", "2"}}).find("lpack"), std::string::npos);
  EXPECT_EQ(emitted(region_of("attention { storage = bf16 }"), {}).find("lpack"), std::string::npos);
  EmitOptions ymm;
  ymm.options = {{"lpack", "1"}};
  const auto refused = testing::x86_candidate(RegionKind::attention, "x86_avx2")->emit(plain, ymm);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("unknown option 'lpack=1'"), std::string::npos) << refused.error().message;
  const Region transposed = region_of("attention { scale = 0.2; k_transposed = true }");
  for (const char* lpack : {"0", "1"})
    for (const char* serial : {"0", "1073741824"}) {
      // (claim = 1: ranges whatever the host's L2.)
      const std::map<std::string, std::string> knobs = {{"lpack", lpack}, {"claim", "1"}, {"serial", serial}};
      for (const ProblemShape& dims :
           {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 3, 1, 100, 333, 40, 72)}) {
        testing::expect_matches_reference_on("x86_avx512", plain, dims, 71, 0.5, knobs);
        testing::expect_matches_reference_on("x86_avx512", transposed, dims, 72, 0.5, knobs);
        testing::expect_matches_reference_on("x86_avx512", causal, dims, 73, 0.5,
                                             {{"lpack", lpack}, {"byhead", "3"}, {"claim", "1"}, {"serial", serial}});
      }
    }
}

// testing::expect_causal_item_orders says what it covers. The lane's default is pairs of items
// on a process of 16 CPUs or more, their K packed by the thread that reads them (byhead = 3,
// lpack), else head after head while there are 16 items a thread (2); items sized for two a
// thread either way. The emitted source shows which.
TEST(X86Simd, AttentionCausalItemOrders) {
  REQUIRE_AVX512();
  testing::expect_causal_item_orders("x86_avx512");
  const bool pairs = x86::simd::causal_pairs(host_affinity_cpus());
  const std::string source = testing::emitted_source("x86_avx512", region_of("attention { causal = true }"), {});
  EXPECT_EQ(source.find("const int by_head = nbh * nqb >= 16 * (int64_t)nthreads;") != std::string::npos, !pairs);
  EXPECT_EQ(source.find("(e == 0 ? nqb - 1 - pk : pk)") != std::string::npos, pairs);
  EXPECT_EQ(source.find("const int lpack = nr > 0;") != std::string::npos, pairs);
  EXPECT_NE(source.find(" / (2 * nthreads);"), std::string::npos);
}

// testing::expect_attention_trace says what it covers.
TEST(X86Simd, AttentionTrace) {
  REQUIRE_AVX512();
  testing::expect_attention_trace("x86_avx512");
}

// testing::expect_query_block_claims says what it covers.
TEST(X86Simd, AttentionQueryBlockClaims) {
  REQUIRE_AVX512();
  testing::expect_query_block_claims("x86_avx512");
}

// testing::expect_masked_values_never_leak says what it covers.
TEST(X86Simd, AttentionMaskedValuesNeverLeak) {
  REQUIRE_AVX512();
  testing::expect_masked_values_never_leak("x86_avx512");
}

// Calls with at most `fq` (default 8) query rows per head take the few-query path
// (testing::expect_few_query_rows says what it covers); NaN reaches its outputs as the flash
// loop's.
TEST(X86Simd, AttentionFewQueryRows) {
  REQUIRE_AVX512();
  testing::expect_few_query_rows("x86_avx512");
}

TEST(X86Simd, AttentionFewQueryRowsSpecialValues) {
  REQUIRE_AVX512();
  testing::expect_few_query_special_values("x86_avx512");
}

// Norm chains split rows across threads and overlap one row's output with the next row's
// read: every rows/threads split, rows shorter than the 4-way split sum, rows whose re-read
// sum pass ends in whole vectors after its four-vector steps (50, 100), and a NaN in one row
// that must not reach its neighbours' statistics.
TEST(X86Simd, NormChainRowSplitAndIsolation) {
  REQUIRE_AVX512();
  for (const char* norm : {"rmsnorm", "layer_norm", "softmax"})
    for (bool res : {false, true}) {
      const Region region =
          region_of(std::string("norm_chain { norm = ") + norm + "; add_residual = " + (res ? "true" : "false") +
                    "; weight = true; bias = true }");
      for (Shape shape : std::vector<Shape>{{1, 1}, {1, 5}, {2, 3}, {3, 7}, {3, 50}, {4, 100}, {5, 129}, {33, 4099}})
        expect_matches_reference(region, elementwise(shape), 34, 1.0);
    }
  // Softmax rows take e^x on 16 lanes (masked at a row's end: 37 = 2 x 16 + 5), not through
  // the scalar helper.
  auto softmax = lane(RegionKind::norm_chain)->emit(region_of("norm_chain { norm = softmax; weight = true }"), {});
  ASSERT_TRUE(softmax.ok());
  EXPECT_NE(softmax->source.find("fusor_exp2f16(d0_)"), std::string::npos); // 2^(x·log2 e - c·log2 e)
  EXPECT_EQ(softmax->source.find("fusor_expf(d"), std::string::npos);
  // Softmax keeps its terms e^(x - max) for the output pass (eb_) and, on rows read in place,
  // takes the next row's maximum while it writes this one (mx_).
  EXPECT_NE(softmax->source.find("eb_ + j_"), std::string::npos);
  EXPECT_NE(softmax->source.find("mx_ = _mm512_max_ps("), std::string::npos);
  EXPECT_EQ(softmax->source.find("fusor_exp2f16(d_)"), std::string::npos); // e^x once per element
  EXPECT_EQ(softmax->source.find("fusor_expf16(d_)"), std::string::npos);
  // Its e^x pass, which reads only the cached row, also brings the next row toward L2.
  const size_t sum_pass = softmax->source.find("fusor_exp2f16(d0_)");
  const size_t next_row = softmax->source.find("_mm_prefetch((const char*)(xn + j_ + 48), _MM_HINT_T1);");
  ASSERT_NE(next_row, std::string::npos);
  EXPECT_LT(next_row, sum_pass);
  EXPECT_GT(next_row, softmax->source.find("for (; j_ + 64 <= row_len; j_ += 64) {", softmax->source.find("cv_")));
  // Residual rows of rmsnorm and layer norm are re-read (x and the residual added again in each
  // pass, the output stored straight out); softmax's are staged in a row buffer.
  for (const char* norm : {"rmsnorm", "layer_norm", "softmax"}) {
    auto src = lane(RegionKind::norm_chain)
                   ->emit(region_of(std::string("norm_chain { norm = ") + norm + "; add_residual = true }"), {});
    ASSERT_TRUE(src.ok());
    const bool staged = std::string(norm) == "softmax";
    EXPECT_EQ(src->source.find("float* restrict tb = ") != std::string::npos, staged) << norm;
    EXPECT_EQ(src->source.find("_mm512_maskz_loadu_ps(m_, rs + j_)") != std::string::npos, !staged) << norm;
    if (staged) continue;
    // The next row's x and residual are asked of L2 half by the sum pass, half by the output pass.
    for (const char* next : {"xn_", "rn_"}) {
      const std::string ask = std::string("_mm_prefetch((const char*)(") + next + " + ";
      const size_t first = src->source.find(ask + "j_ / 2), _MM_HINT_T1);");
      const size_t second = src->source.find(ask + "row_len / 2 + j_ / 2), _MM_HINT_T1);");
      ASSERT_NE(first, std::string::npos) << norm << " " << next;
      ASSERT_NE(second, std::string::npos) << norm << " " << next;
      EXPECT_LT(first, src->source.find("const float r_ = ")) << norm;
      EXPECT_GT(second, src->source.find("const float r_ = ")) << norm;
    }
  }
  // A NaN stays in its row, whether the rows are staged (residual) or read in place with the
  // next row's maximum taken ahead; a row of -inf gives NaN (e^(-inf + inf)), as the reference.
  for (const char* norm : {"rmsnorm", "layer_norm", "softmax"})
    for (bool res : {true, false}) {
      const Region region =
          region_of(std::string("norm_chain { norm = ") + norm + "; add_residual = " + (res ? "true" : "false") +
                    "; weight = true; bias = true }");
      auto operands = make_operands(region, elementwise({5, 37}), 35, 1.0);
      operands[0].data[37 + 3] = NAN; // row 1
      const bool softmax_row = std::string(norm) == "softmax" && !res;
      if (softmax_row)
        for (std::int64_t j = 0; j < 37; ++j) operands[0].data[3 * 37 + j] = -INFINITY; // row 3
      auto ref = evaluate_reference(region, operands);
      ASSERT_TRUE(ref.ok()) << ref.error().str();
      auto out = execute_on_target(x86(), region, operands, lane_options(RegionKind::norm_chain));
      ASSERT_TRUE(out.ok()) << out.error().str();
      EXPECT_TRUE(testing::all_close(out->output, *ref)) << norm;
      for (std::int64_t i = 0; i < 5 * 37; ++i)
        EXPECT_EQ(std::isnan(out->output.data[i]), i / 37 == 1 || (softmax_row && i / 37 == 3))
            << norm << (res ? " staged" : " in place") << " element " << i;
    }
}

TEST(X86Simd, AttentionHugeScores) {
  REQUIRE_AVX512();
  testing::expect_attention_huge_scores("x86_avx512");
}

TEST(X86Simd, SoftmaxRowsInBase2KeepExtremeRows) {
  REQUIRE_AVX512();
  testing::expect_softmax_row_extremes("x86_avx512");
}

TEST(X86Simd, StreamingKinds) {
  REQUIRE_AVX512();
  for (const char* norm : {"rmsnorm", "layer_norm", "softmax"})
    for (bool res : {false, true}) {
      const Region region =
          region_of(std::string("norm_chain { norm = ") + norm + "; add_residual = " + (res ? "true" : "false") +
                    "; weight = true; bias = " + (res ? "true" : "false") + " }");
      expect_matches_reference(region, elementwise({17, 4096}), 20, 1.0);
      expect_matches_reference(region, elementwise({7, 129}), 21, 1.0);
    }
  for (const auto& info : op_table()) {
    if (!info.in_pointwise_vocabulary) continue;
    const std::string call = info.arity == 2 ? std::string(info.name) + "(x, y)" : std::string(info.name) + "(x)";
    const Region region = region_of("pointwise { inputs = [x, y]; t0 = " + call + "; t1 = mul(t0, 1.5); output = t1 }");
    expect_matches_reference(region, elementwise({7, 129}), 22, 2.0);
  }
  for (const char* reduce : {"sum", "mean", "amax", "amin"}) {
    const Region region =
        region_of(std::string("pointwise_reduce { inputs = [x]; t0 = tanh(x); output = t0; reduce = ") + reduce + " }");
    expect_matches_reference(region, elementwise({3, 5, 129}), 23, 1.0);
  }
}

// Outputs past the last-level cache are written with streaming stores from an L1 chunk;
// `stream=1` forces them on the tests' small shapes. They must give the plain stores' bits,
// on rows that start off a cache line (4099 floats) and chunks with ragged tails.
TEST(X86Simd, StreamingStoresGiveThePlainStoresBits) {
  REQUIRE_AVX512();
  std::vector<Region> regions;
  for (const char* norm : {"rmsnorm", "layer_norm", "softmax"})
    for (bool res : {false, true})
      regions.push_back(region_of(std::string("norm_chain { norm = ") + norm +
                                  "; add_residual = " + (res ? "true" : "false") + "; weight = true; bias = true }"));
  regions.push_back(region_of("pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); "
                              "h = mul(x, 0.5); out = add(t, h); output = out }"));
  // Ops that do not render over __m512: the compiler-vectorised loop, staged in L1 chunks.
  regions.push_back(region_of("pointwise { inputs = [x, g]; a = abs(x); r = relu(g); out = add(a, r); output = out }"));
  for (const Region& region : regions) {
    const RegionKind kind = region_kind(region);
    EmitOptions forced;
    forced.options = {{"stream", "1"}};
    auto streamed = lane(kind)->emit(region, forced);
    ASSERT_TRUE(streamed.ok()) << streamed.error().str();
    EXPECT_NE(streamed->source.find("_mm512_stream_ps"), std::string::npos) << print_region(region);
    EXPECT_NE(streamed->source.find("_mm_sfence()"), std::string::npos) << print_region(region);
    for (const Shape& shape : std::vector<Shape>{{33, 4099}, {5, 2500}, {3, 16}, {1, 7}}) {
      const auto operands = make_operands(region, elementwise(shape), 38, 1.0);
      auto plain = execute_on_target(x86(), region, operands, lane_options(kind, {{"stream", "0"}}));
      auto nt = execute_on_target(x86(), region, operands, lane_options(kind, {{"stream", "1"}}));
      ASSERT_TRUE(plain.ok() && nt.ok()) << print_region(region);
      EXPECT_TRUE(nt->verified);
      EXPECT_EQ(std::memcmp(plain->output.data.data(), nt->output.data.data(), 4 * plain->output.data.size()), 0)
          << print_region(region) << " " << shape_str(shape);
      expect_matches_reference(region, elementwise(shape), 38, 1.0, {{"stream", "1"}});
    }
    expect_verified(region, {{"stream", "1"}});
  }
  // By default outputs past the process's share of the last-level cache, at most 12 MiB, stream
  // (stream_limit_bytes); the llc knob moves the limit below 12 MiB, an unknown cache (0) keeps it.
  const auto limit = [&](std::map<std::string, std::string> options) {
    EmitOptions o;
    o.options = std::move(options);
    auto src = lane(RegionKind::norm_chain)->emit(regions[0], o);
    EXPECT_TRUE(src.ok());
    const std::string text = src.ok() ? src->source : std::string();
    const auto at = text.find("#define FUSOR_STREAM_LIMIT ");
    return at == std::string::npos ? std::string() : text.substr(at + 27, text.find(".0", at) - at - 27);
  };
  const std::int64_t most = std::int64_t{12} << 20, share = host_llc_share_bytes() / 1024 * 1024;
  EXPECT_EQ(limit({}), std::to_string(share > 0 && share < most ? share : most));
  EXPECT_EQ(limit({{"llc", "8192"}}), std::to_string(8 << 20));
  EXPECT_EQ(limit({{"llc", "65536"}}), std::to_string(most));
  EXPECT_EQ(limit({{"llc", "0"}}), std::to_string(most));
  // 0 plain, 1 streaming, 2 past the limit: nothing else.
  EmitOptions bad;
  bad.options = {{"stream", "3"}};
  EXPECT_FALSE(lane(RegionKind::norm_chain)->emit(regions[0], bad).ok());
}

// One op through the lane's scalar helpers (fusor_expf, fusor_tanhf, ...) on many inputs;
// returns the output. The broadcast operand `one` keeps the DAG off the 16-lane path, which
// the 16-lane helper tests (testing::run_vector_expr) measure instead.
FloatBuffer run_unary(const std::string& op, const std::vector<float>& xs) {
  const Region region =
      region_of("pointwise { inputs = [x, one]; t0 = " + op + "(x); t1 = mul(t0, one); output = t1 }");
  std::vector<Tensor> operands{Tensor({static_cast<std::int64_t>(xs.size())}, xs), Tensor({1}, {1.0f})};
  auto out = execute_on_target(x86(), region, operands, lane_options(RegionKind::pointwise));
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().str());
  return out.ok() ? out->output.data : FloatBuffer{};
}

TEST(X86Simd, VectorMathErrorBounds) {
  REQUIRE_AVX512();
  // Dense grids over each function's whole interesting range (exp: up to overflow).
  const auto ex = grid(-87.0, 88.7, 400000);
  const auto e = measure(ex, run_unary("exp", ex), [](double x) { return std::exp(x); });
  const auto tx = grid(-12.0, 12.0, 400000);
  const auto t = measure(tx, run_unary("tanh", tx), [](double x) { return std::tanh(x); });
  const auto rx = grid(-6.0, 6.0, 400000);
  const auto r = measure(rx, run_unary("erf", rx), [](double x) { return std::erf(x); });
  std::printf("vector exp:  max rel err %.3g\nvector tanh: max abs err %.3g, max rel err %.3g\n"
              "vector erf:  max abs err %.3g, max rel err %.3g\n",
              e.max_rel, t.max_abs, t.max_rel, r.max_abs, r.max_rel);
  EXPECT_LT(e.max_rel, 3e-7); // about 2.5 ulp
  EXPECT_LT(t.max_abs, 3e-7);
  EXPECT_LT(t.max_rel, 1e-6);
  EXPECT_LT(r.max_abs, 5e-7);
}

TEST(X86Simd, VectorExp16ErrorBoundsAndSpecialValues) {
  REQUIRE_AVX512();
  testing::expect_vector_exp(16);
}

// 2^x without the Cody-Waite split (attention's softmax, log2 e folded into its scale).
TEST(X86Simd, VectorExp2_16ErrorBoundsAndSpecialValues) {
  REQUIRE_AVX512();
  testing::expect_vector_exp2(16);
}

// The scalar 2^x every x86 lane's float loops render (sigmoid, silu and GELU spell e^y as
// exp2f); no AVX-512 needed.
TEST(X86Simd, ScalarExp2ErrorBoundsAndSpecialValues) { testing::expect_vector_exp2(1); }

TEST(X86Simd, VectorTanhErf16ErrorBoundsAndSpecialValues) {
  REQUIRE_AVX512();
  testing::expect_vector_tanh_erf(16);
}

// A pointwise DAG whose ops all render over __m512 runs 16 lanes at a time with a masked
// tail; special values follow the reference.
TEST(X86Simd, PointwiseVectorPath) {
  REQUIRE_AVX512();
  const Region region = region_of("pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); "
                                  "h = mul(x, 0.5); e = erf(h); out = add(t, e); output = out }");
  auto src = lane(RegionKind::pointwise)->emit(region, {});
  ASSERT_TRUE(src.ok());
  // Four vectors a step, each with its own mask: totals that end in each of the four (903
  // ends 7 into the first, 100 4 into the third, 117 5 into the fourth, 32 on the second's end).
  EXPECT_NE(src->source.find("i += 64"), std::string::npos);
  EXPECT_NE(src->source.find("_mm512_mask_storeu_ps(out + i + 48, m3, v3)"), std::string::npos);
  EXPECT_NE(src->source.find("_mm_prefetch((const char*)(x1 + i + 48) + 4096"), std::string::npos);
  for (const Shape& shape : std::vector<Shape>{{7, 129}, {3}, {2, 16}, {100}, {1, 117}})
    expect_matches_reference(region, elementwise(shape), 36, 3.0);
  testing::expect_dag_specials_match_reference(region, lane(RegionKind::pointwise));
  expect_verified(region);
}

// fmaxf/fminf over 16 lanes keep C99's NaN rule.
TEST(X86Simd, VectorMinMax16NaNRule) {
  REQUIRE_AVX512();
  testing::expect_vector_minmax_nan_rule(16);
}

TEST(X86Simd, VectorMathSpecialValues) {
  REQUIRE_AVX512();
  const float inf = INFINITY, nan = NAN;
  const std::vector<float> xs{nan, inf, -inf, 0.0f, -0.0f, 100.0f, -200.0f, 89.0f, 1e-30f, -87.5f, -87.2f};
  const auto ex = run_unary("exp", xs);
  ASSERT_EQ(ex.size(), xs.size());
  EXPECT_EQ(ex[9], 0.0f); // below FLT_MIN: 0, never a (slow) denormal
  EXPECT_GE(ex[10], FLT_MIN);
  EXPECT_TRUE(std::isnan(ex[0]));
  EXPECT_EQ(ex[1], inf);
  EXPECT_EQ(ex[2], 0.0f);
  EXPECT_EQ(ex[3], 1.0f);
  EXPECT_EQ(ex[5], inf);
  EXPECT_EQ(ex[6], 0.0f);
  EXPECT_EQ(ex[7], inf); // e^89 > FLT_MAX
  const auto th = run_unary("tanh", xs);
  EXPECT_TRUE(std::isnan(th[0]));
  EXPECT_EQ(th[1], 1.0f);
  EXPECT_EQ(th[2], -1.0f);
  EXPECT_EQ(th[5], 1.0f);
  EXPECT_TRUE(std::signbit(th[4]));
  EXPECT_EQ(th[8], 1e-30f);
  const auto er = run_unary("erf", xs);
  EXPECT_TRUE(std::isnan(er[0]));
  EXPECT_EQ(er[1], 1.0f);
  EXPECT_EQ(er[2], -1.0f);
  EXPECT_EQ(er[3], 0.0f);
  // relu(NaN) = NaN and maximum(NaN, y) = NaN come from the table, not the helpers.
  const auto re = run_unary("relu", xs);
  EXPECT_TRUE(std::isnan(re[0]));
  EXPECT_EQ(re[2], 0.0f);
}

} // namespace
} // namespace fusor
