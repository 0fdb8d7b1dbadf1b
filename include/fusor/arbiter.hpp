// The arbiter (SPEC §5): per dispatch, the fastest candidate that applies, is available,
// and passed the oracle — measured by autotuning and remembered in a corpus — else the
// highest tier; nothing left means the reference. Every dispatch is logged with why each
// other candidate lost.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/region.hpp"
#include "fusor/target.hpp"
#include "fusor/tensor.hpp"

namespace fusor {

enum class DispatchOutcome { won, degraded, no_candidate };
std::string_view dispatch_outcome_name(DispatchOutcome outcome);

// Why one candidate won or lost a dispatch.
struct CandidateVerdict {
  std::string name;
  std::string target;
  int tier = 0;
  std::string status; // "won", "does not apply: ...", "unavailable: ...", "failed oracle: ...", "slower by 12%"...
  std::optional<double> median_ms;
};

struct DispatchLog {
  std::string region; // canonical text
  std::string kind;
  std::string bucket; // "M<=64,N<=64,K<=64"
  std::vector<CandidateVerdict> candidates;
  std::string winner; // candidate name, or "reference"
  std::string tag;    // lane that ran
  DispatchOutcome outcome = DispatchOutcome::no_candidate;
  double time_ms = 0;
  std::string line() const; // the FUSOR_VERBOSE=1 line
};

// ---- measurements -------------------------------------------------------------------------

struct Timing {
  double median_ms = 0;
  double spread_ms = 0; // half the inter-quartile range of the repetitions
};

// Times candidates on the dispatch's operands, interleaving their repetitions (real: runs
// the kernels; tests: deterministic fakes). Keyed by candidate name.
using CandidateTimer = std::function<Expected<std::map<std::string, Timing>>(std::span<const Candidate* const>,
                                                                             const Region&, std::span<const Tensor>)>;

// The persisted autotuning corpus: versioned JSON, written atomically.
struct CorpusRow {
  std::string device; // target fingerprint: CPU model + ISA + compiler, or GPU + sm + driver
  std::string target;
  std::string op;     // region kind
  std::string region; // canonical region text (a winner is per region, not per kind)
  std::string bucket; // power-of-two shape bucket
  std::string dtype;
  std::string timing; // timing mode ("kernel")
  std::string winner; // candidate name
  std::map<std::string, Timing> measured;
};

class Corpus {
public:
  static constexpr int kVersion = 1;
  // FUSOR_CORPUS, else <cache dir>/corpus.json.
  static Expected<std::filesystem::path> default_path();
  // Missing file: empty corpus. Unreadable or other-version file: empty, with a log line.
  static Corpus load(const std::filesystem::path& path);
  Status save() const;

  const CorpusRow* find(const CorpusRow& key) const; // matches every field but winner/measured
  void put(CorpusRow row);
  void drop(const CorpusRow& key);
  const std::vector<CorpusRow>& rows() const { return rows_; }
  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
  std::vector<CorpusRow> rows_;
};

// ---- the arbiter --------------------------------------------------------------------------

struct ArbiterOptions {
  std::vector<std::string> targets; // empty: every registered target
  std::optional<std::string> force; // a candidate name
  bool autotune = true;             // measure verified candidates at the first miss
  bool no_verify = false;           // skip the oracle (results tagged "+unverified")
  double caller_atol = 1e-3;
  bool progress = true; // a progress line on stderr while tuning
};

struct Dispatch {
  RunOutput run;
  DispatchLog log;
};

struct OutcomeCounts {
  std::uint64_t won = 0, degraded = 0, no_candidate = 0;
};

class Arbiter {
public:
  // `corpus` may be null (no persistence); `timer` null means real measurements.
  Arbiter(const Registry& registry, Corpus* corpus = nullptr, CandidateTimer timer = {});

  // Chooses and runs. E_ARBITER_FORCED_UNKNOWN when `force` names no registered candidate
  // for this region kind, or one whose target is unavailable; operand errors as usual.
  Expected<Dispatch> dispatch(const Region& region, std::span<const Tensor> operands,
                              const ArbiterOptions& options = {});

  // won / degraded / no_candidate per target ("reference" when nothing ran natively).
  const std::map<std::string, OutcomeCounts>& histogram() const { return histogram_; }
  const std::vector<DispatchLog>& logs() const { return logs_; }

private:
  // A decision already made in this process: later dispatches of the same region, bucket
  // and options skip emit, cache lookups and certificates and run the winner directly.
  struct Decision {
    const Target* target = nullptr; // null: the reference
    Artifact artifact;
    DispatchLog log;
  };
  // The memo's key: the region (by its canonical text's id), its shape bucket and the
  // options that change the choice; built without printing the region, which every
  // dispatch would pay.
  struct DecisionKey {
    std::size_t region = 0;
    std::vector<std::int64_t> bucket;
    std::string options;
    auto operator<=>(const DecisionKey&) const = default;
  };
  std::map<DecisionKey, Decision> decisions_;
  // A stable id per canonical region text, and the regions dispatched lately with theirs:
  // comparing a region costs far less than printing it.
  std::map<std::string, std::size_t> region_ids_;
  std::vector<std::pair<Region, std::size_t>> recent_;
  std::size_t region_id(const Region& region);

  const Registry& registry_;
  Corpus* corpus_;
  CandidateTimer timer_;
  std::map<std::string, OutcomeCounts> histogram_;
  std::vector<DispatchLog> logs_;
};

// The real timer: per candidate a warm-up call, then `repetitions` rounds that call each
// candidate once (interleaved, so drift hits all alike); median and half-IQR per candidate.
Expected<std::map<std::string, Timing>> measure_candidates(const Registry& registry,
                                                           std::span<const Candidate* const> candidates,
                                                           const Region& region, std::span<const Tensor> operands,
                                                           int repetitions = 15);

// "M<=64,N<=64,K<=32" for the region's ABI dims.
std::string shape_bucket(const Region& region, const ProblemShape& shape);

} // namespace fusor
