// Arbitration as SPEC §5: applies → available → force → oracle → measured latency, else
// tier (ties by registration order) → the reference when nothing is left.
#include "fusor/arbiter.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "codegen/abi.hpp"
#include "fusor/log.hpp"
#include "fusor/oracle.hpp"
#include "fusor/region_text.hpp"

namespace fusor {
namespace {

constexpr std::string_view kTimingMode = "kernel";

// A candidate that got through the oracle, ready to run.
struct Survivor {
  const Candidate* candidate;
  const Target* target;
  Artifact artifact;
  std::size_t order; // registration order
};

std::string percent(double slower_ms, double faster_ms) {
  std::ostringstream out;
  out.precision(3);
  out << (faster_ms > 0 ? 100.0 * (slower_ms / faster_ms - 1.0) : 0.0);
  return out.str();
}

// First candidate by tier (desc), then registration order; a later one displaces the
// incumbent only when faster beyond both measurements' noise.
const Survivor* pick(const std::vector<Survivor>& survivors, const std::map<std::string, Timing>* timings) {
  std::vector<const Survivor*> order;
  for (const auto& s : survivors) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [](const Survivor* a, const Survivor* b) { return a->candidate->tier > b->candidate->tier; });
  const Survivor* best = order.front();
  if (!timings) return best;
  for (const Survivor* s : order) {
    auto mine = timings->find(s->candidate->name), theirs = timings->find(best->candidate->name);
    if (mine == timings->end() || theirs == timings->end() || s == best) continue;
    const double noise = std::max(mine->second.spread_ms, theirs->second.spread_ms);
    if (mine->second.median_ms < theirs->second.median_ms - noise) best = s;
  }
  return best;
}

std::string registered_names(const Registry& registry, RegionKind kind) {
  std::string names;
  for (const auto& c : registry.all_candidates())
    if (c.kind == kind && names.find(c.name) == std::string::npos) names += (names.empty() ? "" : ", ") + c.name;
  return names.empty() ? "none" : names;
}

} // namespace

std::string_view dispatch_outcome_name(DispatchOutcome outcome) {
  switch (outcome) {
  case DispatchOutcome::won: return "won";
  case DispatchOutcome::degraded: return "degraded";
  case DispatchOutcome::no_candidate: return "no_candidate";
  }
  return "?";
}

std::string DispatchLog::line() const {
  std::ostringstream out;
  out << "dispatch " << kind << " [" << bucket << "] " << region << " -> " << winner << " (tag " << tag << ", "
      << dispatch_outcome_name(outcome) << ", " << time_ms << " ms)";
  for (const auto& c : candidates)
    if (c.name != winner) out << "; " << c.name << ": " << c.status;
  return out.str();
}

std::string shape_bucket(const Region& region, const ProblemShape& shape) {
  const RegionKind kind = region_kind(region);
  const auto names = codegen::abi_dim_names(kind);
  const auto values = codegen::abi_dim_values(kind, shape);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i ? "," : "") + std::string(names[i]) + "<=" + std::to_string(dim_bucket(values[i]));
  return out;
}

Arbiter::Arbiter(const Registry& registry, Corpus* corpus, CandidateTimer timer)
    : registry_(registry), corpus_(corpus), timer_(std::move(timer)) {}

std::size_t Arbiter::region_id(const Region& region) {
  constexpr std::size_t kRecent = 64; // a model's regions; beyond that the oldest is printed again
  for (const auto& [seen, id] : recent_)
    if (seen == region) return id;
  const std::size_t id = region_ids_.try_emplace(print_region(region), region_ids_.size()).first->second;
  if (recent_.size() >= kRecent) recent_.erase(recent_.begin());
  recent_.emplace_back(region, id);
  return id;
}

