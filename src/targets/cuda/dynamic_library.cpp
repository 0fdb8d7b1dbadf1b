#include "targets/cuda/dynamic_library.hpp"

#include <cstdlib>

namespace fusor::cuda {

OpenedLibrary open_first_library(const char* env, const std::vector<std::string>& candidates) {
  std::vector<std::string> all;
  if (const char* value = env ? std::getenv(env) : nullptr; value && *value) all.emplace_back(value);
  all.insert(all.end(), candidates.begin(), candidates.end());
  OpenedLibrary out;
  for (const auto& c : all) {
    if ((out.handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      out.path = c;
      return out;
    }
    const char* why = ::dlerror();
    out.tried += "\n  " + c + ": " + (why ? why : "not found");
  }
  return out;
}

} // namespace fusor::cuda
