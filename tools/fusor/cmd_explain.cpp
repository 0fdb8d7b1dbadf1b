// `fusor explain FILE [--dims ...]`: the arbiter's decision as a table — every candidate,
// why it lost or won, measured medians.
#include <fmt/format.h>
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "cli_lanes.hpp"
#include "commands.hpp"
#include "fusor/arbiter.hpp"
#include "fusor/operand_gen.hpp"

namespace fusor::cli {
namespace {

struct ExplainOptions {
  std::string file;
  int region = 0;
  std::string dims;
  LaneFlags lanes;
};

int run_explain(const ExplainOptions& o) {
  auto region = load_region(o.file, o.region);
  if (!region) return fail(o.file, region.error());
  ProblemShape dims = default_dims(*region);
  if (!o.dims.empty()) {
    auto parsed = parse_dims(*region, o.dims);
    if (!parsed) return fail("fusor explain", parsed.error());
    dims = *parsed;
  }
  auto options = arbiter_options(o.lanes);
  if (!options) return fail("fusor explain", options.error());
  const auto operands = make_operands(*region, dims, 0);
  auto path = Corpus::default_path();
  std::optional<Corpus> corpus;
  if (path) corpus = Corpus::load(*path);
  Arbiter arbiter(builtin_registry(), corpus ? &*corpus : nullptr);
  auto d = arbiter.dispatch(*region, operands, *options);
  if (!d) return fail("fusor explain", d.error(), &*region);
  const auto& log = d->log;
  std::cout << "region: " << log.region << "\nbucket: " << log.bucket << "\n\n";
  std::cout << fmt::format("{:<16} {:<8} {:>4} {:>11}  {}\n", "candidate", "target", "tier", "median_ms", "verdict");
  for (const auto& c : log.candidates)
    std::cout << fmt::format("{:<16} {:<8} {:>4} {:>11}  {}\n", c.name, c.target, c.tier,
                             c.median_ms ? fmt::format("{:.4f}", *c.median_ms) : "-", c.status);
  std::cout << fmt::format("\nwinner: {} (tag {}, {}), kernel time {:.4f} ms\n", log.winner, log.tag,
                           dispatch_outcome_name(log.outcome), log.time_ms);
  if (corpus) std::cout << "corpus: " << corpus->path().string() << "\n";
  return kExitOk;
}

} // namespace

Command add_explain_command(CLI::App& app) {
  auto o = std::make_shared<ExplainOptions>();
  CLI::App* sub = app.add_subcommand("explain", "Show how the arbiter chooses a lane for a region, as a table");
  sub->add_option("FILE", o->file, "Region text file ('-' reads standard input)")->required();
  sub->add_option("--region", o->region, "Which block of FILE (1 = first)")->check(CLI::PositiveNumber);
  sub->add_option("--dims", o->dims,
                  "Problem dims for generated inputs: M,N,K; M,Nk,D or batch,heads,kv_heads,M,Nk,D,Dv; or the "
                  "input shape");
  sub->add_option("--target", o->lanes.target, "auto (every target) or one target name")->capture_default_str();
  sub->add_option("--force", o->lanes.force, "Consider only this candidate");
  sub->add_flag("--no-verify", o->lanes.no_verify, "Skip the oracle (lanes tagged +unverified)");
  sub->footer("Candidates are verified by the oracle and timed (autotune) on first use; timings persist in the "
              "corpus (FUSOR_CORPUS, default <cache dir>/corpus.json).");
  return {sub, [o] { return run_explain(*o); }};
}

} // namespace fusor::cli
