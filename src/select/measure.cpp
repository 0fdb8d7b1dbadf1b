// Real autotuning measurements: each candidate's kernel call alone, interleaved.
#include <algorithm>

#include "fusor/arbiter.hpp"

namespace fusor {
namespace {

Timing summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double q) { return samples[static_cast<size_t>(q * static_cast<double>(samples.size() - 1))]; };
  return {at(0.5), (at(0.75) - at(0.25)) / 2.0};
}

} // namespace

Expected<std::map<std::string, Timing>> measure_candidates(const Registry& registry,
                                                           std::span<const Candidate* const> candidates,
                                                           const Region& region, std::span<const Tensor> operands,
                                                           int repetitions) {
  struct Bound {
    const Candidate* candidate;
    const Target* target;
    Artifact artifact;
    std::vector<double> samples;
  };
  std::vector<Bound> bound;
  for (const Candidate* c : candidates) {
    const Target* target = registry.target(c->target);
    if (!target) return make_error(ErrorCode::internal, "candidate " + c->name + " has no target " + c->target);
    FUSOR_TRY_ASSIGN(KernelSource src, emit_candidate(*target, c, region));
    FUSOR_TRY_ASSIGN(Artifact artifact, target->compile(src));
    FUSOR_TRY(target->run(artifact, region, operands)); // warm-up: loads the code, faults pages in
    bound.push_back({c, target, std::move(artifact), {}});
  }
  for (int rep = 0; rep < repetitions; ++rep)
    for (auto& b : bound) {
      FUSOR_TRY_ASSIGN(RunOutput out, b.target->run(b.artifact, region, operands));
      b.samples.push_back(out.time_ms);
    }
  std::map<std::string, Timing> timings;
  for (auto& b : bound) timings[b.candidate->name] = summarize(std::move(b.samples));
  return timings;
}

} // namespace fusor
