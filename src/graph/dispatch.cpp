// Region dispatch for whole-graph runs: the ONE place a graph hands a region to a lane —
// the arbiter, over every registered target, with the user's autotuning corpus.
#include "fusor/arbiter.hpp"
#include "fusor/model_exec.hpp"

namespace fusor {
namespace {

Arbiter& model_arbiter() {
  static std::optional<Corpus> corpus = [] {
    auto path = Corpus::default_path();
    return path ? std::optional<Corpus>(Corpus::load(*path)) : std::nullopt;
  }();
  static Arbiter arbiter(builtin_registry(), corpus ? &*corpus : nullptr);
  return arbiter;
}

} // namespace

// The target named in model reports: an accelerator when one is available, else x86.
const Target* dispatch_target() {
  const Registry& reg = builtin_registry();
  const Target* host = nullptr;
  for (const auto& name : reg.target_names()) {
    const Target* t = reg.target(name);
    if (!t || !t->available()) continue;
    if (name != "x86") return t;
    host = t;
  }
  return host;
}

std::vector<std::string> dispatch_target_names() {
  std::vector<std::string> names, host;
  const Registry& reg = builtin_registry();
  for (const auto& name : reg.target_names()) {
    const Target* t = reg.target(name);
    if (t && t->available()) (name == "x86" ? host : names).push_back(name);
  }
  names.insert(names.end(), host.begin(), host.end());
  return names;
}

Expected<RunOutput> dispatch_region(const Region& region, std::span<const Tensor> operands) {
  ArbiterOptions options;
  options.progress = false;
  FUSOR_TRY_ASSIGN(Dispatch d, model_arbiter().dispatch(region, operands, options));
  return std::move(d.run);
}

} // namespace fusor
