#include "dashboard.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace fusor::results {

const std::vector<Target>& targets() {
  // Issue 8, "Must be true when done" item 4; the cases are the bench's listed shapes.
  static const std::vector<Target> kTargets = {
      {"Fused GEMM ≥ 0.95× oneDNN",
       {"gemm_bias_gelu_512x2048x768", "gemm_bias_gelu_1024x1024x1024", "gemm_bias_gelu_2048x2048x2048",
        "gemm_bias_gelu_128x3072x768", "gemm_bias_residual_512x2048x768", "gemm_bias_residual_1024x1024x1024"},
       "onednn_ratio",
       0.95},
      {"Gated ≥ 1.2× oneDNN", {"gated_silu_512x768x2048"}, "onednn_ratio", 1.2},
      {"Causal attention ≥ 2× unfused",
       {"attention_causal_s512_d64", "attention_causal_s512_d128", "attention_causal_s2048_d64",
        "attention_causal_s2048_d128"},
       "onednn_ratio",
       2.0},
      {"Attention S = 512 ≥ 2× unfused", {"attention_s512_d64", "attention_s512_d128"}, "onednn_ratio", 2.0},
      {"Attention S = 2048 ≥ 2× unfused", {"attention_s2048_d64", "attention_s2048_d128"}, "onednn_ratio", 2.0},
      {"Norm chains ≥ 0.8× copy bandwidth",
       {"rmsnorm_residual_weight_4096x4096", "layer_norm_weight_bias_4096x4096"},
       "fraction_of_copy_bw",
       0.8},
  };
  return kTargets;
}

