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

// The first of dispatch_target_names(): an accelerator when one is available, else x86.
const Target* dispatch_target() {
  const auto names = dispatch_target_names();
  return names.empty() ? nullptr : builtin_registry().target(names.front());
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
