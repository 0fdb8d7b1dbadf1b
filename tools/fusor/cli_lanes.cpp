#include "cli_lanes.hpp"

#include <charconv>

namespace fusor::cli {

Expected<std::vector<std::string>> resolve_targets(const std::string& target) {
  const auto names = builtin_registry().target_names();
  if (target == "auto") return names;
  for (const auto& n : names)
    if (n == target) return std::vector<std::string>{target};
  std::string list;
  for (const auto& n : names) list += ", " + n;
  return make_error(ErrorCode::bad_argument, "unknown target '" + target + "' (targets: auto, reference" + list + ")");
}

Expected<const Target*> find_target(const std::string& name) {
  if (const Target* t = builtin_registry().target(name)) return t;
  FUSOR_TRY(resolve_targets(name)); // the error listing the names
  return make_error(ErrorCode::bad_argument, "target '" + name + "' has no seams here");
}

Expected<const Candidate*> find_lane(const Region& region, const std::string& target, const std::string& lane) {
  std::string names;
  for (const Candidate* c : builtin_registry().candidates(target, region_kind(region))) {
    if (c->name == lane) return c;
    names += (names.empty() ? "" : ", ") + c->name;
  }
  return make_error(ErrorCode::arbiter_forced_unknown, "no lane '" + lane + "' on target " + target + " for " +
                                                           std::string(region_kind_name(region_kind(region))) +
                                                           " regions (lanes: " + (names.empty() ? "none" : names) +
                                                           ")");
}

Expected<ProblemShape> parse_dims(const Region& region, const std::string& text) {
  std::vector<std::int64_t> v;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t end = std::min(text.find(',', pos), text.size());
    std::int64_t value = 0;
    const auto res = std::from_chars(text.data() + pos, text.data() + end, value);
    if (res.ec != std::errc{} || res.ptr != text.data() + end || value < 0)
      return make_error(ErrorCode::bad_argument, "--dims '" + text +
                                                     "': expected comma-separated non-negative "
                                                     "integers");
    v.push_back(value);
    pos = end + 1;
  }
  ProblemShape d;
  const std::string kind(region_kind_name(region_kind(region)));
  switch (region_kind(region)) {
  case RegionKind::fused:
  case RegionKind::matmul:
  case RegionKind::gated:
    if (v.size() != 3) return make_error(ErrorCode::bad_argument, kind + " regions take --dims M,N,K");
    d.M = v[0], d.N = v[1], d.K = v[2];
    return d;
  case RegionKind::attention:
    if (v.size() == 3) {
      d.heads = d.kv_heads = 1;
      d.M = v[0], d.Nk = v[1], d.D = d.Dv = v[2];
      return d;
    }
    if (v.size() != 7)
      return make_error(ErrorCode::bad_argument, "attention regions take --dims M,Nk,D or "
                                                 "batch,heads,kv_heads,M,Nk,D,Dv");
    d.batch = v[0], d.heads = v[1], d.kv_heads = v[2], d.M = v[3], d.Nk = v[4], d.D = v[5], d.Dv = v[6];
    return d;
  default: d.output = Shape(v.begin(), v.end()); return d;
  }
}

ProblemShape default_dims(const Region& region) {
  ProblemShape d;
  switch (region_kind(region)) {
  case RegionKind::fused:
  case RegionKind::matmul:
  case RegionKind::gated: d.M = 128, d.N = 96, d.K = 64; break;
  case RegionKind::attention: // 2 batches of 4 query heads over 2 KV heads; head dim 64
    d.batch = 2, d.heads = 4, d.kv_heads = 2, d.M = d.Nk = 64, d.D = d.Dv = 64;
    break;
  default: d.output = {64, 256}; break;
  }
  return d;
}

Expected<ArbiterOptions> arbiter_options(const LaneFlags& flags) {
  ArbiterOptions o;
  FUSOR_TRY_ASSIGN(o.targets, resolve_targets(flags.target));
  if (!flags.force.empty()) o.force = flags.force;
  o.no_verify = flags.no_verify;
  return o;
}

} // namespace fusor::cli
