// What the x86 lane tests share: regions from text, the x86 target (kernels cached in the
// build tree), a lane's candidate by name, and problem shapes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fusor/operand_gen.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "support/compare.hpp"

namespace fusor::testing {

inline Region region_of(const std::string& text) {
  auto r = parse_region(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().str());
  return r.value();
}

inline const Target& x86() {
  use_test_cache();
  const Target* t = builtin_registry().target("x86");
  EXPECT_NE(t, nullptr);
  return *t;
}

// The x86 candidate `name` for `kind` (nullptr when that lane does not register it).
inline const Candidate* x86_candidate(RegionKind kind, std::string_view name) {
  for (const Candidate* c : builtin_registry().candidates("x86", kind))
    if (c->name == name) return c;
  return nullptr;
}

// The tolerance lane tests compare with: the oracle's default, or the storage's budget.
inline double storage_atol(const Region& region) {
  const DType st = region_storage(region);
  return st == DType::f32 ? 1e-3 : (st == DType::f16 ? 5e-3 : 5e-2);
}

// The oracle's verdict on lane `name`'s own artifact for `region` (probes incl. NaN/inf,
// exact integers, large magnitudes, masked rows), emitted with tuning `knobs`.
inline void expect_verified_on(std::string_view name, const Region& region,
                               std::map<std::string, std::string> knobs = {}) {
  const Candidate* c = x86_candidate(region_kind(region), name);
  ASSERT_NE(c, nullptr);
  ASSERT_FALSE(c->declines(region).has_value());
  EmitOptions options;
  options.options = std::move(knobs);
  auto src = c->emit(region, options);
  ASSERT_TRUE(src.ok()) << src.error().str();
  EXPECT_EQ(src->lane, name);
  auto artifact = x86().compile(*src);
  ASSERT_TRUE(artifact.ok()) << artifact.error().str();
  auto report = verify(region, x86(), *artifact);
  ASSERT_TRUE(report.ok()) << report.error().str();
  EXPECT_TRUE(report->verified) << print_region(region) << "\n" << report->summary();
}

// Lane `name` on every thread however small the shape (serial = 0, unless `knobs` says
// otherwise), no reference fallback.
inline ExecuteOptions lane_options_on(std::string_view name, RegionKind kind,
                                      std::map<std::string, std::string> knobs = {}) {
  ExecuteOptions o;
  o.candidate = x86_candidate(kind, name);
  knobs.try_emplace("serial", "0");
  o.emit.options = std::move(knobs);
  o.reference_fallback = false;
  return o;
}

// Lane `name`'s output for `region` at `dims` (operands from `seed`, `scale`) is the oracle's
// own (verified) and within the storage's tolerance of the reference.
inline void expect_matches_reference_on(std::string_view name, const Region& region, const ProblemShape& dims,
                                        std::uint64_t seed, double scale,
                                        std::map<std::string, std::string> knobs = {}) {
  const auto operands = make_operands(region, dims, seed, scale);
  auto ref = evaluate_reference(region, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  auto out = execute_on_target(x86(), region, operands, lane_options_on(name, region_kind(region), std::move(knobs)));
  ASSERT_TRUE(out.ok()) << print_region(region) << ": " << out.error().str();
  EXPECT_EQ(out->tag, name);
  EXPECT_TRUE(out->verified);
  EXPECT_TRUE(all_close(out->output, *ref, storage_atol(region)))
      << name << " " << print_region(region) << " at M=" << dims.M << " N=" << dims.N << " K=" << dims.K
      << " Nk=" << dims.Nk << " D=" << dims.D;
}

// Regions of every kind and storage the SIMD lanes' oracle tests verify.
inline constexpr const char* kEveryKindRegions[] = {
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
    "attention { scale = 0.125; causal = true }",
    "attention { scale = 0.3; causal = false; q_transposed = true; k_transposed = true; storage = f16 }",
    "norm_chain { norm = rmsnorm; add_residual = true; weight = true }",
    "norm_chain { norm = layer_norm; weight = true; bias = true }",
    "norm_chain { norm = softmax; add_residual = true }",
    "pointwise { inputs = [x, y]; t0 = mul(x, y); t1 = gelu(t0); t2 = maximum(t1, y); output = t2 }",
    "pointwise { inputs = [x, y, z]; t0 = softplus(x); t1 = erf(y); t2 = tanh(z); t3 = add(t0, t1); t4 = "
    "minimum(t3, t2); output = t4 }",
    "pointwise_reduce { inputs = [x]; t0 = exp(x); output = t0; reduce = sum }",
    "pointwise_reduce { inputs = [x, y]; t0 = sub(x, y); output = t0; reduce = amax }",
    "pointwise_reduce { inputs = [x]; t0 = neg(x); output = t0; reduce = amin }",
};

// Regions whose kernels the small-block knobs split into many K blocks, row blocks and tails.
inline constexpr const char* kSmallBlockRegions[] = {
    "fused { epilogue = [bias, gelu]; residual = true }", "gated { gate_act = silu }",
    "fused { epilogue = [bias]; reduction = softmax }", "attention { causal = true }"};

inline ProblemShape gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  ProblemShape s;
  s.M = m, s.N = n, s.K = k;
  return s;
}

// The SIMD lanes read narrow GEMMs' A and B where they lie (N <= 256, f32, row-major, no
// prologue, one product) and stream B for fewer than 8 rows: these regions take those paths,
// and these shapes cover edge panels of every height, a partial last column panel, N = 256 /
// 257 (either side of the switch), K in several blocks (the sums continued in the direct
// tile's registers), 1-7 rows over wide N with K not a multiple of the 8-row step, and rows
// at least as many as columns but few enough that the threads split the panels (64 x 64,
// 150 x 96 on two threads). The row path's strip is a thread's whole column range up to 8
// rows (4 x 4099; 2 and 5 x 2100 through a B of 16 MiB, which the ymm tile's row path needs) and
// 1024 columns from 9 (9 x 2100, 11 x 2050).
inline constexpr const char* kInPlaceGemmRegions[] = {
    "fused { epilogue = [bias]; residual = true }", "fused { epilogue = [bias, gelu] }",
    "fused { epilogue = [bias]; reduction = layer_norm }", "matmul { }"};
inline constexpr const char* kPackedGemmRegions[] = {"fused { prologue = [relu]; epilogue = [bias] }",
                                                     "matmul { transpose_b = true }", "matmul { storage = f16 }",
                                                     "gated { gate_act = silu }"};
inline const ProblemShape kInPlaceShapes[] = {
    gemm(1, 1, 1),        gemm(7, 33, 129),    gemm(30, 32, 17),   gemm(64, 64, 256),   gemm(65, 100, 1600),
    gemm(129, 256, 70),   gemm(14, 31, 5),     gemm(61, 257, 40),  gemm(1, 300, 129),   gemm(7, 1000, 9),
    gemm(4, 4099, 20),    gemm(2, 700, 1600),  gemm(150, 96, 33),  gemm(13, 300, 1001), gemm(9, 2100, 260),
    gemm(11, 2050, 2047), gemm(2, 2100, 2003), gemm(5, 2100, 2003)};

// Max |out - exact| of `matmul { }` on `lane` at m x n x K with A all ones and each column of B
// 1 then K - 1 values `tail`, emitted with `options` (serial = 0 added).
inline double chain_sum_error(std::string_view lane, std::int64_t m, std::int64_t n, std::int64_t K, float tail,
                              std::map<std::string, std::string> options) {
  Tensor a({m, K}), b({K, n});
  std::fill(a.data.begin(), a.data.end(), 1.0f);
  std::fill(b.data.begin(), b.data.end(), tail);
  std::fill(b.data.begin(), b.data.begin() + n, 1.0f);
  ExecuteOptions o;
  o.candidate = x86_candidate(RegionKind::matmul, lane);
  options.emplace("serial", "0");
  o.emit.options = std::move(options);
  o.reference_fallback = false;
  const std::vector<Tensor> operands{a, b};
  auto out = execute_on_target(x86(), region_of("matmul { }"), operands, o);
  if (!out.ok() || out->tag != lane) {
    ADD_FAILURE() << lane << ": " << (out.ok() ? "ran on " + out->tag : out.error().str());
    return INFINITY;
  }
  const double exact = 1.0 + static_cast<double>(K - 1) * tail;
  double worst = 0;
  for (float v : out->output.data) worst = std::max(worst, std::abs(static_cast<double>(v) - exact));
  return worst;
}

// A lane's GEMM tile starts from zero every 256 K steps (a sub-block; also at each K block) and
// adds the sums so far at its end, so its rounding error grows with the sub-block's length, not
// the K block's or K's. Checked where a single chain loses everything: A is all ones and each
// column of B is 1 then K - 1 values of 2^-24 (half an ulp of 1), each of which rounds away when
// added alone to a sum near 1. Every output is exactly 1 + (K - 1) 2^-24; the tile loses the
// first sub-block's 255 2^-24 and at most 2^-24 per later merge of an odd count (one chain from
// the start: all 4095; K blocks of 683 without sub-blocks: 682 at least). K blocks of 256 (the
// knob) and the default 768 (blocks of 683, sub-blocks 256 + 256 + 171). N = 64 reads the
// operands in place, N = 300 packs them; 4 rows take the few-row path.
inline void expect_k_blocks_sum_from_zero(std::string_view lane) {
  constexpr std::int64_t K = 4096;
  for (const std::int64_t n : {64, 300})
    for (const char* kc : {"256", "768"})
      EXPECT_LE(chain_sum_error(lane, 16, n, K, 0x1p-24f, {{"kc", kc}}), (255 + 16) * 0x1p-24)
          << lane << " at N = " << n << ", kc = " << kc;
  // Few rows stream B in steps of 8 rows: the skinny path (srows = 4) sums each step's products
  // in pairs, so a step of 2^-27 values adds 2^-24 and rounds away alone; the row path adds them
  // in one chain (zmm) or two (ymm) and loses each. Either way the first sub-block (256 k) loses
  // about 32 2^-24 and the later ones start from zero (one running sum: 512). 1024 columns make
  // B 16 MiB, from which the ymm tile takes the row path too.
  for (const char* srows : {"4", "14"})
    EXPECT_LE(chain_sum_error(lane, 4, 1024, K, 0x1p-27f, {{"srows", srows}}), 40 * 0x1p-24)
        << lane << ", 4 rows, srows = " << srows;
}

// With `knobs`, every in-place GEMM kind on lane `name` emits `bound` (the row path's test)
// and matches the reference at `shapes`, which the row path then takes.
inline void expect_rows_path_bound(std::string_view name, const std::map<std::string, std::string>& knobs,
                                   const std::string& bound, std::initializer_list<ProblemShape> shapes,
                                   std::uint64_t seed) {
  for (const char* text : kInPlaceGemmRegions) {
    const Region region = region_of(text);
    EmitOptions eo;
    eo.options = knobs;
    auto src = x86_candidate(region_kind(region), name)->emit(region, eo);
    ASSERT_TRUE(src.ok()) << src.error().str();
    EXPECT_NE(src->source.find(bound), std::string::npos) << name << " " << text;
    for (const ProblemShape& dims : shapes) expect_matches_reference_on(name, region, dims, seed, 0.5, knobs);
  }
}

// Where B is larger than the last-level cache (llc, KiB: 1 here, so any B is), rows below
// crows take the row path; its 14-24 rows match the reference on lane `name`, and the emitted
// test names the bound and the cache's bytes.
inline void expect_cold_b_rows_path(std::string_view name) {
  expect_rows_path_bound(name, {{"crows", "25"}, {"llc", "1"}}, "M < 25 && 4.0 * (double)K * N > 1024.0)",
                         {gemm(14, 300, 1001), gemm(16, 2100, 260), gemm(24, 513, 700)}, 49);
}

// Where each thread's share of the columns is at least wcols (32 here, so any N > 256 is), rows
// below wrows take the row path; its 14-32 rows match the reference on lane `name`, and the
// emitted test names both bounds.
inline void expect_wide_b_rows_path(std::string_view name) {
  expect_rows_path_bound(name, {{"wrows", "33"}, {"wcols", "32"}}, "(M < 33 && N >= (int64_t)32 * wnt)",
                         {gemm(14, 300, 1001), gemm(24, 2100, 260), gemm(32, 513, 700)}, 59);
}

// The skinny path (rows below the row path's, N > 256) with K split between the threads (the
// default) and with the columns split: both match the reference, a thread whose share of K is
// empty (K under 8 rows a thread) included, in every in-place GEMM kind.
inline void expect_skinny_splits(std::string_view name) {
  for (const char* text : kInPlaceGemmRegions) {
    const Region region = region_of(text);
    for (const char* ksplit : {"0", "1"}) {
      const std::map<std::string, std::string> knobs{{"ksplit", ksplit}};
      EmitOptions eo;
      eo.options = knobs;
      auto src = x86_candidate(region_kind(region), name)->emit(region, eo);
      ASSERT_TRUE(src.ok()) << src.error().str();
      EXPECT_EQ(src->source.find("kpart") != std::string::npos, ksplit[0] == '1') << name << " " << text;
      for (const ProblemShape& dims : {gemm(2, 300, 5), gemm(1, 700, 1600), gemm(2, 4099, 20), gemm(1, 513, 9)})
        expect_matches_reference_on(name, region, dims, 53, 0.5, knobs);
    }
  }
}

// dv < 0: Dv = D.
inline ProblemShape attention_dims(std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t m,
                                   std::int64_t nk, std::int64_t d, std::int64_t dv = -1) {
  ProblemShape s;
  s.batch = batch, s.heads = heads, s.kv_heads = kv_heads, s.M = m, s.Nk = nk, s.D = d, s.Dv = dv < 0 ? d : dv;
  return s;
}

inline ProblemShape elementwise(Shape shape) {
  ProblemShape s;
  s.output = std::move(shape);
  return s;
}

// The kernel source lane `name` emits for `region` with tuning `options` (empty on failure,
// which the test reports).
inline std::string emitted_source(std::string_view name, const Region& region,
                                  std::map<std::string, std::string> options) {
  EmitOptions o;
  o.options = std::move(options);
  auto src = x86_candidate(region_kind(region), name)->emit(region, o);
  EXPECT_TRUE(src.ok()) << src.error().str();
  return src.ok() ? src->source : std::string();
}

// f32 B [K, N] on lane `name`: a block's first A panel packs B's whole panels as its tiles read
// them (fusor_ukr_pack, bfuse=1) instead of a packing pass before them, and with bnext=1 (the
// default) a panel's later tiles pack the next panel, or the next two (bcopy=2), a share of the
// rows each (fusor_ukr_copy); 16-bit or transposed B keeps the pass. The same products in the
// same order: the bits of bfuse=0, on blocks with edge panels (N = 300), first A panels short of
// a tile (M = 9: packed by the pass), blocks of three tiles (M = 45), K blocks, both gated
// products, odd and even panel counts per thread and a narrow B read in place (N = 200), each
// also against the reference.
inline void expect_b_packed_by_first_tiles(std::string_view name) {
  const auto source = [&](const Region& region, const char* bfuse, const char* bnext = "1") {
    return emitted_source(name, region, {{"bfuse", bfuse}, {"bnext", bnext}});
  };
  const Region fused = region_of("fused { epilogue = [bias, gelu]; residual = true }");
  const Region gated = region_of("gated { gate_act = silu }");
  for (const Region& region : {fused, gated, region_of("matmul { }")}) {
    EXPECT_NE(source(region, "1").find("fusor_ukr_pack(kc, ain"), std::string::npos) << name << print_region(region);
    EXPECT_EQ(source(region, "0").find("fusor_ukr_pack("), std::string::npos) << name << print_region(region);
    EXPECT_NE(source(region, "1").find("fusor_ukr_copy(kc, ain"), std::string::npos) << name << print_region(region);
    EXPECT_EQ(source(region, "1", "0").find("fusor_ukr_copy("), std::string::npos) << name << print_region(region);
    // Gated panels (16 columns of each weight) are copied two at a time unless told otherwise.
    const bool two = region_kind(region) == RegionKind::gated;
    EXPECT_EQ(source(region, "1").find("t1 = p_lo + 1 + cg * 2;") != std::string::npos, two) << name;
  }
  EXPECT_EQ(source(region_of("fused { epilogue = [bias]; storage = bf16 }"), "1").find("fusor_ukr_pack("),
            std::string::npos);
  EXPECT_EQ(source(region_of("matmul { transpose_b = true }"), "1").find("fusor_ukr_pack("), std::string::npos);
  const auto run = [&](const Region& region, const std::vector<Tensor>& operands, const char* bfuse, const char* kc,
                       const char* bnext = "1", const char* bcopy = "0") {
    ExecuteOptions o;
    o.candidate = x86_candidate(region_kind(region), name);
    o.emit.options = {{"bfuse", bfuse}, {"kc", kc}, {"serial", "0"}, {"bnext", bnext}, {"bcopy", bcopy}};
    o.reference_fallback = false;
    return execute_on_target(x86(), region, operands, o);
  };
  for (const Region& region : {fused, gated})
    for (const auto& [dims, kc] : std::vector<std::pair<ProblemShape, const char*>>{{gemm(129, 300, 129), "40"},
                                                                                    {gemm(9, 300, 50), "768"},
                                                                                    {gemm(45, 640, 300), "768"},
                                                                                    {gemm(45, 200, 50), "40"}}) {
      const auto operands = make_operands(region, dims, 39, 0.5);
      auto pass = run(region, operands, "0", kc);
      auto tiles = run(region, operands, "1", kc);
      auto first_tiles = run(region, operands, "1", kc, "0");
      auto one_copy = run(region, operands, "1", kc, "1", "1"), two_copies = run(region, operands, "1", kc, "1", "2");
      ASSERT_TRUE(pass.ok() && tiles.ok() && first_tiles.ok() && one_copy.ok() && two_copies.ok())
          << name << print_region(region);
      EXPECT_EQ(tiles->tag, name);
      EXPECT_TRUE(tiles->verified);
      for (const auto* packed : {&*tiles, &*first_tiles, &*one_copy, &*two_copies})
        EXPECT_EQ(std::memcmp(pass->output.data.data(), packed->output.data.data(), 4 * pass->output.data.size()), 0)
            << name << print_region(region) << " M=" << dims.M << " N=" << dims.N << " K=" << dims.K;
      auto ref = evaluate_reference(region, operands);
      ASSERT_TRUE(ref.ok()) << ref.error().str();
      EXPECT_TRUE(all_close(tiles->output, *ref, storage_atol(region)))
          << name << print_region(region) << " M=" << dims.M << " N=" << dims.N << " K=" << dims.K;
    }
}

// Lane `name`'s GEMMs share out the tail (steal=1, the default): a thread out of items takes
// half of the unclaimed panels of another's last K block. Thread 0 starting 5 ms late (lag)
// makes the others take its panels, in every split: panels between threads (N > M, one K
// block), rows with several K blocks (a thief packs the victim's A block), gated partial sums,
// a narrow B read in place, a 16-bit residual. The output is bit for bit the static split's
// (steal=0): a panel taken before its earlier K blocks were summed would differ. Regions with
// a row reduction keep the static split (their rows are reduced by the item).
inline void expect_late_thread_panels_taken(std::string_view name) {
  const auto source = [&](const char* text, const char* steal) {
    return emitted_source(name, region_of(text), {{"steal", steal}});
  };
  const char* taking = "__atomic_compare_exchange_n(tail + victim";
  for (const char* text : {"fused { epilogue = [bias, gelu] }", "gated { gate_act = silu }", "matmul { }"}) {
    EXPECT_NE(source(text, "1").find(taking), std::string::npos) << name << " " << text;
    EXPECT_EQ(source(text, "0").find(taking), std::string::npos) << name << " " << text;
  }
  EXPECT_EQ(source("fused { epilogue = [bias]; reduction = rmsnorm }", "1").find(taking), std::string::npos);
  if (std::thread::hardware_concurrency() < 2)
    std::printf("note: one hardware thread, so no thread is left to take panels (checked for equality only)\n");
  const auto run = [&](const Region& region, const std::vector<Tensor>& operands,
                       std::map<std::string, std::string> knobs) {
    return execute_on_target(x86(), region, operands, lane_options_on(name, region_kind(region), std::move(knobs)));
  };
  struct Case {
    const char* text;
    ProblemShape dims;
    std::map<std::string, std::string> knobs;
  };
  const std::vector<Case> cases = {
      {"fused { epilogue = [bias, gelu] }", gemm(40, 1000, 100), {}},
      {"fused { prologue = [relu]; epilogue = [bias]; residual = true }", gemm(300, 200, 300), {{"kc", "64"}}},
      {"fused { epilogue = [bias]; residual = true; storage = bf16 }",
       gemm(129, 300, 129),
       {{"kc", "40"}, {"mc", "16"}}},
      {"gated { gate_act = silu }", gemm(60, 700, 129), {{"kc", "40"}}},
      {"matmul { }", gemm(100, 200, 100), {}},
      {"fused { epilogue = [bias, gelu]; b_layout = col_major }", gemm(200, 130, 90), {{"kc", "32"}}},
  };
  for (const Case& c : cases) {
    const Region region = region_of(c.text);
    const auto operands = make_operands(region, c.dims, 41, 0.5);
    auto knobs = c.knobs;
    knobs["steal"] = "0";
    auto fixed = run(region, operands, knobs);
    knobs["steal"] = "1", knobs["lag"] = "5000";
    auto taken = run(region, operands, knobs);
    ASSERT_TRUE(fixed.ok() && taken.ok()) << name << " " << c.text;
    EXPECT_EQ(taken->tag, name);
    EXPECT_TRUE(taken->verified) << name << " " << c.text;
    EXPECT_EQ(std::memcmp(fixed->output.data.data(), taken->output.data.data(), 4 * fixed->output.data.size()), 0)
        << name << " " << c.text << " M=" << c.dims.M << " N=" << c.dims.N << " K=" << c.dims.K;
    auto ref = evaluate_reference(region, operands);
    ASSERT_TRUE(ref.ok()) << ref.error().str();
    EXPECT_TRUE(all_close(taken->output, *ref, storage_atol(region))) << name << " " << c.text;
  }
}

// On the causal diagonal a key masked for one query is visible to a later one in the same
// query block: NaN values of such keys (37 on) must reach only the queries that see them, with
// one key block and with blocks of 32 keys.
inline void expect_masked_values_never_leak(std::string_view name) {
  const Region region = region_of("attention { scale = 0.25; causal = true }");
  for (const auto& knob : std::vector<std::map<std::string, std::string>>{{}, {{"nb", "32"}}}) {
    const std::int64_t m = 60, first_nan = 37;
    auto operands = make_operands(region, attention_dims(0, 1, 1, m, m, 16), 33, 1.0);
    for (std::int64_t n = first_nan; n < m; ++n)
      for (std::int64_t c = 0; c < 16; ++c) operands[2].data[n * 16 + c] = NAN;
    auto ref = evaluate_reference(region, operands);
    ASSERT_TRUE(ref.ok()) << ref.error().str();
    auto out = execute_on_target(x86(), region, operands, lane_options_on(name, RegionKind::attention, knob));
    ASSERT_TRUE(out.ok()) << out.error().str();
    EXPECT_EQ(out->tag, name);
    EXPECT_TRUE(all_close(out->output, *ref));
    for (std::int64_t i = 0; i < m; ++i)
      EXPECT_EQ(std::isnan(out->output.data[i * 16]), i >= first_nan) << name << ", query " << i;
  }
}

// K's packed panels written with streaming stores (kstream = 1, the default) and with plain
// ones: the emitted packing says which, and both match the reference where the panels hold
// whole 32-key runs and ragged ones (Nk), ragged features (D past the transposes), several
// threads' panels (GQA heads), K transposed (never streamed) and 16-bit storage (widened as it
// is packed; on the zmm lane V too, into a streamed f32 copy: its 3 x 63 x 37 and 37 values
// end in a ragged vector, the latter the one key every query sees).
inline void expect_k_panels_streamed_or_not(std::string_view name, std::string_view store) {
  for (const char* text :
       {"attention { scale = 0.125; causal = true }", "attention { scale = 0.2 }",
        "attention { scale = 0.2; k_transposed = true }", "attention { scale = 0.2; causal = true; storage = f16 }",
        "attention { scale = 0.2; storage = bf16 }"}) {
    const Region region = region_of(text);
    const std::string_view t(text);
    const bool transposed = t.find("k_transposed") != std::string_view::npos;
    for (const char* kstream : {"0", "1"}) {
      const std::map<std::string, std::string> knobs{{"kstream", kstream}};
      const bool streamed = emitted_source(name, region, knobs).find(store) != std::string::npos;
      EXPECT_EQ(streamed, kstream[0] == '1' && !transposed) << name << " " << text << " kstream=" << kstream;
      for (const ProblemShape& dims : {attention_dims(2, 4, 2, 40, 100, 64), attention_dims(1, 3, 3, 64, 63, 37),
                                       attention_dims(1, 8, 8, 96, 300, 128)})
        expect_matches_reference_on(name, region, dims, 57, 0.5, knobs);
      // (Two operand sets in turn: a value the kernel failed to write would hold the first's.)
      for (const std::uint64_t seed : {58, 59})
        expect_matches_reference_on(name, region, attention_dims(1, 2, 1, 16, 1, 37), seed, 0.5, knobs);
    }
  }
}

// Causal items in any order of heads (byhead = 0: the largest blocks of every head first,
// 1: head after head, 2: head after head while there are at least 16 items per thread, 3:
// pairs of a head's largest and smallest items, claimed from ranges or the counter) match
// the reference on lane `name`: eight heads of 150 rows (on the zmm tiles 32 items of four
// 12-row blocks, head after head by default on two threads), one head of 200 rows (largest
// first by default), GQA and 16-bit storage. The emitted order is the knob's. So do items
// of at most one or three query blocks (qs), causal and not, and items sized for one or seven a
// thread (qitems).
inline void expect_causal_item_orders(std::string_view name) {
  for (const char* text :
       {"attention { scale = 0.125; causal = true }", "attention { scale = 0.3; causal = true; storage = bf16 }"}) {
    const Region region = region_of(text);
    for (const char* byhead : {"0", "1", "2"}) {
      const std::map<std::string, std::string> knobs{{"byhead", byhead}};
      const std::string order = byhead[0] == '2' ? "nbh * nqb >= 16 * (int64_t)nthreads" : byhead;
      EXPECT_NE(emitted_source(name, region, knobs).find("const int by_head = " + order + ";"), std::string::npos)
          << name << " " << text << " byhead=" << byhead;
      for (const ProblemShape& dims : {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 1, 1, 200, 200, 40)})
        expect_matches_reference_on(name, region, dims, 61, 0.5, knobs);
    }
    // The ymm lane's default is 2 (the zmm lane's on fewer than 16 CPUs:
    // X86Simd.AttentionCausalItemOrders; the AMX lane's: X86Amx.AttentionCausalItemOrders).
    if (name == "x86_avx2") {
      EXPECT_NE(emitted_source(name, region, {}).find("const int by_head = nbh * nqb >= 16 * (int64_t)nthreads;"),
                std::string::npos)
          << name << " " << text;
    }
    // Pairs (byhead = 3) from ranges or the counter, on every thread and on one (which must
    // take every other range's pairs from its back); 200 rows make an odd count of items.
    for (const char* claim : {"0", "1"})
      for (const char* serial : {"0", "1073741824"}) {
        const std::map<std::string, std::string> knobs{{"byhead", "3"}, {"claim", claim}, {"serial", serial}};
        const std::string source = emitted_source(name, region, knobs);
        EXPECT_NE(source.find("(e == 0 ? nqb - 1 - pk : pk)"), std::string::npos) << name << " " << text;
        EXPECT_EQ(source.find("const int by_head"), std::string::npos) << name << " " << text;
        EXPECT_EQ(source.find("uint64_t range[") != std::string::npos, claim[0] == '1') << name << " " << text;
        for (const ProblemShape& dims : {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 1, 1, 200, 200, 40),
                                         attention_dims(1, 3, 3, 500, 500, 32)})
          expect_matches_reference_on(name, region, dims, 61, 0.5, knobs);
      }
  }
  // Items of at most qs query blocks (the qs knob), causal and not, pairs among them.
  for (const char* text : {"attention { scale = 0.125; causal = true }", "attention { scale = 0.2 }"})
    for (const char* qs : {"1", "3"})
      for (const char* byhead : {"2", "3"}) {
        const Region region = region_of(text);
        const std::map<std::string, std::string> knobs{{"qs", qs}, {"byhead", byhead}};
        const std::string q = qs;
        EXPECT_NE(emitted_source(name, region, knobs).find("  qs = " + q + " < QS ? " + q + " : QS;"),
                  std::string::npos)
            << name << " " << text << " qs=" << qs;
        for (const ProblemShape& dims : {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 1, 1, 200, 200, 40)})
          expect_matches_reference_on(name, region, dims, 62, 0.5, knobs);
      }
  // Items sized for qitems a thread (the qitems knob), causal pairs and not.
  for (const char* text : {"attention { scale = 0.125; causal = true }", "attention { scale = 0.2 }"})
    for (const char* qitems : {"1", "7"}) {
      const Region region = region_of(text);
      const std::map<std::string, std::string> knobs{{"qitems", qitems}, {"byhead", "3"}};
      EXPECT_NE(emitted_source(name, region, knobs).find(" / (" + std::string(qitems) + " * nthreads);"),
                std::string::npos)
          << name << " " << text << " qitems=" << qitems;
      for (const ProblemShape& dims : {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 3, 3, 500, 500, 32)})
        expect_matches_reference_on(name, region, dims, 63, 0.5, knobs);
    }
}

