// Region dispatch for whole-graph runs: the ONE place a graph hands a region to a lane.
// When the arbiter lands, dispatch_region becomes its dispatch(region, operands).
#include "fusor/model_exec.hpp"

namespace fusor {

const Target* dispatch_target() {
  const Registry& reg = builtin_registry();
  const Target* host = nullptr;
  for (const auto& name : reg.target_names()) {
    const Target* t = reg.target(name);
    if (!t || !t->available()) continue;
    if (name != "x86") return t; // an accelerator, when one is present
    host = t;
  }
  return host;
}

Expected<RunOutput> dispatch_region(const Region& region, std::span<const Tensor> operands) {
  const Target* target = dispatch_target();
  if (target == nullptr) return execute_reference(region, operands);
  return execute_on_target(*target, region, operands);
}

} // namespace fusor