Expected<Dispatch> Arbiter::dispatch(const Region& region, std::span<const Tensor> operands,
                                     const ArbiterOptions& options) {
  FUSOR_TRY_ASSIGN(const ProblemShape shape, check_operands(region, operands));
  const RegionKind kind = region_kind(region);
  DecisionKey decision_key{region_id(region), codegen::abi_dim_values(kind, shape), {}};
  for (auto& d : decision_key.bucket) d = dim_bucket(d);
  char atol[32];
  const auto atol_end = std::to_chars(atol, atol + sizeof atol, options.caller_atol).ptr;
  decision_key.options = (options.force ? *options.force : "") + "|" + (options.no_verify ? "nv" : "v") + "|" +
                         std::string(atol, atol_end);
  for (const auto& t : options.targets) decision_key.options += "|" + t;
  if (auto memo = decisions_.find(decision_key); memo != decisions_.end()) {
    Dispatch again;
    again.log = memo->second.log;
    if (memo->second.target) {
      FUSOR_TRY_ASSIGN(again.run, memo->second.target->run(memo->second.artifact, region, operands));
      again.run.verified = !options.no_verify;
      if (options.no_verify) again.run.tag += "+unverified";
    } else {
      FUSOR_TRY_ASSIGN(again.run, execute_reference(region, operands));
    }
    again.log.time_ms = again.run.time_ms;
    OutcomeCounts& counts = histogram_[memo->second.target ? memo->second.target->name : "reference"];
    (again.log.outcome == DispatchOutcome::won        ? counts.won
     : again.log.outcome == DispatchOutcome::degraded ? counts.degraded
                                                      : counts.no_candidate)++;
    if (verbose()) log_line(again.log.line());
    return again;
  }

  DispatchLog log;
  log.region = print_region(region);
  log.kind = region_kind_name(kind);
  log.bucket = shape_bucket(region, shape);

  auto wanted_target = [&](const std::string& t) {
    return options.targets.empty() ||
           std::find(options.targets.begin(), options.targets.end(), t) != options.targets.end();
  };
  if (options.force) {
    const auto all = registry_.candidates("", kind);
    auto it = std::find_if(all.begin(), all.end(), [&](const Candidate* c) { return c->name == *options.force; });
    if (it == all.end())
      return make_error(ErrorCode::arbiter_forced_unknown,
                        "forced candidate '" + *options.force + "' is not registered for " + log.kind +
                            " regions; registered: " + registered_names(registry_, kind));
    const Target* t = registry_.target((*it)->target);
    Status available = t ? t->available() : Status(make_error(ErrorCode::runner_unavailable, "no such target"));
    if (!available)
      return make_error(ErrorCode::arbiter_forced_unknown,
                        "forced candidate '" + *options.force + "' is unavailable: " + available.error().str());
  }

  std::vector<Survivor> survivors;
  bool expected_lane_failed = false;
  std::size_t order = 0;
  for (const Candidate* c : registry_.candidates("", kind)) {
    CandidateVerdict v{c->name, c->target, c->tier, {}, std::nullopt};
    const Target* target = registry_.target(c->target);
    auto reject = [&](std::string status) {
      v.status = std::move(status);
      log.candidates.push_back(v);
    };
    ++order;
    if (!wanted_target(c->target)) {
      reject("not requested (target " + c->target + ")");
      continue;
    }
    if (options.force && c->name != *options.force) {
      reject("not forced");
      continue;
    }
    if (auto why = c->declines ? c->declines(region) : std::nullopt) {
      reject("does not apply: " + *why);
      continue;
    }
    if (!target) {
      reject("unavailable: target " + c->target + " is not registered");
      continue;
    }
    if (Status ok = target->available(); !ok) {
      reject("unavailable: " + ok.error().message);
      continue;
    }
    auto src = c->emit ? c->emit(region, {}) : target->emit(region, {});
    if (!src) {
      const bool unsupported = src.error().code == ErrorCode::emit_unsupported;
      expected_lane_failed = expected_lane_failed || !unsupported;
      reject((unsupported ? "does not apply: " : "failed to emit: ") + src.error().str());
      continue;
    }
    auto artifact = target->compile(*src);
    if (!artifact) {
      expected_lane_failed = true;
      reject("failed to compile: " + artifact.error().str());
      continue;
    }
    if (!options.no_verify) {
      auto report = ensure_verified(*target, region, *artifact, options.caller_atol);
      if (!report || !report->verified) {
        expected_lane_failed = true;
        std::ostringstream why;
        if (!report)
          why << "could not verify: " << report.error().str();
        else
          why << "failed oracle: max abs err " << report->max_abs_err << " (atol " << report->atol << ")"
              << (report->failure ? ", " + report->failure->family + " probe: " + report->failure->reason : "");
        reject(why.str());
        continue;
      }
    }
    survivors.push_back({c, target, *artifact, order});
    log.candidates.push_back(v);
  }

  Dispatch result;
  std::string counted_target = "reference"; // the histogram row this dispatch counts in
  if (survivors.empty()) {
    FUSOR_TRY_ASSIGN(result.run, execute_reference(region, operands));
    log.winner = "reference";
    log.outcome = options.force || expected_lane_failed ? DispatchOutcome::degraded : DispatchOutcome::no_candidate;
    for (const Candidate* c : registry_.candidates("", kind))
      if (options.force && c->name == *options.force) counted_target = c->target;
  } else {
    // Measured latency when there is a choice to make.
    std::optional<std::map<std::string, Timing>> timings;
    if (survivors.size() > 1 && (corpus_ || options.autotune)) {
      CorpusRow key;
      for (const auto& s : survivors) {
        if (key.target.find(s.target->name) == std::string::npos) {
          key.target += (key.target.empty() ? "" : "+") + s.target->name;
          key.device += (key.device.empty() ? "" : " || ") + (s.target->fingerprint ? s.target->fingerprint() : "");
        }
      }
      key.op = log.kind;
      key.region = log.region;
      key.bucket = log.bucket;
      key.dtype = dtype_name(region_storage(region));
      key.timing = kTimingMode;
      const CorpusRow* row = corpus_ ? corpus_->find(key) : nullptr;
      if (row) {
        const bool winner_alive = std::any_of(survivors.begin(), survivors.end(),
                                              [&](const Survivor& s) { return s.candidate->name == row->winner; });
        if (winner_alive) {
          timings = row->measured;
        } else {
          log_line("corpus: stored winner " + row->winner + " for " + log.kind + " [" + log.bucket +
                   "] no longer passes; re-tuning");
          corpus_->drop(key);
        }
      }
      if (!timings && options.autotune) {
        std::vector<const Candidate*> cands;
        for (const auto& s : survivors) cands.push_back(s.candidate);
        if (options.progress)
          log_line("tuning " + log.kind + " [" + log.bucket + "]: timing " + std::to_string(cands.size()) +
                   " verified candidates");
        auto measured =
            timer_ ? timer_(cands, region, operands) : measure_candidates(registry_, cands, region, operands);
        if (!measured) return measured.error();
        timings = *measured;
        if (corpus_) {
          key.measured = *timings;
          key.winner = pick(survivors, &*timings)->candidate->name;
          corpus_->put(key);
          if (Status saved = corpus_->save(); !saved) log_line("corpus not saved: " + saved.error().str());
        }
      }
    }
    const Survivor* best = pick(survivors, timings ? &*timings : nullptr);
    for (auto& v : log.candidates) {
      if (!v.status.empty()) continue;
      if (timings && timings->count(v.name)) v.median_ms = timings->at(v.name).median_ms;
      if (v.name == best->candidate->name) {
        v.status = "won";
      } else if (timings && timings->count(v.name) && timings->count(best->candidate->name)) {
        const double mine = timings->at(v.name).median_ms, theirs = timings->at(best->candidate->name).median_ms;
        v.status = mine > theirs ? "slower by " + percent(mine, theirs) + "%" : "within noise; lower tier or later";
      } else {
        v.status = "lower tier or registered later";
      }
    }
    FUSOR_TRY_ASSIGN(result.run, best->target->run(best->artifact, region, operands));
    result.run.verified = !options.no_verify;
    if (options.no_verify) result.run.tag += "+unverified";
    log.winner = best->candidate->name;
    log.outcome = DispatchOutcome::won;
    counted_target = best->target->name;
  }
  log.tag = result.run.tag;
  log.time_ms = result.run.time_ms;
  OutcomeCounts& counts = histogram_[counted_target];
  (log.outcome == DispatchOutcome::won        ? counts.won
   : log.outcome == DispatchOutcome::degraded ? counts.degraded
                                              : counts.no_candidate)++;
  if (verbose()) log_line(log.line());
  logs_.push_back(log);
  Decision decision;
  decision.log = log;
  if (!survivors.empty())
    for (const auto& s : survivors)
      if (s.candidate->name == log.winner) decision.target = s.target, decision.artifact = s.artifact;
  decisions_[decision_key] = std::move(decision);
  result.log = std::move(log);
  return result;
}

} // namespace fusor