namespace {

Error bad(const std::string& file, const std::string& what) {
  return make_error(ErrorCode::parse, "results file " + file + ": " + what);
}

// "Intel(R) Xeon(R) Processor" + "... amx | Intel(R) ... (family 6 model 207)" + threads 16 ->
// "Intel Xeon (family 6 model 207), AMX, 16 threads". The thread count keeps apart the runs of
// one CPU on a two-core VM and on the lent host's 16 cores.
std::string machine_label(const nlohmann::json& machine) {
  const auto text = [&](const char* key) {
    const auto it = machine.find(key);
    return it != machine.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string model = text("cpu_model").empty() ? "unknown CPU" : text("cpu_model");
  for (const std::string noise : {"(R)", "(TM)", " Processor"})
    for (auto at = model.find(noise); at != std::string::npos; at = model.find(noise)) model.erase(at, noise.size());
  const std::string isa = text("isa");
  std::smatch family;
  static const std::regex kFamily(R"(\((family \d+ model \d+)\))");
  if (std::regex_search(isa, family, kFamily)) model += " (" + family[1].str() + ")";
  const std::string flags = " " + isa.substr(0, isa.find('|')) + " ";
  const char* cls = flags.find(" amx ") != std::string::npos       ? "AMX"
                    : flags.find(" avx512f ") != std::string::npos ? "AVX-512"
                                                                   : "AVX2";
  const auto threads = machine.find("threads");
  const std::string on = threads != machine.end() && threads->is_number_integer()
                             ? ", " + std::to_string(threads->get<std::int64_t>()) + " threads"
                             : std::string();
  return model + ", " + cls + on;
}

// The session letters and date of a results file name: cpu-2026-12-02-aj-lent.json.
void name_parts(const std::string& file, Row& row) {
  static const std::regex kName(R"(^cpu-(\d{4}-\d{2}-\d{2})(?:-([a-z]{1,2}))?(?:[-.].*)?$)");
  std::smatch m;
  if (std::regex_match(file, m, kName)) {
    row.date = m[1].str();
    row.run_id = m[2].matched ? m[2].str() : "";
  }
}

// The runs under `key`: a list of cases (one run), a list of such lists, or a list of
// {"cases": [...], "machine": {...}} objects.
struct Runs {
  std::vector<const nlohmann::json*> runs;
  std::vector<const nlohmann::json*> machines = {}; // every run's that records one
};
Runs runs_under(const nlohmann::json& v) {
  Runs out;
  if (!v.is_array() || v.empty()) return out;
  if (v.front().is_object() && v.front().contains("case")) {
    out.runs.push_back(&v);
    return out;
  }
  for (const auto& run : v) {
    if (run.is_array()) {
      out.runs.push_back(&run);
    } else if (run.is_object() && run.contains("cases") && run["cases"].is_array()) {
      out.runs.push_back(&run["cases"]);
      if (run.contains("machine")) out.machines.push_back(&run["machine"]);
    }
  }
  return out;
}

// A tile product (TDPBF16PS, 16 cycles at full rate: 7-8 ns at these hosts' 2-2.3 GHz) in at
// most this many ns is at full rate; the shared hosts' slowed tiles take 18-28.
constexpr double kFullRateNs = 12.0;

// "lo–hi of n": how many threads each tile probe (before and after a run's cases) of these
// machine records found at full rate; "" where none was recorded.
std::string tiles_at_full_rate(const std::vector<const nlohmann::json*>& machines) {
  int lo = -1, hi = -1;
  size_t threads = 0;
  for (const nlohmann::json* m : machines)
    for (const char* key : {"amx_tile_ns_per_product", "amx_tile_ns_per_product_after"}) {
      const auto it = m->find(key);
      if (it == m->end() || !it->is_array() || it->empty()) continue;
      int full = 0;
      for (const auto& ns : *it) full += ns.is_number() && ns.get<double>() <= kFullRateNs;
      lo = lo < 0 ? full : std::min(lo, full);
      hi = std::max(hi, full);
      threads = std::max(threads, it->size());
    }
  if (lo < 0) return "";
  return (lo == hi ? std::to_string(lo) : std::to_string(lo) + "–" + std::to_string(hi)) + " of " +
         std::to_string(threads);
}

std::string two(double v) { return fmt::format("{:.2f}", v); }

// Two decimals, or three rounded down where two would round a value below the bar up to it
// (0.7996 of 0.8 reads 0.799).
std::string value(double v, double bar) {
  return v < bar && std::stod(two(v)) >= bar ? fmt::format("{:.3f}", std::floor(v * 1000) / 1000) : two(v);
}

std::string range(double lo, double hi, double bar) {
  const std::string a = value(lo, bar), b = value(hi, bar);
  return a == b ? a : a + "–" + b;
}

std::string span_cell(const Span& s, double bar) {
  if (s.total == 0) return "";
  const std::string verdict = s.met == s.total ? "met" : (s.met == 0 ? "missed" : "mixed");
  return range(s.lo, s.hi, bar) + " " + verdict + " " + std::to_string(s.met) + "/" + std::to_string(s.total);
}

// The mark of a case below its bar in some run: "~" when the rounds of every such run
// reached the bar (a swing of the host), "✗" otherwise (a loss, or spread not recorded).
std::string below_mark(const std::vector<double>& values, const std::vector<double>& q3, double bar) {
  bool swings = true;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] < bar) swings = swings && i < q3.size() && q3[i] >= bar; // NaN compares false
  return swings ? " ~" : " ✗";
}

// Where every run that left a case below its bar had the FMA peak as its ceiling and even
// that peak would have left it below (the run's `_at_peak` ratio under the bar), " peak X"
// with X the highest such ceiling: the lane could not have met the bar there.
std::string ceiling_mark(const std::vector<double>& values, const std::vector<double>& at_peak, double bar) {
  double ceiling = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] >= bar) continue;
    if (!(i < at_peak.size() && at_peak[i] < bar)) return ""; // NaN compares false
    ceiling = std::max(ceiling, at_peak[i]);
  }
  return " peak " + value(ceiling, bar);
}

const Target* target_of(const std::string& name) {
  for (const Target& t : targets())
    if (std::find(t.cases.begin(), t.cases.end(), name) != t.cases.end()) return &t;
  return nullptr;
}

} // namespace

std::optional<Span> span_of(const Row& row, const Target& target) {
  std::optional<Span> span;
  for (const std::string& name : target.cases) {
    const auto it = row.cases.find(name);
    if (it == row.cases.end()) continue;
    for (const double v : it->second) {
      if (!span) span = Span{v, v, 0, 0};
      span->lo = std::min(span->lo, v);
      span->hi = std::max(span->hi, v);
      span->met += v >= target.bar;
      ++span->total;
    }
  }
  return span;
}

