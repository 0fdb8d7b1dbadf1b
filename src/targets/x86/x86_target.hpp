// The x86 target: emitter (x86_emitter), compile (host C compiler → cached .so) and
// runner (x86_runner), registered with one call.
#pragma once

#include "fusor/target.hpp"

namespace fusor::x86 {

Expected<Artifact> compile(const KernelSource& source);
Expected<RunOutput> run(const Artifact& artifact, const Region& region, std::span<const Tensor> operands);
void register_target(Registry& registry);

} // namespace fusor::x86