// Non-causal query blocks claimed from per-thread ranges (claim = 1; 2, the default: while a
// head's K and V fit in half of the L2, the host's or a 1 KiB one, which no head here fits) or
// from one shared counter (claim = 0): the emitted claim is the knob's, and each matches the
// reference on lane `name` on every thread and on one (serial: the calling thread owns the
// first range and must take every other range's blocks from its back), over heads of many
// blocks, one head of ragged blocks, GQA and 16-bit storage. Causal items use ranges only in
// pairs (byhead = 3, expect_causal_item_orders).
inline void expect_query_block_claims(std::string_view name) {
  const std::vector<std::map<std::string, std::string>> claims = {
      {{"claim", "0"}}, {{"claim", "1"}}, {{"claim", "2"}}, {{"claim", "2"}, {"l2", "1"}}};
  for (const char* text : {"attention { scale = 0.125 }", "attention { scale = 0.3; storage = bf16 }"}) {
    const Region region = region_of(text);
    for (const auto& claim : claims)
      for (const char* serial : {"0", "1073741824"}) {
        auto knobs = claim;
        knobs["serial"] = serial;
        const std::string source = emitted_source(name, region, knobs), c = claim.at("claim");
        const bool tiny = claim.count("l2") != 0;
        EXPECT_EQ(source.find("uint64_t range[") != std::string::npos, c != "0")
            << name << " " << text << " claim=" << c;
        EXPECT_EQ(source.find("const int nr = (double)(") != std::string::npos, c == "2")
            << name << " " << text << " claim=" << c;
        EXPECT_EQ(source.find(") <= 512.0 && ") != std::string::npos, tiny) << name << " " << text << " claim=" << c;
        for (const ProblemShape& dims : {attention_dims(2, 4, 2, 150, 150, 64), attention_dims(1, 1, 1, 200, 77, 40),
                                         attention_dims(1, 8, 8, 37, 300, 128)})
          expect_matches_reference_on(name, region, dims, 63, 0.5, knobs);
      }
  }
  // (Host-independent: the AMX lane's causal default is pairs on 16 CPUs or more.)
  const Region causal = region_of("attention { causal = true }");
  EXPECT_EQ(emitted_source(name, causal, {{"byhead", "0"}}).find("uint64_t range["), std::string::npos) << name;
  EXPECT_NE(emitted_source(name, causal, {{"byhead", "3"}}).find("uint64_t range["), std::string::npos) << name;
}

