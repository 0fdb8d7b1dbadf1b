// Opening NVIDIA's run-time libraries (libcuda, libcublasLt) with dlopen: the first of
// several candidate paths that loads, and binding entry points by name. They are loaded at
// run time so a fusor built with the toolkit starts on machines without them.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace fusor::cuda {

struct OpenedLibrary {
  void* handle = nullptr; // nullptr: none of the candidates loaded
  std::string path;       // the candidate that loaded
  std::string tried;      // "\n  <candidate>: <dlerror>" per failed candidate
};

// `env` (when set and non-empty) is tried before the candidates.
OpenedLibrary open_first_library(const char* env, const std::vector<std::string>& candidates);

// Binds `name` into `slot`; a missing symbol is appended to `missing` (comma separated).
template <class F> void bind_symbol(void* lib, F& slot, const char* name, std::string& missing) {
  slot = reinterpret_cast<F>(::dlsym(lib, name));
  if (!slot) missing += std::string(missing.empty() ? "" : ", ") + name;
}

} // namespace fusor::cuda
