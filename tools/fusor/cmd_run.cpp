// `fusor run`: with no FILE, the bundled examples on deterministic inputs, as a table;
// with FILE, one region on the user's .npy inputs through the chosen target.
#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "cli_common.hpp"
#include "cli_lanes.hpp"
#include "commands.hpp"
#include "examples.hpp"
#include "fusor/arbiter.hpp"
#include "fusor/model_run.hpp"
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
  LaneFlags lanes;
  bool examples = false;
  bool allow_reference = false;
  int repeats = ModelRunOptions{}.repeats;
  bool repeats_given = false; // a region FILE times one warm call unless --repeats asks for more
};

bool is_model_file(const std::string& file) {
  auto ends = [&](std::string_view ext) { return file.size() >= ext.size() && file.ends_with(ext); };
  return ends(".onnx") || ends(".graph");
}

int run_model_file(const RunOptions& o) {
  ModelRunOptions mo;
  mo.model = o.file; // empty: the embedded default transformer block
  mo.inputs = o.inputs;
  mo.out_dir = o.out;
  mo.allow_reference = o.allow_reference;
  mo.repeats = o.repeats;
  return run_model(mo, std::cout, std::cerr);
}

// The user's corpus (FUSOR_CORPUS or <cache dir>/corpus.json); none if the path is unusable.
std::optional<Corpus> user_corpus() {
  auto path = Corpus::default_path();
  if (!path) return std::nullopt;
  return Corpus::load(*path);
}