// The trace knob (Tuning::trace) adds cycle counts to attention's flash loop on lane `name`
// and nothing else: without it no rdtsc is emitted; with it the items' results still match the
// reference, causal and not, on every thread and on one.
inline void expect_attention_trace(std::string_view name) {
  for (const char* text : {"attention { scale = 0.125 }", "attention { scale = 0.125; causal = true }"}) {
    const Region region = region_of(text);
    EXPECT_EQ(emitted_source(name, region, {}).find("rdtsc"), std::string::npos) << name << " " << text;
    EXPECT_NE(emitted_source(name, region, {{"trace", "1"}}).find("__builtin_ia32_rdtsc() - tr0"), std::string::npos)
        << name << " " << text;
    for (const char* serial : {"0", "1073741824"})
      expect_matches_reference_on(name, region, attention_dims(2, 4, 2, 150, 150, 64), 64, 0.5,
                                  {{"trace", "1"}, {"serial", serial}});
  }
}

// Attention calls with at most `fq` (default 8) query rows per head take lane `name`'s
// few-query path: the rows of every query head sharing a KV head together (GQA), K and V read
// in place, the keys split across threads when the items are few and the splits' softmax
// states merged. Every shape here has M <= 8: ragged D and Dv (partial vectors), one key, key
// blocks (256) and splits, causal (a row per item), Q or K transposed, 16-bit storage, negative
// and zero scales (the max of scale * s is scale times the scores' min when scale < 0). The path
// is in the kernels that can take it, behind its row bound, and nowhere else; the oracle
// verifies it.
inline void expect_few_query_rows(std::string_view name) {
  const auto check = [&](const Region& region, const ProblemShape& dims, std::uint64_t seed,
                         std::map<std::string, std::string> knobs = {}) {
    expect_matches_reference_on(name, region, dims, seed, 1.0, std::move(knobs));
  };
  const std::map<std::string, std::string> one_thread = {{"serial", "1073741824"}};
  for (bool causal : {false, true}) {
    const Region region =
        region_of(std::string("attention { scale = 0.125; causal = ") + (causal ? "true" : "false") + " }");
    for (std::int64_t m : {1, 3, 4, 7}) {
      check(region, attention_dims(0, 1, 1, m, 3000, 64), 40); // one head: split keys
      check(region, attention_dims(0, 1, 1, m, 3000, 64), 40, one_thread);
      check(region, attention_dims(2, 8, 2, m, 300, 17, 33), 41); // GQA, ragged D, Dv
      check(region, attention_dims(1, 4, 4, m, 1, 128), 42);      // one key
      check(region, attention_dims(1, 3, 1, m, 257, 130, 70), 43);
    }
  }
  check(region_of("attention { scale = 0.3; q_transposed = true }"), attention_dims(1, 4, 2, 2, 500, 48), 44);
  // K stored transposed: key chunks of one, two and four rows' items, keys past a chunk's end
  // (3000, 257, 5: partial vectors), ragged D, GQA, causal, 16-bit.
  for (const char* text : {"attention { scale = 0.125; k_transposed = true }",
                           "attention { scale = 0.125; k_transposed = true; causal = true }",
                           "attention { scale = 0.2; k_transposed = true; q_transposed = true; storage = bf16 }"}) {
    const Region kt = region_of(text);
    check(kt, attention_dims(0, 1, 1, 1, 3000, 64), 50);
    check(kt, attention_dims(2, 8, 2, 3, 257, 17, 33), 51);
    check(kt, attention_dims(1, 2, 1, 1, 5, 40), 52);
    check(kt, attention_dims(1, 6, 3, 7, 700, 128), 53);
  }
  for (const char* text : {"attention { scale = -0.3 }", "attention { scale = -0.3; causal = true }",
                           "attention { scale = -0.2; k_transposed = true }", "attention { scale = 0 }"}) {
    check(region_of(text), attention_dims(0, 2, 2, 1, 600, 64), 45);
    check(region_of(text), attention_dims(1, 4, 2, 5, 3000, 40), 54); // split keys, GQA
  }
  // 16-bit K and V widen as they load (exactly: the reference rounds to storage first).
  for (const char* storage : {"bf16", "f16"})
    for (bool causal : {false, true}) {
      const Region r16 = region_of(std::string("attention { scale = 0.125; storage = ") + storage +
                                   "; causal = " + (causal ? "true" : "false") + " }");
      check(r16, attention_dims(2, 8, 2, 3, 700, 41, 75), 48); // GQA, ragged D, Dv
      check(r16, attention_dims(0, 1, 1, 1, 3000, 128), 49);   // split keys
    }
  const auto source = [&](const std::string& text, std::map<std::string, std::string> knobs) {
    EmitOptions o;
    o.options = std::move(knobs);
    auto src = x86_candidate(RegionKind::attention, name)->emit(region_of(text), o);
    EXPECT_TRUE(src.ok()) << src.error().str();
    return src.ok() ? src->source : std::string();
  };
  EXPECT_NE(source("attention { scale = 0.5 }", {}).find("if (M <= 8)"), std::string::npos);
  EXPECT_NE(source("attention { scale = 0.5 }", {{"fq", "9"}}).find("if (M <= 9)"), std::string::npos);
  EXPECT_EQ(source("attention { scale = 0.5 }", {{"fq", "0"}}).find("fusor_attention_few("), std::string::npos);
  EXPECT_NE(source("attention { scale = 0.5; k_transposed = true }", {}).find("K stored transposed, [D][Nk]"),
            std::string::npos);
  EXPECT_NE(source("attention { scale = 0.5; storage = bf16 }", {}).find("fusor_attention_few("), std::string::npos);
  EXPECT_NE(source("attention { scale = -0.5 }", {}).find("fusor_attention_few("), std::string::npos);
  expect_verified_on(name, region_of("attention { scale = 0.125 }"), {{"fq", "64"}});
  expect_verified_on(name, region_of("attention { scale = 0.125; causal = true }"), {{"fq", "64"}});
  expect_verified_on(name, region_of("attention { scale = 0.125; storage = f16 }"), {{"fq", "64"}});
  expect_verified_on(name, region_of("attention { scale = 0.125; k_transposed = true }"), {{"fq", "64"}});
}

