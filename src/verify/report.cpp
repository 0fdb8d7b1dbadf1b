// VerifyReport ↔ JSON (the certificate format) and its human summary.
#include <cmath>
#include <sstream>

#include "fusor/oracle.hpp"

namespace fusor {
namespace {

// JSON has no infinity: a NaN-vs-number mismatch's error is stored as null.
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
double number_of(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : INFINITY; }

} // namespace

nlohmann::json VerifyReport::to_json() const {
  nlohmann::json j{{"verifier_version", verifier_version},
                   {"verdict", verified ? "verified" : "rejected"},
                   {"lane", lane},
                   {"max_abs_err", number(max_abs_err)},
                   {"max_rel_err", number(max_rel_err)},
                   {"atol", atol},
                   {"rtol", rtol},
                   {"budget", {{"atol", budget.atol}, {"rtol", budget.rtol}}},
                   {"families", families},
                   {"seeds", seeds},
                   {"probes", probes},
                   {"elapsed_ms", elapsed_ms}};
  if (failure)
    j["failure"] = {
        {"family", failure->family}, {"shape", failure->shape}, {"seed", failure->seed}, {"reason", failure->reason}};
  return j;
}

std::optional<VerifyReport> VerifyReport::from_json(const nlohmann::json& j) {
  try {
    VerifyReport r;
    r.verifier_version = j.at("verifier_version").get<int>();
    r.verified = j.at("verdict").get<std::string>() == "verified";
    r.lane = j.at("lane").get<std::string>();
    r.max_abs_err = number_of(j.at("max_abs_err"));
    r.max_rel_err = number_of(j.at("max_rel_err"));
    r.atol = j.at("atol").get<double>();
    r.rtol = j.at("rtol").get<double>();
    r.budget = {j.at("budget").at("atol").get<double>(), j.at("budget").at("rtol").get<double>()};
    r.families = j.at("families").get<std::vector<std::string>>();
    r.seeds = j.at("seeds").get<std::vector<std::uint64_t>>();
    r.probes = j.at("probes").get<int>();
    r.elapsed_ms = j.at("elapsed_ms").get<double>();
    if (j.contains("failure")) {
      const auto& f = j.at("failure");
      r.failure = ProbeFailure{f.at("family").get<std::string>(), f.at("shape").get<std::string>(),
                               f.at("seed").get<std::uint64_t>(), f.at("reason").get<std::string>()};
    }
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt; // a malformed certificate is simply not a certificate
  }
}

std::string VerifyReport::summary() const {
  std::ostringstream out;
  out << "verdict: " << (verified ? "verified" : "REJECTED") << " (lane " << lane << ")\n";
  out << "max abs err: " << max_abs_err << "  max rel err: " << max_rel_err << "  budget: atol " << atol << " rtol "
      << rtol << " (lane budget atol " << budget.atol << ")\n";
  out << "probes: " << probes << " in families:";
  for (const auto& f : families) out << " " << f;
  out << "  (" << elapsed_ms << " ms)\n";
  if (failure)
    out << "failing probe: family " << failure->family << ", " << failure->shape << ", seed " << failure->seed << ": "
        << failure->reason << "\n";
  return out.str();
}

} // namespace fusor
