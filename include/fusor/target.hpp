// Targets and candidates (SPEC §3, §5). A target is three seams — emitter, compile
// function, runner — registered by one explicit call in src/targets/builtin.cpp.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/kernel.hpp"
#include "fusor/region.hpp"
#include "fusor/sandbox.hpp"
#include "fusor/tensor.hpp"

namespace fusor {

// A compiled kernel on disk, as the compile seam returns it.
struct Artifact {
  std::filesystem::path path;
  std::string key;    // content-address in the cache
  std::string sha256; // of the artifact's bytes
  bool cache_hit = false;
  KernelSource source;
};

struct RunOutput {
  Tensor output;
  std::string tag;       // lane that really ran ("x86_avx512", ...) or "reference"
  double time_ms = 0;    // the kernel call alone (or the reference evaluation)
  std::string note;      // why a lane declined to the reference, when it did
  bool verified = false; // an oracle certificate covered the kernel that ran
};

struct Target {
  std::string name; // "x86", "cuda"
  // The device and toolchain this target's timings belong to (CPU model + ISA + compiler,
  // or GPU name + sm + driver): corpus rows for another fingerprint are ignored.
  std::function<std::string()> fingerprint;
  // Ok, or E_RUNNER_UNAVAILABLE saying why (no GPU, no compiler...).
  std::function<Status()> available;
  std::function<Expected<KernelSource>(const Region&, const EmitOptions&)> emit;
  std::function<Expected<Artifact>(const KernelSource&)> compile;
  // Validates every operand before any native code runs, then launches.
  std::function<Expected<RunOutput>(const Artifact&, const Region&, std::span<const Tensor>)> run;
  // The oracle's runner: the same kernel, called on prepared calls in an isolated child
  // process so a crash, hang or out-of-bounds write is an outcome, not the caller's death.
  std::function<Expected<SandboxOutcome>(const Artifact&, std::span<const KernelCall>, std::chrono::milliseconds)>
      run_isolated;
};

// A lane registered with the arbiter for (target, region kind).
struct Candidate {
  std::string name;   // unique; registering a name again replaces it
  std::string target; // the Target whose seams run it
  RegionKind kind;
  int tier = 1; // 1 generic synthesized, 2 target-specialised, 3 vendor library
  // Why it cannot run this region (nullopt: it applies).
  std::function<std::optional<std::string>(const Region&)> declines;
  // The lane's own emitter; empty means the target's (generic) emitter. Compile and run
  // always go through the target's seams.
  std::function<Expected<KernelSource>(const Region&, const EmitOptions&)> emit = {};
};

class Registry {
public:
  void add_target(Target target);
  void add_candidate(Candidate candidate);
  const Target* target(std::string_view name) const;
  std::vector<std::string> target_names() const;
  // Candidates for (target, kind) in registration order; an empty target means all.
  std::vector<const Candidate*> candidates(std::string_view target, RegionKind kind) const;
  const std::vector<Candidate>& all_candidates() const { return candidates_; }

private:
  std::vector<Target> targets_;
  std::vector<Candidate> candidates_;
};

// The registry holding every built-in target, built on first use by
// register_builtin_targets (explicit calls, no static-initialiser registration).
const Registry& builtin_registry();
void register_builtin_targets(Registry& registry);

// The source `candidate` emits for `region` (the target's generic emitter where it has none,
// or where `candidate` is null), once its declines() has passed: a lane whose host lacks its
// ISA is refused here with the reason. A lane's emitter alone writes source for any host
// (`fusor emit` does that), so every path that will run the kernel comes through here.
Expected<KernelSource> emit_candidate(const Target& target, const Candidate* candidate, const Region& region,
                                      const EmitOptions& options = {});

struct ExecuteOptions {
  EmitOptions emit;
  // Run a kernel without an oracle certificate (the output is then tagged "+unverified").
  bool no_verify = false;
  // The candidate whose lane to run (its own emitter, if it has one); nullptr: the
  // target's generic emitter.
  const Candidate* candidate = nullptr;
  double caller_atol = 1e-3;
  // When the target is unavailable or declines the region (E_EMIT_UNSUPPORTED), run the
  // reference evaluator and tag the result "reference" instead of failing.
  bool reference_fallback = true;
};

// Operands → emit → compile (cached) → run on one target. Operand errors are returned
// before anything is emitted or launched.
Expected<RunOutput> execute_on_target(const Target& target, const Region& region, std::span<const Tensor> operands,
                                      const ExecuteOptions& options = {});

struct VerifyReport;
// The artifact's stored certificate when it still applies, else a fresh verification
// (stored as its certificate). Never recompiles.
Expected<VerifyReport> ensure_verified(const Target& target, const Region& region, const Artifact& artifact,
                                       double caller_atol = 1e-3);

// The reference evaluator as a run, tagged "reference".
Expected<RunOutput> execute_reference(const Region& region, std::span<const Tensor> operands);

} // namespace fusor