// NaN and infinities reach lane `name`'s few-query outputs as they reach its flash loop's: a
// NaN in one key's V row poisons every row that sees that key, and only those; a row whose
// every score is NaN is NaN, through the key splits' merge too.
inline void expect_few_query_special_values(std::string_view name) {
  const Region region = region_of("attention { scale = 0.25; causal = true }");
  const std::int64_t m = 4, nk = 600, nan_key = 2;
  auto operands = make_operands(region, attention_dims(0, 1, 1, m, nk, 16), 46, 1.0);
  for (std::int64_t c = 0; c < 16; ++c) operands[2].data[nan_key * 16 + c] = NAN;
  auto ref = evaluate_reference(region, operands);
  ASSERT_TRUE(ref.ok()) << ref.error().str();
  for (const char* fq : {"4", "0"}) {
    auto out = execute_on_target(x86(), region, operands, lane_options_on(name, RegionKind::attention, {{"fq", fq}}));
    ASSERT_TRUE(out.ok()) << out.error().str();
    EXPECT_TRUE(all_close(out->output, *ref)) << name << " fq=" << fq;
    for (std::int64_t i = 0; i < m; ++i)
      EXPECT_EQ(std::isnan(out->output.data[i * 16]), i >= nan_key) << name << " fq=" << fq << ", query " << i;
  }
  const Region plain = region_of("attention { scale = 0.25 }");
  auto ops2 = make_operands(plain, attention_dims(0, 1, 1, 1, 3000, 16), 47, 1.0);
  ops2[0].data[3] = NAN;
  auto ref2 = evaluate_reference(plain, ops2);
  ASSERT_TRUE(ref2.ok());
  auto out2 = execute_on_target(x86(), plain, ops2, lane_options_on(name, RegionKind::attention));
  ASSERT_TRUE(out2.ok()) << out2.error().str();
  EXPECT_TRUE(all_close(out2->output, *ref2));
  EXPECT_TRUE(std::isnan(out2->output.data[0]));
}

