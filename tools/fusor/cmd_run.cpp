// `fusor run`: with no FILE, the bundled examples on deterministic inputs, as a table;
// with FILE, one region on the user's .npy inputs through the chosen target.
#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <optional>

#include "cli_common.hpp"
#include "commands.hpp"
#include "examples.hpp"
#include "fusor/npy.hpp"
#include "fusor/operand_gen.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"

namespace fusor::cli {
namespace {

struct RunOptions {
  std::string file;
  std::vector<std::string> inputs;
  std::string out;
  int region = 0; // 0: not given
  std::string target = "reference";
};

// Only the reference lane exists so far; the other names are reserved so scripts written
// against later versions get a clear "not built" rather than "unknown option value".
Status check_target(const std::string& target) {
  if (target == "reference") return {};
  return make_error(ErrorCode::runner_unavailable,
                    "target '" + target + "' is not built into this fusor yet; only --target reference runs");
}

// Times the reference evaluator; Expected has no empty state, hence the optional.
std::pair<Expected<Tensor>, double> evaluate_timed(const Region& region, std::span<const Tensor> operands) {
  std::optional<Expected<Tensor>> result;
  const double ms = time_ms([&] { result.emplace(evaluate_reference(region, operands)); });
  return {std::move(*result), ms};
}

int run_file(const RunOptions& o) {
  auto region = load_region(o.file, o.region);
  if (!region) return fail(o.file, region.error());
  if (o.inputs.empty())
    return fail("fusor run",
                make_error(ErrorCode::bad_argument, "this " + std::string(region_kind_name(region_kind(*region))) +
                                                        " region needs its operands: --in " + operand_list(*region)));
  auto operands = load_operands(o.inputs);
  if (!operands) return fail("fusor run", operands.error());
  auto [result, ms] = evaluate_timed(*region, *operands);
  if (!result) return fail("fusor run", result.error(), &*region);
  if (!o.out.empty()) {
    const Status written = write_npy(o.out, *result);
    if (!written) return fail("fusor run", written.error());
  }
  std::cout << fmt::format("lane=reference time_ms={:.3f} output={}{}\n", ms, compact_shape(result->shape),
                           o.out.empty() ? "" : " out=" + o.out);
  return kExitOk;
}

// Modest problem sizes: big enough to be real work, small enough for the double-precision
// reference to finish in milliseconds.
ProblemShape example_dims(const Region& region) {
  ProblemShape d;
  switch (region_kind(region)) {
  case RegionKind::fused:
  case RegionKind::matmul:
  case RegionKind::gated:
    d.M = 128;
    d.N = 96;
    d.K = 64;
    break;
  case RegionKind::attention: // 2 batches of 4 query heads over 2 KV heads; head dim 64
    d.batch = 2;
    d.heads = 4;
    d.kv_heads = 2;
    d.M = d.Nk = 64;
    d.D = d.Dv = 64;
    break;
  case RegionKind::pointwise:
  case RegionKind::pointwise_reduce:
  case RegionKind::norm_chain: d.output = {64, 256}; break;
  }
  return d;
}

std::string shorten(std::string s, size_t width) {
  if (s.size() > width) s = s.substr(0, width - 3) + "...";
  return s;
}

std::string summary(const Tensor& t) {
  double sum = 0.0, absmax = 0.0;
  std::int64_t nonfinite = 0;
  for (float v : t.data) {
    if (!std::isfinite(v)) {
      ++nonfinite;
      continue;
    }
    sum += v;
    absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
  }
  return fmt::format("sum={:.6g} max|y|={:.4g}", sum, absmax) +
         (nonfinite ? fmt::format(" non-finite={}", nonfinite) : "");
}

int run_examples() {
  struct Example {
    std::string_view name;
    Region region;
  };
  std::vector<Example> examples;
  for (const auto& e : embedded_examples()) {
    auto region = parse_region(e.text);
    if (!region) return fail("fusor run: bundled example " + std::string(e.name), region.error());
    examples.push_back({e.name, std::move(*region)});
  }
  std::stable_sort(examples.begin(), examples.end(),
                   [](const Example& a, const Example& b) { return region_kind(a.region) < region_kind(b.region); });

  constexpr std::uint64_t kSeed = 0;
  std::vector<std::array<std::string, 6>> rows{{"kind", "region", "operands", "output", "time_ms", "output summary"}};
  for (const auto& e : examples) {
    const auto operands = make_operands(e.region, example_dims(e.region), kSeed);
    auto [result, ms] = evaluate_timed(e.region, operands);
    if (!result) return fail("fusor run: bundled example " + std::string(e.name), result.error(), &e.region);
    std::string shapes;
    const auto names = operand_names(e.region);
    for (size_t i = 0; i < operands.size(); ++i) shapes += (i ? " " : "") + names[i] + compact_shape(operands[i].shape);
    // The canonical text's fields: the kind has its own column. "kind { f; g }" -> "f; g".
    std::string text = print_region(e.region);
    const size_t open = text.find("{ "), close = text.rfind(" }");
    if (open != std::string::npos && close != std::string::npos && close > open)
      text = text.substr(open + 2, close - open - 2);
    rows.push_back({std::string(region_kind_name(region_kind(e.region))), shorten(text, 56), shapes,
                    compact_shape(result->shape), fmt::format("{:.2f}", ms), summary(*result)});
  }

  std::array<size_t, 6> width{};
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::cout << fmt::format("fusor {}: {} bundled example regions, reference lane (double precision), "
                           "inputs N(0,1) from seed {}\n\n",
                           FUSOR_VERSION, examples.size(), kSeed);
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool right = c == 4; // numbers right-aligned
      line += right ? fmt::format("{:>{}}", row[c], width[c]) : fmt::format("{:<{}}", row[c], width[c]);
      line += c + 1 < row.size() ? "  " : "";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  }
  std::cout << "\nOn your own data: fusor run FILE --in A.npy B.npy ... --out OUT.npy   (fusor run --help)\n";
  return kExitOk;
}

} // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand(
      "run", "Run regions: with no FILE, the bundled examples on generated inputs (a table); with FILE, one region "
             "on .npy inputs");
  sub->add_option("FILE", o->file, "Region text file ('-' reads standard input); omit it to run the bundled examples");
  auto* in =
      sub->add_option("--in", o->inputs, "Operand .npy files, in the region's operand order (below)")->expected(1, -1);
  auto* out = sub->add_option("--out", o->out, "Where to write the output (.npy, f32); optional");
  auto* region = sub->add_option("--region", o->region,
                                 "Which block of FILE to run (1 = first); needed when FILE "
                                 "has several")
                     ->check(CLI::PositiveNumber);
  sub->add_option("--target", o->target,
                  "Where to run: reference (the reference evaluator; the only target built so far). "
                  "x86, cuda and auto are reserved and rejected for now")
      ->check(CLI::IsMember({"reference", "x86", "cuda", "auto"}))
      ->capture_default_str();
  sub->footer(operand_order_help() +
              "With FILE, prints `lane=<lane that ran> time_ms=<wall time>` and the output shape.");
  return {sub, [o, in, out, region] {
            const Status target = check_target(o->target);
            if (!target) return fail("fusor run", target.error());
            if (!o->file.empty()) return run_file(*o);
            if (in->count() + out->count() + region->count() > 0)
              return fail("fusor run",
                          make_error(ErrorCode::bad_argument, "--in, --out and --region need a region FILE"));
            return run_examples();
          }};
}

} // namespace fusor::cli
