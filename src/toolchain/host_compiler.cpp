// The host C compiler: find it, probe what it can do, and compile a KernelSource into a
// cached shared object (SPEC §3 "Compile" and "Cache" for target x86).
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <unistd.h>

#include "fusor/toolchain.hpp"

namespace fusor {

namespace fs = std::filesystem;

namespace {

constexpr auto kVersionTimeout = std::chrono::seconds(30);
constexpr auto kCompileTimeout = std::chrono::seconds(120);
constexpr std::size_t kMaxDiagnostics = 4000;

// No -ffast-math: it lets the compiler assume no NaN/Inf, and kernels must propagate them
// exactly as the reference does. -fno-math-errno only drops errno writes from libm calls.
// -ffp-contract=fast: ISO C mode (-std=c11) otherwise forbids fusing a * b + c into one FMA,
// which doubles the instructions of the polynomial math helpers; an FMA rounds once, so
// results only get closer to the double reference (the oracle's budgets stand).
// -fno-trapping-math: kernels never read the floating-point exception flags, and without it
// GCC will not if-convert the math helpers' selects on AVX2 (no masked ops), so a loop over
// sigmoid or tanh stayed scalar there. Results are unchanged: it permits speculation, not
// reassociation.
const std::vector<std::string> kBaseFlags = {"-O3",
                                             "-march=native",
                                             "-fPIC",
                                             "-shared",
                                             "-std=c11",
                                             "-fno-math-errno",
                                             "-fno-trapping-math",
                                             "-ffp-contract=fast",
                                             "-Wno-unused"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string trim_diagnostics(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  if (t.size() <= kMaxDiagnostics) return t;
  return t.substr(0, kMaxDiagnostics) + "\n... (" + std::to_string(t.size() - kMaxDiagnostics) +
         " more bytes of compiler output)";
}

bool is_executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

Expected<std::string> resolve_program(const std::string& name, const std::string& origin) {
  if (name.find('/') != std::string::npos) {
    std::error_code ec;
    fs::path p = fs::absolute(name, ec);
    if (!ec && is_executable_file(p)) return p.string();
    return make_error(ErrorCode::compile_failed,
                      "host C compiler '" + name + "' (" + origin + ") does not exist or is not executable");
  }
  const char* path_env = std::getenv("PATH");
  const std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::istringstream dirs(search);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (is_executable_file(candidate)) {
      std::error_code ec;
      return fs::absolute(candidate, ec).string();
    }
  }
  return make_error(ErrorCode::compile_failed,
                    "host C compiler '" + name + "' (" + origin + ") not found on PATH (searched: " + search + ")");
}

// A private scratch dir, removed on scope exit.
class ScratchDir {
public:
  static Expected<ScratchDir> create(const fs::path& parent) {
    std::string tmpl = (parent / ".tmp-src-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      return make_error(ErrorCode::io_error, "cannot create a scratch dir in " + parent.string());
    return ScratchDir(tmpl);
  }
  ScratchDir(ScratchDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  ScratchDir& operator=(ScratchDir&&) = delete;
  ScratchDir(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

private:
  explicit ScratchDir(fs::path p) : path_(std::move(p)) {}
  fs::path path_;
};

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return make_error(ErrorCode::io_error, "cannot write " + path.string());
  return {};
}

// Compiles `source` (saved as <scratch>/<name>.c) to `out` with the compiler's flags.
Status run_compile(const HostCompiler& cc, const std::string& source, const std::string& name,
                   const fs::path& scratch_parent, const fs::path& out, const std::string& what,
                   const KernelSource* kernel = nullptr) {
  FUSOR_TRY_ASSIGN(ScratchDir scratch, ScratchDir::create(scratch_parent));
  // Named after the entry so diagnostics read "fused_gemm.c:12:3: error: ...".
  const fs::path src = scratch.path() / (name + ".c");
  FUSOR_TRY(write_text(src, source));
  std::vector<std::string> argv = {cc.path};
  argv.insert(argv.end(), cc.flags.begin(), cc.flags.end());
  if (kernel) {
    argv.insert(argv.end(), kernel->compile_flags.begin(), kernel->compile_flags.end());
    for (const auto& dir : kernel->include_dirs) argv.push_back("-I" + dir);
  }
  argv.insert(argv.end(), {"-o", out.string(), src.string()});
  if (kernel) {
    for (const auto& dir : kernel->library_dirs) argv.insert(argv.end(), {"-L" + dir, "-Wl,-rpath," + dir});
    for (const auto& lib : kernel->link_libs) argv.push_back("-l" + lib);
  }
  argv.push_back("-lm");
  auto run = run_process(argv, kCompileTimeout);
  if (!run.ok())
    return make_error(ErrorCode::compile_failed,
                      what + ": cannot run the compiler: " + run.error().str() + "\n  command: " + join(argv));
  if (run->timed_out)
    return make_error(ErrorCode::compile_failed, what + ": the compiler ran past " +
                                                     std::to_string(kCompileTimeout.count()) + " s and was killed" +
                                                     "\n  command: " + join(argv));
  if (!run->succeeded()) {
    const std::string how = run->term_signal != 0 ? "was killed by signal " + std::to_string(run->term_signal)
                                                  : "exited with status " + std::to_string(run->exit_code);
    return make_error(ErrorCode::compile_failed, what + ": the compiler " + how + "\n  command: " + join(argv) + "\n" +
                                                     trim_diagnostics(run->err + run->out));
  }
  return {};
}

std::string c_identifier(const std::string& s) {
  std::string id;
  for (char c : s)
    id.push_back((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ? c : '_');
  return id.empty() ? std::string("kernel") : id.substr(0, 64);
}

} // namespace

std::string HostCompiler::identity() const {
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  return "cc=" + path + "; real=" + (ec ? std::string("?") : real.string()) + "; version=" + version +
         "; flags=" + join(flags) + "; openmp=" + (openmp ? "on" : "off") + "; isa=" + host_isa();
}

Expected<HostCompiler> detect_host_compiler() {
  const char* env = std::getenv("FUSOR_CC");
  const bool from_env = env != nullptr && *env != '\0';
  const std::string name = from_env ? env : "cc";
  FUSOR_TRY_ASSIGN(std::string path, resolve_program(name, from_env ? "from FUSOR_CC" : "the default"));

  auto ver = run_process({path, "--version"}, kVersionTimeout);
  if (!ver.ok() || !ver->succeeded())
    return make_error(ErrorCode::compile_failed, "host C compiler " + path + " failed to run '--version': " +
                                                     (ver.ok() ? trim_diagnostics(ver->err) : ver.error().str()));
  HostCompiler cc;
  cc.path = path;
  cc.version = ver->out.substr(0, ver->out.find('\n'));

  // Probing -fopenmp costs a compile; one probe per compiler per process is enough.
  static std::mutex memo_mutex;
  static std::map<std::string, HostCompiler> memo;
  const std::string memo_key = path + "\n" + cc.version;
  {
    std::lock_guard<std::mutex> lock(memo_mutex);
    if (auto it = memo.find(memo_key); it != memo.end()) return it->second;
  }

  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  if (ec) return make_error(ErrorCode::io_error, "no temp directory for the compiler probe: " + ec.message());
  FUSOR_TRY_ASSIGN(ScratchDir probe_dir, ScratchDir::create(tmp));
  const std::string probe = "#include <omp.h>\nint fusor_probe(void) { return omp_get_max_threads(); }\n";
  const fs::path probe_out = probe_dir.path() / "probe.so";

  cc.flags = kBaseFlags;
  cc.flags.insert(cc.flags.begin() + 4, "-fopenmp");
  cc.openmp = true;
  if (!run_compile(cc, probe, "probe", probe_dir.path(), probe_out, "openmp probe").ok()) {
    // Kernels then run single-threaded; identity() records openmp=off.
    cc.flags = kBaseFlags;
    cc.openmp = false;
    Status plain = run_compile(cc, "int fusor_probe(void) { return 1; }\n", "probe", probe_dir.path(), probe_out,
                               "host C compiler " + path + " cannot build a shared object");
    if (!plain.ok()) return plain.error();
  }
  std::lock_guard<std::mutex> lock(memo_mutex);
  memo.emplace(memo_key, cc);
  return cc;
}

std::string shared_object_cache_key(const KernelSource& src, const HostCompiler& cc) {
  return DiskCache::make_key(std::vector<std::string>{
      "fusor-host-so-v1", src.source, src.entry, src.lang, std::string(spec_policy_name(src.spec)), src.shape_key,
      src.layouts, std::string(dtype_name(src.dtype)), src.target, src.lane, join(src.link_libs),
      join(src.include_dirs), join(src.library_dirs), join(src.compile_flags), cc.identity()});
}

Expected<CacheEntry> compile_shared_object(const KernelSource& src, const HostCompiler& cc, DiskCache& cache) {
  if (src.lang != "c")
    return make_error(ErrorCode::bad_argument, "the host C compiler compiles lang \"c\"; kernel '" + src.entry +
                                                   "' for lane " + src.lane + " has lang \"" + src.lang + "\"");
  const std::string what = "compiling kernel '" + src.entry + "' (lane " + src.lane + ", " + src.shape_key + ")";
  nlohmann::json meta = {{"lane", src.lane},
                         {"target", src.target},
                         {"entry", src.entry},
                         {"spec", spec_policy_name(src.spec)},
                         {"shape_key", src.shape_key},
                         {"layouts", src.layouts},
                         {"dtype", dtype_name(src.dtype)},
                         {"region_text", src.region_text},
                         {"compiler", cc.identity()}};
  return cache.get_or_build(
      shared_object_cache_key(src, cc), "so",
      [&](const fs::path& out) {
        return run_compile(cc, src.source, c_identifier(src.entry), out.parent_path(), out, what, &src);
      },
      meta);
}

} // namespace fusor