Expected<std::vector<Row>> rows_of(const std::string& file, const nlohmann::json& doc) {
  if (!doc.is_object()) return bad(file, "the top level is not a JSON object");
  std::vector<Row> rows;
  for (const char* key : {"runs", "cases", "avx2_runs"}) {
    if (!doc.contains(key)) continue;
    const Runs runs = runs_under(doc[key]);
    Row row;
    row.file = file;
    row.block = key;
    name_parts(file, row);
    // (the first run's machine, else the file's)
    const nlohmann::json* machine =
        !runs.machines.empty() ? runs.machines.front() : (doc.contains("machine") ? &doc["machine"] : nullptr);
    if (machine && !machine->is_object()) return bad(file, "\"machine\" is not an object");
    row.machine = machine ? machine_label(*machine) : "unknown machine";
    row.tiles = tiles_at_full_rate(runs.machines.empty() && machine ? std::vector{machine} : runs.machines);
    std::set<std::string> lanes;
    for (const nlohmann::json* run : runs.runs) {
      bool any = false;
      for (const auto& c : *run) {
        if (!c.is_object() || !c.contains("case") || !c["case"].is_string())
          return bad(file, std::string("a case under \"") + key + "\" has no \"case\" name");
        const std::string name = c["case"];
        const Target* t = target_of(name);
        if (!t || !c.contains(t->metric)) continue;
        // A tuning run's case (fusor-bench --knob) is one side of an A/B, not the defaults'.
        if (const auto k = c.find("knobs"); k != c.end() && !k->empty()) continue;
        if (!c[t->metric].is_number()) return bad(file, "case " + name + ": \"" + t->metric + "\" is not a number");
        row.cases[name].push_back(c[t->metric].get<double>());
        const std::string q3 = t->metric + "_q3";
        row.round_q3[name].push_back(c.contains(q3) && c[q3].is_number() ? c[q3].get<double>() : NAN);
        const std::string lane = c.contains("lane") && c["lane"].is_string() ? c["lane"].get<std::string>() : "";
        const std::string peak = t->metric + "_at_peak";
        row.at_peak[name].push_back(lane != "x86_amx" && c.contains(peak) && c[peak].is_number() ? c[peak].get<double>()
                                                                                                 : NAN);
        if (!lane.empty()) lanes.insert(lane);
        any = true;
      }
      row.runs += any;
    }
    if (row.runs == 0) continue;
    for (const auto& l : lanes) row.lanes += (row.lanes.empty() ? "" : ", ") + l;
    if (row.lanes.empty()) row.lanes = "-";
    rows.push_back(std::move(row));
  }
  return rows;
}

Expected<std::vector<Row>> read_results(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return make_error(ErrorCode::io_error, "results directory " + dir.string() + " does not exist");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.rfind("cpu-", 0) == 0 && e.path().extension() == ".json") files.push_back(e.path());
  }
  if (ec) return make_error(ErrorCode::io_error, "cannot list " + dir.string() + ": " + ec.message());
  std::vector<Row> rows;
  for (const auto& path : files) {
    std::ifstream in(path);
    if (!in) return make_error(ErrorCode::io_error, "cannot read results file " + path.string());
    nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return bad(path.filename().string(), "not valid JSON");
    FUSOR_TRY_ASSIGN(auto file_rows, rows_of(path.filename().string(), doc));
    for (auto& r : file_rows) rows.push_back(std::move(r));
  }
  // Newest session first: by date, then by the letters (z before aa), then by name.
  const auto key = [](const Row& r) { return std::tuple(r.date, r.run_id.size(), r.run_id); };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    if (key(a) != key(b)) return key(a) > key(b);
    return a.file < b.file;
  });
  return rows;
}