// Softmax rows run e^(x - max) as 2^(x·log2 e - max·log2 e) on lane `name`: rows whose maximum
// is near FLT_MAX (max·log2 e would overflow), 2^121, just below 2^120, an infinity (the
// row is NaN, as e^(inf - inf) in the reference) and far below zero match the reference,
// staged (residual) or read in place.
inline void expect_softmax_row_extremes(std::string_view name) {
  for (const char* res : {"false", "true"}) {
    const Region region =
        region_of(std::string("norm_chain { norm = softmax; add_residual = ") + res + "; weight = true; bias = true }");
    const std::int64_t n = 37;
    auto operands = make_operands(region, elementwise({6, n}), 48, 1.0);
    auto& x = operands[0].data;
    for (std::int64_t j = 0; j < n; ++j) {
      x[1 * n + j] = -3e38f;
      x[2 * n + j] = 0x1p121f - 0x1p97f * static_cast<float>(j % 3);
      x[3 * n + j] = 1e36f - 1e29f * static_cast<float>(j);
      x[5 * n + j] = -1e30f - 1e23f * static_cast<float>(j % 5);
    }
    x[1 * n + 0] = x[1 * n + 5] = 3e38f;
    x[1 * n + 7] = 2e38f;
    x[4 * n + 9] = INFINITY;
    auto ref = evaluate_reference(region, operands);
    ASSERT_TRUE(ref.ok()) << ref.error().str();
    auto out = execute_on_target(x86(), region, operands, lane_options_on(name, RegionKind::norm_chain));
    ASSERT_TRUE(out.ok()) << out.error().str();
    EXPECT_TRUE(all_close(out->output, *ref)) << name << " residual " << res;
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(std::isnan(out->output.data[4 * n + j])) << name << " residual " << res << ", column " << j;
      EXPECT_FALSE(std::isnan(out->output.data[1 * n + j])) << name << " residual " << res << ", column " << j;
    }
  }
}

