// The targets dashboard (docs/targets.md): issue 8's performance targets, read from the
// committed bench results (bench/results/cpu-*.json) and rendered as Markdown, so the page
// says what the files say and CI can check that it still does.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusor/error.hpp"

namespace fusor::results {

// One target: the cases it covers, the metric read from each case and the bar it must reach.
struct Target {
  std::string column;             // heading in the dashboard
  std::vector<std::string> cases; // bench case names
  std::string metric;             // case field: onednn_ratio, fraction_of_copy_bw
  double bar = 0;                 // met when metric >= bar
};
const std::vector<Target>& targets();

// The values of one target over one row's runs and cases.
struct Span {
  double lo = 0, hi = 0;
  int met = 0, total = 0;
};

// One block of runs in one results file ("runs", "cases" or "avx2_runs").
struct Row {
  std::string file;    // file name, e.g. cpu-2026-12-02-aj-lent.json
  std::string block;   // the key the runs sit under
  std::string run_id;  // the session's letters (aj), or "" when the name has none
  std::string date;    // 2026-12-02
  std::string machine; // cpu model, ISA class and threads: "AMD EPYC, AVX-512, 2 threads"
  std::string lanes;   // lanes the cases ran on, comma-separated ("-" when not recorded)
  // The threads whose AMX tiles the bench's probe found at full rate, before and after each
  // run's cases, lowest-highest: "3–4 of 16" ("" where no probe was recorded).
  std::string tiles;
  int runs = 0;
  std::map<std::string, std::vector<double>> cases; // metric values by case name
  // Per value in `cases`: the upper quartile of that run's interleaved rounds' ratios
  // (`<metric>_q3`, recorded since run as), NaN where the run did not record it.
  std::map<std::string, std::vector<double>> round_q3;
  // Per value in `cases`: the ratio fusor would have read at the host's FMA peak in that run
  // (`<metric>_at_peak`), NaN where not recorded or where fusor's time was the x86_amx lane's,
  // which the FMA peak does not bound.
  std::map<std::string, std::vector<double>> at_peak;
};

// A target's values over a row's cases (none when the row holds none of them).
std::optional<Span> span_of(const Row& row, const Target& target);

// The rows of one parsed results file (none when it holds no runs of the listed cases).
Expected<std::vector<Row>> rows_of(const std::string& file, const nlohmann::json& doc);
// Every cpu-*.json under `dir`, newest session first.
Expected<std::vector<Row>> read_results(const std::filesystem::path& dir);
std::string render(const std::vector<Row>& rows);

} // namespace fusor::results