std::string render(const std::vector<Row>& rows) {
  std::ostringstream o;
  o << "# CPU performance targets, from the committed results\n\n";
  o << "<!-- Generated by fusor-results from bench/results/cpu-*.json (`make dashboard`); do not edit.\n"
       "     The DashboardMatchesResults test fails when this page and the results disagree. -->\n\n";
  o << "Issue 8's targets, each a ratio measured within one `fusor-bench` run: a peer's time over\n"
       "fusor's (`onednn_ratio`), or for norm chains the share of the copy peer's bandwidth\n"
       "(`fraction_of_copy_bw`). Why a target is missed where it is: docs/performance.md\n"
       "(\"Targets, and why the missed ones are missed\").\n\n";
  o << "| Target | Cases | Bar |\n|---|---|---|\n";
  for (const Target& t : targets()) {
    std::string cases;
    for (const auto& c : t.cases) cases += (cases.empty() ? "`" : ", `") + c + "`";
    o << "| " << t.column << " | " << cases << " | " << two(t.bar) << " |\n";
  }
  o << "\n## Every results file, newest first\n\n";
  o << "A cell gives the lowest and highest value over the block's runs and the target's cases,\n"
       "then `met` (all reach the bar), `mixed` or `missed` (none do), and how many reach it.\n"
       "Blocks: `runs` (`fusor-bench all`), `avx2_runs` (the x86_avx2 lane against peers\n"
       "restricted to AVX2), `cases` (a single run); other blocks (A/B runs) and cases run with\n"
       "`--knob` are not read. Full-rate tiles: of the bench's threads, how many the AMX tile probe\n"
       "found at full rate (a product in 12 ns or less) before and after each run's cases, lowest\n"
       "and highest; the shared hosts slow the tiles to a third on some threads, and the x86_amx\n"
       "lane's ratios follow.\n\n";
  o << "| Results | Block | Runs | Machine | Lanes | Full-rate tiles";
  for (const Target& t : targets()) o << " | " << t.column;
  o << " |\n|---|---|---|---|---|---";
  for (size_t i = 0; i < targets().size(); ++i) o << "|---";
  o << "|\n";
  for (const Row& r : rows) {
    o << "| " << r.file << " | " << r.block << " | " << r.runs << " | " << r.machine << " | " << r.lanes << " | "
      << r.tiles;
    for (const Target& t : targets()) {
      const std::optional<Span> span = span_of(r, t);
      o << " | " << (span ? span_cell(*span, t.bar) : "");
    }
    o << " |\n";
  }
  // The newest block of each machine and lane set whose lanes were recorded, case by case.
  std::vector<const Row*> latest;
  std::set<std::string> seen;
  for (const Row& r : rows)
    if (r.lanes != "-" && seen.insert(r.machine + " | " + r.lanes).second) latest.push_back(&r);
  o << "\n## The newest results of each machine and lane set, case by case\n\n";
  o << "Lowest–highest over the block's runs; ✗ marks a case below its bar in at least one run,\n"
       "~ instead where each such run's rounds reached the bar (the upper quartile of the ratios of\n"
       "its interleaved rounds, recorded since run as): a swing of the host, not a settled loss.\n"
       "`peak X` follows where even the host's FMA peak could not have met the bar: X is the\n"
       "ratio fusor would have read at that peak in the same run (`onednn_ratio_at_peak`, the\n"
       "highest over the runs below the bar; not for the x86_amx lane, which the FMA peak does\n"
       "not bound), so the miss is the vector lanes' ceiling on that host, not their kernels'.\n\n";
  o << "| Case | Bar";
  for (const Row* r : latest)
    o << " | " << r->machine << "; " << r->lanes << " (" << r->file << ", " << r->block << ")";
  o << " |\n|---|---";
  for (size_t i = 0; i < latest.size(); ++i) o << "|---";
  o << "|\n";
  for (const Target& t : targets())
    for (const auto& c : t.cases) {
      o << "| `" << c << "` | " << two(t.bar);
      for (const Row* r : latest) {
        const auto it = r->cases.find(c);
        if (it == r->cases.end()) {
          o << " | ";
          continue;
        }
        const auto [lo, hi] = std::minmax_element(it->second.begin(), it->second.end());
        // rows_of records a q3 and a ceiling (or NaN) beside every value, so the case has both lists.
        o << " | " << range(*lo, *hi, t.bar);
        if (*lo < t.bar)
          o << below_mark(it->second, r->round_q3.at(c), t.bar) << ceiling_mark(it->second, r->at_peak.at(c), t.bar);
      }
      o << " |\n";
    }
  return o.str();
}

} // namespace fusor::results
