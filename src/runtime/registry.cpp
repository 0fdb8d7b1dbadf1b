#include <algorithm>

#include "fusor/target.hpp"

namespace fusor {

void Registry::add_target(Target target) {
  auto it = std::find_if(targets_.begin(), targets_.end(), [&](const Target& t) { return t.name == target.name; });
  if (it != targets_.end())
    *it = std::move(target);
  else
    targets_.push_back(std::move(target));
}

void Registry::add_candidate(Candidate candidate) {
  auto it = std::find_if(candidates_.begin(), candidates_.end(),
                         [&](const Candidate& c) { return c.name == candidate.name && c.kind == candidate.kind; });
  if (it != candidates_.end())
    *it = std::move(candidate);
  else
    candidates_.push_back(std::move(candidate));
}

const Target* Registry::target(std::string_view name) const {
  for (const auto& t : targets_)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::string> Registry::target_names() const {
  std::vector<std::string> names;
  for (const auto& t : targets_) names.push_back(t.name);
  return names;
}

std::vector<const Candidate*> Registry::candidates(std::string_view target, RegionKind kind) const {
  std::vector<const Candidate*> out;
  for (const auto& c : candidates_)
    if (c.kind == kind && (target.empty() || c.target == target)) out.push_back(&c);
  return out;
}

const Registry& builtin_registry() {
  static const Registry registry = [] {
    Registry r;
    register_builtin_targets(r);
    return r;
  }();
  return registry;
}

} // namespace fusor
