// fusor-results' reading of bench results: every layout the committed files use, the
// ranges and verdicts per target, newest-first order, and errors that name the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "dashboard.hpp"

namespace fusor::results {
namespace {

using nlohmann::json;

json gemm_case(double ratio, const char* lane = "x86_avx512") {
  return {{"case", "gemm_bias_gelu_1024x1024x1024"}, {"fusor_ms", 5.0}, {"onednn_ratio", ratio}, {"lane", lane}};
}

const json kZen5 = {{"cpu_model", "AMD EPYC"},
                    {"isa", "x86_64 avx2 fma avx512f avx512bw | AMD EPYC (family 26 model 2)"}};
const json kAmx = {{"cpu_model", "Intel(R) Xeon(R) Processor"},
                   {"isa", "x86_64 avx2 fma avx512f amx | Intel(R) Xeon(R) Processor (family 6 model 207)"}};

// The page of one results file holding these runs on Zen 5.
std::string page_of(const json& runs) {
  auto rows = rows_of("cpu-2026-12-04-as-dev.json", {{"machine", kZen5}, {"runs", runs}});
  EXPECT_TRUE(rows.ok());
  return rows.ok() ? render(*rows) : std::string();
}

TEST(ResultsDashboard, ReadsEveryRunLayoutWithRangesAndVerdicts) {
  // runs as {cases, machine} objects (fusor-bench --save), plus an AVX2 block of plain lists.
  const json doc = {
      {"machine", kZen5},
      {"runs",
       {{{"cases",
          {gemm_case(0.97),
           gemm_case(1.05),
           {{"case", "gated_silu_512x768x2048"}, {"onednn_ratio", 1.25}, {"lane", "x86_avx512"}},
           {{"case", "rmsnorm_residual_weight_4096x4096"}, {"fraction_of_copy_bw", 0.79}, {"copy_ratio", 0.5}},
           {{"case", "not_a_target_case"}, {"onednn_ratio", 0.1}},
           // One side of an A/B (fusor-bench --knob): not the defaults', so not counted.
           {{"case", "gemm_bias_gelu_1024x1024x1024"}, {"onednn_ratio", 0.5}, {"knobs", {{"mr", "8"}}}}}},
         {"machine", kAmx}},
        {{"cases", {gemm_case(0.93, "x86_amx"), {{"case", "gated_silu_512x768x2048"}, {"onednn_ratio", 1.1}}}}}}},
      {"avx2_runs", {json::array({gemm_case(0.99, "x86_avx2")})}}};
  auto rows = rows_of("cpu-2026-12-03-ak-dev.json", doc);
  ASSERT_TRUE(rows.ok()) << rows.error().str();
  ASSERT_EQ(rows->size(), 2u);
  const Row& r = (*rows)[0];
  EXPECT_EQ(r.block, "runs");
  EXPECT_EQ(r.run_id, "ak");
  EXPECT_EQ(r.date, "2026-12-03");
  EXPECT_EQ(r.runs, 2);
  // A run's own machine wins over the file's.
  EXPECT_EQ(r.machine, "Intel Xeon (family 6 model 207), AMX");
  EXPECT_EQ(r.lanes, "x86_amx, x86_avx512");
  const Span gemm = span_of(r, targets()[0]).value();
  EXPECT_DOUBLE_EQ(gemm.lo, 0.93);
  EXPECT_DOUBLE_EQ(gemm.hi, 1.05);
  EXPECT_EQ(gemm.met, 2);
  EXPECT_EQ(gemm.total, 3);
  const Span gated = span_of(r, targets()[1]).value();
  EXPECT_EQ(gated.met, 1);
  EXPECT_EQ(gated.total, 2);
  // Norm chains are judged on the share of copy bandwidth, not the time ratio.
  const Span norm = span_of(r, targets().back()).value();
  EXPECT_DOUBLE_EQ(norm.lo, 0.79);
  EXPECT_EQ(norm.met, 0);
  EXPECT_EQ(r.cases.count("not_a_target_case"), 0u);

  const Row& avx2 = (*rows)[1];
  EXPECT_EQ(avx2.block, "avx2_runs");
  EXPECT_EQ(avx2.runs, 1);
  EXPECT_EQ(avx2.machine, "AMD EPYC (family 26 model 2), AVX-512");
  // A machine that records its threads is labelled with them.
  json on16 = kAmx;
  on16["threads"] = 16;
  auto lent = rows_of("cpu-2026-12-05-be-lent.json", {{"machine", on16}, {"runs", {{gemm_case(1.1)}}}});
  ASSERT_TRUE(lent.ok()) << lent.error().str();
  ASSERT_EQ(lent->size(), 1u);
  EXPECT_EQ((*lent)[0].machine, "Intel Xeon (family 6 model 207), AMX, 16 threads");
  EXPECT_EQ(avx2.lanes, "x86_avx2");

  const std::string page = render(*rows);
  EXPECT_NE(page.find("| 0.93–1.05 mixed 2/3 |"), std::string::npos) << page;
  EXPECT_NE(page.find("| 1.10–1.25 mixed 1/2 |"), std::string::npos) << page;
  EXPECT_NE(page.find("| 0.79 missed 0/1 |"), std::string::npos) << page;
  EXPECT_NE(page.find("| 0.99 met 1/1 |"), std::string::npos) << page;
  // Case by case: a case below its bar in any run is marked.
  EXPECT_NE(page.find("| `gemm_bias_gelu_1024x1024x1024` | 0.95 | 0.93–1.05 ✗ | 0.99 |"), std::string::npos) << page;
}

// The tile probes of a block's runs (before and after each run's cases): how many threads had
// their tiles at full rate (12 ns a product or less), lowest-highest; nothing without a probe.
TEST(ResultsDashboard, TilesAtFullRateFromTheProbes) {
  json a = kAmx, b = kAmx;
  a["amx_tile_ns_per_product"] = {7.1, 23.0, 7.3, 24.5};
  a["amx_tile_ns_per_product_after"] = {7.4, 8.5, 7.2, 12.0};
  b["amx_tile_ns_per_product"] = {22.0, 26.1, 7.0, 24.0};
  auto rows = rows_of(
      "cpu-2026-12-06-bm-lent.json",
      {{"machine", a},
       {"runs", {{{"cases", {gemm_case(1.0)}}, {"machine", a}}, {{"cases", {gemm_case(1.1)}}, {"machine", b}}}}});
  ASSERT_TRUE(rows.ok()) << rows.error().str();
  EXPECT_EQ((*rows)[0].tiles, "1–4 of 4");
  // The file's machine serves runs that record none.
  rows = rows_of("cpu-2026-12-06-bm-lent.json", {{"machine", b}, {"runs", {{gemm_case(1.0)}}}});
  ASSERT_TRUE(rows.ok()) << rows.error().str();
  EXPECT_EQ((*rows)[0].tiles, "1 of 4");
  EXPECT_NE(render(*rows).find("| x86_avx512 | 1 of 4 | 1.00 met 1/1 |"), std::string::npos) << render(*rows);
  rows = rows_of("cpu-2026-12-06-bm-dev.json", {{"machine", kZen5}, {"runs", {{gemm_case(1.0)}}}});
  ASSERT_TRUE(rows.ok()) << rows.error().str();
  EXPECT_EQ((*rows)[0].tiles, "");
}

// A run that records its rounds' spread: a case under its bar whose rounds reached it is a
// swing (~), one whose rounds stayed under it, or that lacks the spread, a loss (✗).
TEST(ResultsDashboard, BelowTheBarWithinTheRoundsIsASwing) {
  const auto with_spread = [](double ratio, double q3) {
    json c = gemm_case(ratio);
    c["onednn_ratio_q1"] = ratio - 0.02;
    c["onednn_ratio_q3"] = q3;
    return c;
  };
  const std::string row = "| `gemm_bias_gelu_1024x1024x1024` | 0.95 | ";
  std::string page = page_of({{{"cases", {with_spread(0.94, 0.97)}}}, {{"cases", {with_spread(1.01, 1.05)}}}});
  EXPECT_NE(page.find(row + "0.94–1.01 ~ |"), std::string::npos) << page;
  page = page_of({{{"cases", {with_spread(0.94, 0.945)}}}, {{"cases", {with_spread(1.01, 1.05)}}}});
  EXPECT_NE(page.find(row + "0.94–1.01 ✗ |"), std::string::npos) << page;
  page = page_of({{{"cases", {with_spread(0.94, 0.97)}}}, {{"cases", {gemm_case(0.93)}}}});
  EXPECT_NE(page.find(row + "0.93–0.94 ✗ |"), std::string::npos) << page;
}

// A case below its bar where even the FMA peak would have left it there says so, with that
// ceiling; not where some such run's ceiling reached the bar, went unrecorded, or was the
// x86_amx lane's (the FMA peak does not bound the tiles).
TEST(ResultsDashboard, MissesBeyondTheFmaPeakShowTheCeiling) {
  const auto gated = [](double ratio, double at_peak, const char* lane = "x86_avx512") {
    json c = {{"case", "gated_silu_512x768x2048"}, {"onednn_ratio", ratio}, {"lane", lane}};
    if (at_peak > 0) c["onednn_ratio_at_peak"] = at_peak;
    return c;
  };
  const std::string row = "| `gated_silu_512x768x2048` | 1.20 | ";
  std::string page = page_of({{{"cases", {gated(1.06, 1.13)}}}, {{"cases", {gated(1.08, 1.16)}}}});
  EXPECT_NE(page.find(row + "1.06–1.08 ✗ peak 1.16 |"), std::string::npos) << page;
  // A run that met the bar needs no ceiling; the runs below it still do.
  page = page_of({{{"cases", {gated(1.06, 1.13)}}}, {{"cases", {gated(1.25, 1.30)}}}});
  EXPECT_NE(page.find(row + "1.06–1.25 ✗ peak 1.13 |"), std::string::npos) << page;
  for (const json& other : {gated(1.10, 1.25), gated(1.10, 0), gated(1.10, 0.9, "x86_amx")}) {
    page = page_of({{{"cases", {gated(1.06, 1.13)}}}, {{"cases", {other}}}});
    EXPECT_NE(page.find(row + "1.06–1.10 ✗ |"), std::string::npos) << other.dump() << "\n" << page;
  }
  // A ceiling a hair under the bar never reads as the bar.
  page = page_of({{{"cases", {gated(1.06, 1.1996)}}}});
  EXPECT_NE(page.find(row + "1.06 ✗ peak 1.199 |"), std::string::npos) << page;
}

TEST(ResultsDashboard, PlainCaseListsAndFilesWithoutTargetCases) {
  const json one_run = {{"machine", {{"cpu_model", "AMD EPYC"}, {"isa", "x86_64 avx2 fma | AMD EPYC"}}},
                        {"cases", {gemm_case(1.0)}}};
  auto rows = rows_of("cpu-2026-11-30.json", one_run);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].run_id, "");
  EXPECT_EQ((*rows)[0].machine, "AMD EPYC, AVX2");
  // A value just below its bar never reads as the bar.
  rows = rows_of("cpu-2026-11-30.json", {{"cases", {gemm_case(0.9496)}}});
  ASSERT_TRUE(rows.ok());
  EXPECT_NE(render(*rows).find("| 0.949 missed 0/1 |"), std::string::npos) << render(*rows);
  EXPECT_EQ((*rows)[0].machine, "unknown machine");
  // Fields of the wrong type name nothing they cannot: no exception escapes.
  rows =
      rows_of("cpu-2026-11-30.json", {{"machine", {{"cpu_model", 7}, {"isa", nullptr}}}, {"cases", {gemm_case(1.0)}}});
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ((*rows)[0].machine, "unknown CPU, AVX2");
  // A/B experiments keep their rows under other keys: no block.
  const json ab = {{"machine", kZen5}, {"gemm_ab_rows", {{{"case", "x"}, {"onednn_ratio", 1.0}}}}};
  rows = rows_of("cpu-2026-12-02-ad-lent-gemm-ab.json", ab);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->empty());
}

