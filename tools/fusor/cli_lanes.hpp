// Helpers for the commands that run native lanes (run, emit, verify, explain): target
// names, --dims parsing, default problem sizes, the arbiter with the user's corpus.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fusor/arbiter.hpp"
#include "fusor/region.hpp"
#include "fusor/target.hpp"

namespace fusor::cli {

// "auto" → every registered target; a name → that target (E_BAD_ARGUMENT listing the
// registered names when unknown).
Expected<std::vector<std::string>> resolve_targets(const std::string& target);

// The target's seams by name (E_BAD_ARGUMENT when unknown) — for emit/verify.
Expected<const Target*> find_target(const std::string& name);

// A candidate's emitter, by lane name, for emit/verify --lane; nullopt name: the target's own.
Expected<const Candidate*> find_lane(const Region& region, const std::string& target, const std::string& lane);

// --dims: GEMM kinds "M,N,K"; attention "M,Nk,D" or "batch,heads,kv_heads,M,Nk,D,Dv";
// pointwise kinds and norm chains the full input shape, e.g. "64,256".
Expected<ProblemShape> parse_dims(const Region& region, const std::string& text);

// Modest sizes for generated inputs (examples, explain without --dims).
ProblemShape default_dims(const Region& region);

// The arbiter options the CLI flags describe.
struct LaneFlags {
  std::string target = "auto";
  std::string force;
  bool no_verify = false;
};
Expected<ArbiterOptions> arbiter_options(const LaneFlags& flags);

} // namespace fusor::cli
