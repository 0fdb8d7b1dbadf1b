// The one place targets are registered: adding a target adds one line here.
#include "fusor/target.hpp"
#include "targets/x86/x86_target.hpp"

namespace fusor {

void register_builtin_targets(Registry& registry) { x86::register_target(registry); }

} // namespace fusor