TEST(ResultsDashboard, MalformedFilesAreErrorsNamingThem) {
  auto rows = rows_of("cpu-x.json", json::array());
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.error().code, ErrorCode::parse);
  EXPECT_NE(rows.error().message.find("cpu-x.json"), std::string::npos);
  rows = rows_of("cpu-y.json", {{"cases", {{{"case", "gated_silu_512x768x2048"}, {"onednn_ratio", "fast"}}}}});
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.error().message.find("cpu-y.json"), std::string::npos);
  EXPECT_NE(rows.error().message.find("onednn_ratio"), std::string::npos);

  const auto dir = std::filesystem::temp_directory_path() / ("fusor-results-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cpu-2026-12-01-bad.json") << "{ not json";
  auto all = read_results(dir);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.error().message.find("cpu-2026-12-01-bad.json"), std::string::npos) << all.error().message;
  std::filesystem::remove_all(dir);
  all = read_results(dir);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.error().code, ErrorCode::io_error);
}

TEST(ResultsDashboard, NewestSessionFirst) {
  const auto dir = std::filesystem::temp_directory_path() / ("fusor-results-order-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const json doc = {{"machine", kZen5}, {"cases", {gemm_case(1.0)}}};
  for (const char* name : {"cpu-2026-12-02-z-lent.json", "cpu-2026-12-02-aa-dev.json", "cpu-2026-12-01-x-lent.json",
                           "cpu-2026-12-02-y-lent.json"})
    std::ofstream(dir / name) << doc.dump();
  std::ofstream(dir / "gpu-bench.jsonl") << "not read";
  auto rows = read_results(dir);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(rows.ok()) << rows.error().str();
  std::vector<std::string> order;
  for (const Row& r : *rows) order.push_back(r.file);
  EXPECT_EQ(order, (std::vector<std::string>{"cpu-2026-12-02-aa-dev.json", "cpu-2026-12-02-z-lent.json",
                                             "cpu-2026-12-02-y-lent.json", "cpu-2026-12-01-x-lent.json"}));
}

} // namespace
} // namespace fusor::results
