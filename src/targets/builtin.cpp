// The one place targets are registered: adding a target adds one line here.
#include "fusor/target.hpp"
#include "targets/x86/x86_target.hpp"
#ifdef FUSOR_HAVE_CUDA // set by CMake when the CUDA toolkit (NVRTC) is found
#include "targets/cuda/cuda_target.hpp"
#endif

namespace fusor {

void register_builtin_targets(Registry& registry) {
  x86::register_target(registry);
#ifdef FUSOR_HAVE_CUDA
  cuda::register_target(registry);
#endif
}

} // namespace fusor