// Attention scores of any magnitude: with Q and K scaled by 1e5 the scores reach 1e10, past
// where scale·log2 e times a rounded maximum shifts every exponent of a row out of 2^x's range
// (the flash loop's and the few-query path's states kept that product until run av, and such
// rows came out NaN); the reference's softmax is then one-hot on each row's maximum. Both
// signs of the scale, causal or not, flash loop (64 rows) and few-query path (1 and 3 rows).
inline void expect_attention_huge_scores(std::string_view name) {
  for (const char* text :
       {"attention { scale = 0.125 }", "attention { scale = 0.125; causal = true }", "attention { scale = -0.125 }"}) {
    const Region region = region_of(text);
    for (const std::int64_t m : {64, 1, 3}) {
      auto operands = make_operands(region, attention_dims(0, 1, 1, m, 200, 64), 50, 1.0);
      for (float& q : operands[0].data) q *= 1e5f;
      for (float& k : operands[1].data) k *= 1e5f;
      auto ref = evaluate_reference(region, operands);
      ASSERT_TRUE(ref.ok()) << ref.error().str();
      auto out = execute_on_target(x86(), region, operands, lane_options_on(name, RegionKind::attention));
      ASSERT_TRUE(out.ok()) << out.error().str();
      EXPECT_TRUE(all_close(out->output, *ref)) << name << " " << text << ", " << m << " rows";
    }
  }
}

} // namespace fusor::testing
