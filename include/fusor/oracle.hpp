// The oracle (SPEC §4): a kernel is trusted only after it has run on probe families in an
// isolated child process and matched the double-precision reference within its lane's
// budget. Verdicts are stored as certificates beside the cached artifact.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusor/error.hpp"
#include "fusor/region.hpp"
#include "fusor/target.hpp"

namespace fusor {

// Bumped whenever probes, families or comparison rules change: older certificates are
// then re-verified (without recompiling).
inline constexpr int kVerifierVersion = 1;

struct Budget {
  double atol = 0; // the lane's own absolute budget; the effective atol is max(caller, this)
  double rtol = 1e-5;
  bool operator==(const Budget&) const = default;
};

// The declared budget of `lane` for operands stored in `dtype`.
Budget lane_budget(std::string_view lane, DType dtype);

enum class ProbeFamily { fixed, ragged, exact_int, large, special, masked };
std::string_view probe_family_name(ProbeFamily family);

struct ProbeFailure {
  std::string family;
  std::string shape; // e.g. "M=17 N=13 K=31"
  std::uint64_t seed = 0;
  std::string reason; // "mismatch at [3, 7]: got 1.5, expected 0.25 (err 1.25 > 0.001)", "SIGSEGV", ...
};

struct VerifyReport {
  bool verified = false;
  std::string lane;
  double max_abs_err = 0;
  double max_rel_err = 0;
  double atol = 0; // effective tolerances used
  double rtol = 0;
  Budget budget;
  std::optional<ProbeFailure> failure;
  std::vector<std::string> families; // families that ran
  std::vector<std::uint64_t> seeds;
  int probes = 0;
  double elapsed_ms = 0;
  int verifier_version = kVerifierVersion;

  nlohmann::json to_json() const;
  static std::optional<VerifyReport> from_json(const nlohmann::json& j);
  std::string summary() const; // a few human lines
};

struct VerifyOptions {
  double caller_atol = 1e-3;
  std::chrono::milliseconds timeout{30000}; // the whole probe set, in the child process
};

// Runs every probe family that applies to the region against `artifact` in a child
// process. A crash, hang or out-of-bounds write is a rejection with the reason, not an
// error; errors are reserved for things that stop verification itself.
Expected<VerifyReport> verify(const Region& region, const Target& target, const Artifact& artifact,
                              const VerifyOptions& options = {});

// Element-wise comparison with NaN == NaN and exact infinities (exposed for tests).
struct Comparison {
  bool ok = true;
  double max_abs_err = 0, max_rel_err = 0;
  std::int64_t first_bad = -1;
  double got = 0, expected = 0;
};
Comparison compare_outputs(std::span<const float> got, std::span<const double> expected, double atol, double rtol);

// Certificates: the report stored beside the artifact; reusable only when the verifier
// version and the effective tolerances still match.
Status store_certificate(const Artifact& artifact, const VerifyReport& report);
std::optional<VerifyReport> load_certificate(const Artifact& artifact, std::string_view lane, DType dtype,
                                             double caller_atol);

} // namespace fusor