// The region through the arbiter on the requested targets, or the reference evaluator.
// `repeats` warm calls are timed after the first (which pays for loading the kernel and
// starting threads); the result is the last call's output with the median of their times,
// so a peer timed in another process (bench/inductor/) reads a steady figure.
Expected<RunOutput> run_region(const Region& region, std::span<const Tensor> operands, const LaneFlags& lanes,
                               int repeats) {
  if (lanes.target == "reference") return execute_reference(region, operands);
  FUSOR_TRY_ASSIGN(const ArbiterOptions options, arbiter_options(lanes));
  auto corpus = user_corpus();
  Arbiter arbiter(builtin_registry(), corpus ? &*corpus : nullptr);
  FUSOR_TRY_ASSIGN(Dispatch first, arbiter.dispatch(region, operands, options));
  if (first.run.tag == "reference") return std::move(first.run);
  std::vector<double> times;
  std::optional<RunOutput> last;
  for (int r = 0; r < repeats; ++r) {
    FUSOR_TRY_ASSIGN(Dispatch warm, arbiter.dispatch(region, operands, options));
    times.push_back(warm.run.time_ms);
    last = std::move(warm.run);
  }
  std::sort(times.begin(), times.end());
  last->time_ms = times[times.size() / 2];
  return std::move(*last);
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
  auto result = run_region(*region, *operands, o.lanes, o.repeats_given ? o.repeats : 1);
  if (!result) return fail("fusor run", result.error(), &*region);
  if (!o.out.empty()) {
    const Status written = write_npy(o.out, result->output);
    if (!written) return fail("fusor run", written.error());
  }
  std::cout << fmt::format("lane={} time_ms={:.4f} output={}{}{}\n", result->tag, result->time_ms,
                           compact_shape(result->output.shape), o.out.empty() ? "" : " out=" + o.out,
                           o.repeats_given && result->tag != "reference" ? fmt::format(" repeats={}", o.repeats) : "");
  if (!result->note.empty()) std::cerr << "note: " << result->note << "\n";
  return kExitOk;
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

int run_examples(const LaneFlags& lanes) {
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
  std::vector<std::array<std::string, 8>> rows{
      {"kind", "region", "operands", "lane", "time_ms", "ref_ms", "max|err|", "output summary"}};
  for (const auto& e : examples) {
    const auto operands = make_operands(e.region, default_dims(e.region), kSeed);
    auto [reference, ref_ms] = evaluate_timed(e.region, operands);
    if (!reference) return fail("fusor run: bundled example " + std::string(e.name), reference.error(), &e.region);
    auto result = run_region(e.region, operands, lanes, 1);
    if (!result) return fail("fusor run: bundled example " + std::string(e.name), result.error(), &e.region);
    double err = 0;
    for (size_t i = 0; i < reference->data.size(); ++i)
      err = std::max(err, std::fabs(static_cast<double>(result->output.data[i]) - reference->data[i]));
    std::string shapes;
    const auto names = operand_names(e.region);
    for (size_t i = 0; i < operands.size(); ++i) shapes += (i ? " " : "") + names[i] + compact_shape(operands[i].shape);
    // The canonical text's fields: the kind has its own column. "kind { f; g }" -> "f; g".
    std::string text = print_region(e.region);
    const size_t open = text.find("{ "), close = text.rfind(" }");
    if (open != std::string::npos && close != std::string::npos && close > open)
      text = text.substr(open + 2, close - open - 2);
    rows.push_back({std::string(region_kind_name(region_kind(e.region))), shorten(text, 48), shapes, result->tag,
                    fmt::format("{:.3f}", result->time_ms), fmt::format("{:.2f}", ref_ms), fmt::format("{:.1e}", err),
                    summary(result->output)});
  }

  std::array<size_t, 8> width{};
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::cout << fmt::format("fusor {}: {} bundled example regions on target '{}' (each kernel verified by the "
                           "oracle before it runs), inputs N(0,1) from seed {}; ref_ms is the double-precision "
                           "reference evaluator\n\n",
                           FUSOR_VERSION, examples.size(), lanes.target, kSeed);
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool right = c >= 4 && c <= 6; // numbers right-aligned
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
      "run", "fusor's main job: with no FILE, the embedded default model (a transformer block); with MODEL.onnx or "
             "MODEL.graph, that model; with a region FILE, one region on .npy inputs");
  sub->add_option("FILE", o->file,
                  "MODEL.onnx / MODEL.graph (regions discovered, compiled, verified and run), or a region text file "
                  "('-' reads standard input); omit it for the embedded default model");
  sub->add_flag("--examples", o->examples, "Run the bundled example regions (one per kind) as a table instead");
  auto* in =
      sub->add_option("--in", o->inputs, "Operand .npy files, in the region's operand order (below)")->expected(1, -1);
  auto* out = sub->add_option("--out", o->out, "Where to write the output (.npy, f32); optional");
  auto* region = sub->add_option("--region", o->region,
                                 "Which block of FILE to run (1 = first); needed when FILE "
                                 "has several")
                     ->check(CLI::PositiveNumber);
  sub->add_option("--target", o->lanes.target,
                  "Where to run: auto (the arbiter picks the fastest verified lane over every available target), "
                  "a target name (x86, cuda), or reference (the double-precision reference evaluator)")
      ->capture_default_str();
  sub->add_option("--force", o->lanes.force, "Run this lane (candidate name, e.g. x86_c); see fusor explain");
  sub->add_flag("--no-verify", o->lanes.no_verify,
                "Run kernels that have no oracle certificate (the lane is then tagged +unverified)");
  sub->add_flag(
      "--allow-reference", o->allow_reference,
      "For an ONNX model: run ops outside fusor's set (Cos, Elu, Clip, ReduceL2, LogSoftmax...; the list: fusor "
      "check-onnx --help) on the "
      "double-precision reference evaluator instead of rejecting the model; they are never fused, and the "
      "report names them");
  auto* repeats = sub->add_option("--repeats", o->repeats,
                                  "Timed runs after the warm-up: with a model, the report gives their medians "
                                  "(ONNX Runtime runs as many); with a region FILE, time_ms is their median (default "
                                  "there: one)")
                      ->check(CLI::PositiveNumber)
                      ->capture_default_str();
  sub->footer(operand_order_help() +
              "With a region FILE, prints `lane=<lane that ran> time_ms=<kernel time>` (the median of --repeats warm "
              "calls when given) and the output shape. With a "
              "model, --in takes the graph inputs in order and --out names a directory for the outputs.\n"
              "FUSOR_VERBOSE=1 logs every dispatch: each candidate and why it lost.");
  return {sub, [o, in, out, region, repeats] {
            if (o->lanes.target != "reference")
              if (auto targets = resolve_targets(o->lanes.target); !targets) return fail("fusor run", targets.error());
            if (o->allow_reference && (o->examples || !(o->file.empty() || is_model_file(o->file))))
              return fail("fusor run",
                          make_error(ErrorCode::bad_argument, "--allow-reference applies to a model (.onnx), not to "
                                                              "regions or --examples"));
            if (repeats->count() > 0 && o->examples)
              return fail("fusor run", make_error(ErrorCode::bad_argument, "--repeats applies to a model or a region "
                                                                           "FILE, not to --examples"));
            o->repeats_given = repeats->count() > 0;
            if (o->examples) return run_examples(o->lanes);
            if (o->file.empty() || is_model_file(o->file)) {
              if (o->file.empty() && in->count() + out->count() + region->count() > 0)
                return fail("fusor run",
                            make_error(ErrorCode::bad_argument, "--in, --out and --region need a region FILE"));
              return run_model_file(*o);
            }
            return run_file(*o);
          }};
}

} // namespace fusor::cli
