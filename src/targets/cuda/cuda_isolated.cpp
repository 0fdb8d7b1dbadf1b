// The oracle's CUDA runner: the probe calls run in a freshly exec'd fusor-cuda-sandbox
// child, so a kernel that faults (illegal address, which poisons the CUDA context), hangs,
// or writes past its output is an outcome, never the caller's death. The job and result
// files use the x86 sandbox's wire format (sandbox_wire); the entry field carries the
// kernel name and its launch line.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "fusor/toolchain.hpp"
#include "targets/cuda/cuda_launch.hpp"
#include "targets/cuda/cuda_sandbox_protocol.hpp"
#include "targets/cuda/cuda_target.hpp"

#ifndef FUSOR_CUDA_SANDBOX_BIN
#define FUSOR_CUDA_SANDBOX_BIN ""
#endif

namespace fusor::cuda {

namespace fs = std::filesystem;

namespace {

bool is_executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

class TempDir {
public:
  static Expected<TempDir> create() {
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    if (ec) return make_error(ErrorCode::io_error, "no temp directory for a cuda sandbox job: " + ec.message());
    std::string tmpl = (tmp / "fusor-cuda-sandbox-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      return make_error(ErrorCode::io_error, "cannot create " + tmpl + ": " + std::strerror(errno));
    return TempDir(tmpl);
  }
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

private:
  explicit TempDir(fs::path p) : path_(std::move(p)) {}
  fs::path path_;
};

// The child's last protocol line, without its prefix.
std::string last_line(const std::string& err) {
  std::string found;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(sandbox_protocol::kLinePrefix)) found = line.substr(sandbox_protocol::kLinePrefix.size());
  return found;
}

int field(const std::string& line, const std::string& key, int fallback) {
  const size_t at = line.find(key + "=");
  if (at == std::string::npos) return fallback;
  return std::atoi(line.c_str() + at + key.size() + 1);
}

} // namespace

Expected<fs::path> sandbox_executable() {
  if (const char* env = std::getenv("FUSOR_CUDA_SANDBOX"); env && *env) {
    if (is_executable_file(env)) return fs::path(env);
    return make_error(ErrorCode::runner_unavailable,
                      std::string("FUSOR_CUDA_SANDBOX=") + env + " is not an executable");
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && is_executable_file(self.parent_path() / "fusor-cuda-sandbox"))
    return self.parent_path() / "fusor-cuda-sandbox";
  if (std::string_view(FUSOR_CUDA_SANDBOX_BIN).size() && is_executable_file(FUSOR_CUDA_SANDBOX_BIN))
    return fs::path(FUSOR_CUDA_SANDBOX_BIN);
  return make_error(ErrorCode::runner_unavailable,
                    "target cuda: the fusor-cuda-sandbox executable was not found (set FUSOR_CUDA_SANDBOX)");
}

Expected<SandboxOutcome> run_isolated(const Artifact& artifact, std::span<const KernelCall> calls,
                                      std::chrono::milliseconds timeout) {
  FUSOR_TRY(available()); // no GPU: decline before starting anything
  FUSOR_TRY_ASSIGN(const fs::path exe, sandbox_executable());
  FUSOR_TRY_ASSIGN(const LaunchSpec spec, parse_launch(artifact.source.source));
  FUSOR_TRY_ASSIGN(TempDir dir, TempDir::create());
  sandbox_wire::Job job{artifact.path.string(), artifact.source.entry + "\n" + launch_line(spec),
                        std::vector<KernelCall>(calls.begin(), calls.end())};
  const fs::path job_path = dir.path() / "job.bin", result_path = dir.path() / "result.bin";
  {
    std::ofstream f(job_path, std::ios::binary);
    const std::string bytes = sandbox_wire::encode_job(job);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) return make_error(ErrorCode::io_error, "cannot write the cuda sandbox job " + job_path.string());
  }
  FUSOR_TRY_ASSIGN(const ProcessResult pr,
                   run_process({exe.string(), job_path.string(), result_path.string()}, timeout));
  SandboxOutcome out;
  const std::string line = last_line(pr.err);
  if (pr.timed_out) {
    out.kind = SandboxOutcome::Kind::timed_out;
    out.failed_call = field(line, "call", -1);
    out.detail = "timeout after " + std::to_string(timeout.count()) + " ms";
    return out;
  }
  if (pr.term_signal != 0) {
    out.kind = SandboxOutcome::Kind::crashed;
    out.signal = pr.term_signal;
    out.failed_call = field(line, "call", -1);
    out.detail = signal_display_name(pr.term_signal) + " in the cuda sandbox";
    return out;
  }
  using namespace sandbox_protocol;
  switch (pr.exit_code) {
  case 0: {
    std::ifstream f(result_path, std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(f), {});
    FUSOR_TRY_ASSIGN(out.outputs, sandbox_wire::decode_outputs(bytes));
    if (out.outputs.size() != calls.size())
      return make_error(ErrorCode::internal, "the cuda sandbox returned " + std::to_string(out.outputs.size()) +
                                                 " outputs for " + std::to_string(calls.size()) + " calls");
    return out;
  }
  case sandbox_wire::kExitFault:
    out.kind = line.starts_with("oob") ? SandboxOutcome::Kind::out_of_bounds_write : SandboxOutcome::Kind::crashed;
    out.failed_call = field(line, "call", -1);
    out.detail = line;
    return out;
  case sandbox_wire::kExitKernelError:
    out.kind = SandboxOutcome::Kind::kernel_error;
    out.failed_call = field(line, "call", -1);
    out.return_code = field(line, "rc", -1);
    out.detail = line;
    return out;
  case kExitUnavailable: return make_error(ErrorCode::runner_unavailable, "target cuda (sandbox child): " + line);
  default:
    return make_error(ErrorCode::internal, "the cuda sandbox exited with " + std::to_string(pr.exit_code) + ": " +
                                               (line.empty() ? pr.err : line));
  }
}

} // namespace fusor::cuda
