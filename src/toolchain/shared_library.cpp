// RAII over dlopen/dlclose. RTLD_LOCAL keeps one kernel's symbols from resolving another's;
// RTLD_NOW reports a missing dependency at load time, not at the first call.
#include <dlfcn.h>

#include <utility>

#include "fusor/toolchain.hpp"

namespace fusor {

namespace {

// OpenMP runtimes keep idle worker threads alive after a parallel region. If dlclose of the
// last kernel using one unloaded it, those threads would run unmapped code: pin whichever
// runtime a kernel pulled in (RTLD_NOLOAD: only if already loaded) for the process's life.
void pin_openmp_runtime() {
  for (const char* rt : {"libgomp.so.1", "libomp.so.5", "libomp.so"})
    if (void* h = ::dlopen(rt, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) ::dlclose(h);
}

std::string dl_error_text() {
  const char* e = ::dlerror();
  return e != nullptr ? std::string(e) : std::string("unknown dlerror");
}

} // namespace

Expected<SharedLibrary> SharedLibrary::load(const std::filesystem::path& path) {
  // dlopen without a slash searches the library path; a relative artifact path must not.
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return make_error(ErrorCode::runner_unavailable, "cannot resolve " + path.string() + ": " + ec.message());
  ::dlerror(); // clear a stale error
  void* handle = ::dlopen(abs.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    return make_error(ErrorCode::runner_unavailable, "cannot load " + abs.string() + ": " + dl_error_text());
  pin_openmp_runtime();
  return SharedLibrary(handle, abs);
}

SharedLibrary::SharedLibrary(SharedLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) ::dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

SharedLibrary::~SharedLibrary() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

Expected<void*> SharedLibrary::symbol(const std::string& name) const {
  if (handle_ == nullptr)
    return make_error(ErrorCode::runner_unavailable, "symbol '" + name + "' looked up in a moved-from SharedLibrary");
  ::dlerror();
  void* sym = ::dlsym(handle_, name.c_str());
  // A symbol may legitimately be NULL; dlerror distinguishes "absent".
  if (const char* e = ::dlerror(); e != nullptr)
    return make_error(ErrorCode::runner_unavailable,
                      "symbol '" + name + "' not found in " + path_.string() + ": " + std::string(e));
  if (sym == nullptr)
    return make_error(ErrorCode::runner_unavailable, "symbol '" + name + "' in " + path_.string() + " is NULL");
  return sym;
}

} // namespace fusor
