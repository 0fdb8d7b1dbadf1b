// Emitting a lane's kernel for a run: its declines() first, then its own emitter.
#include "fusor/target.hpp"

namespace fusor {

Expected<KernelSource> emit_candidate(const Target& target, const Candidate* candidate, const Region& region,
                                      const EmitOptions& options) {
  if (!candidate) return target.emit(region, options);
  if (auto why = candidate->declines ? candidate->declines(region) : std::nullopt)
    return make_error(ErrorCode::emit_unsupported, "region " + std::string(region_kind_name(region_kind(region))) +
                                                       ", target " + target.name + ", lane " + candidate->name + ": " +
                                                       *why);
  return candidate->emit ? candidate->emit(region, options) : target.emit(region, options);
}

} // namespace fusor
