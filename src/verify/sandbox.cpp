// The parent side of crash isolation: write a job file, run fusor-sandbox on it under a
// timeout, and turn how the child ended (exit status, signal, its FUSOR_SANDBOX lines on
// stderr, the result file) into a SandboxOutcome. Also the job/result wire format, which
// the child (tools/sandbox/main.cpp) shares.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include <csignal>
#include <unistd.h>

#include "codegen/abi.hpp"
#include "fusor/sandbox.hpp"
#include "fusor/toolchain.hpp"

namespace fusor {

namespace fs = std::filesystem;

// ---- wire format ----------------------------------------------------------------------

namespace sandbox_wire {

namespace {

constexpr std::string_view kJobMagic = "FUSOR-SANDBOX-JOB-1\n";
constexpr std::string_view kOutMagic = "FUSOR-SANDBOX-OUT-1\n";

template <class T> void put(std::string& s, T v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_bytes(std::string& s, std::string_view b) {
  put<std::uint64_t>(s, b.size());
  s.append(b);
}

// A bounds-checked cursor: every read names what it was reading when the bytes ran out.
class Reader {
public:
  Reader(std::string_view bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

  Status magic(std::string_view m) {
    if (bytes_.substr(0, m.size()) != m) return fail("bad magic");
    pos_ = m.size();
    return {};
  }
  template <class T> Expected<T> get(const char* field) {
    if (bytes_.size() - pos_ < sizeof(T)) return fail(std::string("truncated at ") + field);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  // A count of items of `item_size` bytes each that must still fit in the remaining bytes,
  // so a corrupt count cannot make the caller reserve terabytes.
  Expected<std::uint64_t> count(const char* field, std::size_t item_size) {
    FUSOR_TRY_ASSIGN(const auto n, get<std::uint64_t>(field));
    if (item_size != 0 && n > (bytes_.size() - pos_) / item_size)
      return fail(std::string(field) + " " + std::to_string(n) + " exceeds the remaining bytes");
    return n;
  }
  template <class Bytes = std::string> Expected<Bytes> bytes(const char* field) {
    FUSOR_TRY_ASSIGN(const auto n, count(field, 1));
    const std::string_view b = bytes_.substr(pos_, n);
    pos_ += n;
    return Bytes(b.begin(), b.end());
  }
  Status end() {
    if (pos_ != bytes_.size()) return fail(std::to_string(bytes_.size() - pos_) + " trailing bytes");
    return {};
  }

private:
  Error fail(const std::string& why) const {
    return make_error(ErrorCode::internal, "malformed sandbox " + what_ + " (" + std::to_string(bytes_.size()) +
                                               " bytes): " + why + " at byte " + std::to_string(pos_));
  }
  std::string_view bytes_;
  std::string what_;
  std::size_t pos_ = 0;
};

} // namespace

std::string encode_job(const Job& job) {
  std::string s(kJobMagic);
  put_bytes(s, job.so_path);
  put_bytes(s, job.entry);
  put<std::uint64_t>(s, job.calls.size());
  for (const auto& c : job.calls) {
    put<std::uint64_t>(s, c.operands.size());
    for (const auto& op : c.operands) put_bytes(s, {op.data(), op.size()});
    put<std::uint64_t>(s, c.dims.size());
    for (auto d : c.dims) put<std::int64_t>(s, d);
    put<std::int64_t>(s, c.output_elems);
  }
  return s;
}

Expected<Job> decode_job(std::string_view bytes) {
  Reader r(bytes, "job");
  FUSOR_TRY(r.magic(kJobMagic));
  Job job;
  FUSOR_TRY_ASSIGN(job.so_path, r.bytes("so path"));
  FUSOR_TRY_ASSIGN(job.entry, r.bytes("entry"));
  // Smallest encoded call: operand count, dims count, output size.
  FUSOR_TRY_ASSIGN(const auto ncalls, r.count("call count", 3 * sizeof(std::uint64_t)));
  job.calls.resize(ncalls);
  for (auto& c : job.calls) {
    FUSOR_TRY_ASSIGN(const auto nops, r.count("operand count", sizeof(std::uint64_t)));
    c.operands.resize(nops);
    for (auto& op : c.operands) {
      FUSOR_TRY_ASSIGN(op, r.bytes<ByteBuffer>("operand"));
    }
    FUSOR_TRY_ASSIGN(const auto ndims, r.count("dims count", sizeof(std::int64_t)));
    c.dims.resize(ndims);
    for (auto& d : c.dims) {
      FUSOR_TRY_ASSIGN(d, r.get<std::int64_t>("dim"));
    }
    FUSOR_TRY_ASSIGN(c.output_elems, r.get<std::int64_t>("output size"));
    if (c.output_elems < 0) return make_error(ErrorCode::internal, "malformed sandbox job: negative output size");
  }
  FUSOR_TRY(r.end());
  return job;
}

std::string encode_outputs(std::span<const std::vector<float>> outputs) {
  std::string s(kOutMagic);
  put<std::uint64_t>(s, outputs.size());
  for (const auto& o : outputs) {
    put<std::uint64_t>(s, o.size());
    s.append(reinterpret_cast<const char*>(o.data()), o.size() * sizeof(float));
  }
  return s;
}

Expected<std::vector<std::vector<float>>> decode_outputs(std::string_view bytes) {
  Reader r(bytes, "result");
  FUSOR_TRY(r.magic(kOutMagic));
  FUSOR_TRY_ASSIGN(const auto n, r.count("output count", sizeof(std::uint64_t)));
  std::vector<std::vector<float>> outputs(n);
  for (auto& o : outputs) {
    FUSOR_TRY_ASSIGN(const auto elems, r.count("element count", sizeof(float)));
    o.resize(elems);
    for (auto& v : o) {
      FUSOR_TRY_ASSIGN(v, r.get<float>("element"));
    }
  }
  FUSOR_TRY(r.end());
  return outputs;
}

} // namespace sandbox_wire

// ---- parent side ----------------------------------------------------------------------

namespace {

using namespace sandbox_wire;

// A private directory for one job, removed with everything in it on scope exit (also when
// the child crashed or was killed mid-write).
class JobDir {
public:
  static Expected<JobDir> create() {
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec); // $TMPDIR, else /tmp
    if (ec) return make_error(ErrorCode::io_error, "no temp directory for a sandbox job: " + ec.message());
    std::string tmpl = (tmp / "fusor-sandbox-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      return make_error(ErrorCode::io_error,
                        "cannot create a sandbox job dir in " + tmp.string() + ": " + std::strerror(errno));
    return JobDir(tmpl);
  }
  JobDir(JobDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  JobDir& operator=(JobDir&&) = delete;
  JobDir(const JobDir&) = delete;
  JobDir& operator=(const JobDir&) = delete;
  ~JobDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

private:
  explicit JobDir(fs::path p) : path_(std::move(p)) {}
  fs::path path_;
};

bool is_executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// The child's FUSOR_SANDBOX lines: progress, and at most one line saying why it stopped.
struct ChildReport {
  int last_call_begun = -1;
  std::optional<std::string> verdict; // the first non-progress line, without the prefix
};

ChildReport parse_child_stderr(const std::string& err) {
  constexpr std::string_view kPrefix = "FUSOR_SANDBOX ";
  ChildReport rep;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(kPrefix, 0) != 0) continue;
    const std::string rest = line.substr(kPrefix.size());
    int call = -1;
    if (std::sscanf(rest.c_str(), "call %d begin", &call) == 1)
      rep.last_call_begun = call;
    else if (!rep.verdict)
      rep.verdict = rest;
  }
  return rep;
}

// "fault access=write call=3 buffer=-1 offset=64 size=64 sig=11 via=guard" → its fields.
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream in(line);
  for (std::string tok; in >> tok;)
    if (auto eq = tok.find('='); eq != std::string::npos) f[tok.substr(0, eq)] = tok.substr(eq + 1);
  return f;
}

long long field_int(const std::map<std::string, std::string>& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? 0 : std::strtoll(it->second.c_str(), nullptr, 10);
}

std::string buffer_name(int buffer) {
  switch (buffer) {
  case kBufferOutput: return "the output";
  case kBufferOperandTable: return "the operand pointer table";
  case kBufferDims: return "the dims array";
  default: return "operand " + std::to_string(buffer);
  }
}

long long floor_div(long long a, long long b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }

// Where in the buffer: bytes always, elements where the element type is known.
std::string position(int buffer, long long offset, long long size) {
  std::string s = "byte " + std::to_string(offset) + " of a " + std::to_string(size) + "-byte buffer";
  const long long elem = buffer == kBufferOutput ? 4 : buffer == kBufferDims ? 8 : 0;
  if (elem != 0)
    s += " (element " + std::to_string(floor_div(offset, elem)) + " of " + std::to_string(size / elem) + ")";
  return s;
}

SandboxOutcome fault_outcome(const std::string& line, const ChildReport& rep) {
  const auto f = fields(line);
  const int buffer = static_cast<int>(field_int(f, "buffer"));
  const long long offset = field_int(f, "offset"), size = field_int(f, "size");
  const std::string access = f.count("access") != 0 ? f.at("access") : "access";
  const bool outside = offset < 0 || offset >= size;
  // Without the CPU's write bit (non-x86), an output-guard hit is most likely a write.
  const bool write = access == "write" || (access != "read" && buffer == kBufferOutput);

  SandboxOutcome o;
  o.failed_call = static_cast<int>(f.count("call") != 0 ? field_int(f, "call") : rep.last_call_begun);
  o.signal = static_cast<int>(field_int(f, "sig"));
  const std::string where =
      buffer_name(buffer) + " of call " + std::to_string(o.failed_call) + ": " + position(buffer, offset, size);
  if (write && outside) {
    o.kind = SandboxOutcome::Kind::out_of_bounds_write;
    o.detail = "out-of-bounds write to " + where;
    if (f.count("via") != 0 && f.at("via") == "canary")
      o.detail += " (found after the call: bytes before the start of the buffer were changed)";
  } else if (write) {
    o.kind = SandboxOutcome::Kind::crashed;
    o.detail = "write into read-only " + where + " (" + signal_display_name(o.signal) + ")";
  } else {
    o.kind = SandboxOutcome::Kind::crashed;
    o.detail = "out-of-bounds read of " + where + " (" + signal_display_name(o.signal) + ")";
  }
  return o;
}

std::string in_call(int call) { return call < 0 ? " before the first call" : " in call " + std::to_string(call); }

Expected<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot read " + p.string());
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return make_error(ErrorCode::io_error, "cannot read " + p.string());
  return s;
}

std::string trimmed(const std::string& s) {
  constexpr std::size_t kMax = 2000;
  std::string t = s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t.size() <= kMax ? t : t.substr(t.size() - kMax);
}

// Maps how the child ended to an outcome, or to an Error when the job itself was broken.
Expected<SandboxOutcome> interpret(const ProcessResult& pr, const fs::path& result_path, std::size_t ncalls,
                                   std::chrono::milliseconds timeout, const std::string& what) {
  const ChildReport rep = parse_child_stderr(pr.err);
  SandboxOutcome o;
  o.failed_call = rep.last_call_begun;
  if (pr.timed_out) {
    o.kind = SandboxOutcome::Kind::timed_out;
    o.detail = "timeout after " + std::to_string(timeout.count()) + " ms" + in_call(rep.last_call_begun);
    return o;
  }
  if (pr.term_signal != 0) {
    o.kind = SandboxOutcome::Kind::crashed;
    o.signal = pr.term_signal;
    o.detail = signal_display_name(pr.term_signal);
    return o;
  }
  const std::string verdict = rep.verdict.value_or("");
  auto says = [&](std::string_view head) { return verdict.rfind(head, 0) == 0; };
  if (pr.exit_code == kExitFault && says("fault ")) return fault_outcome(verdict, rep);
  if (pr.exit_code == kExitKernelError && says("kernel-error ")) {
    const auto f = fields(verdict);
    o.kind = SandboxOutcome::Kind::kernel_error;
    o.failed_call = static_cast<int>(field_int(f, "call"));
    o.return_code = static_cast<int>(field_int(f, "rc"));
    const std::string_view meaning = codegen::kernel_return_meaning(o.return_code);
    o.detail = "kernel returned " + std::to_string(o.return_code) +
               (meaning.empty() ? "" : " (" + std::string(meaning) + ")") + in_call(o.failed_call);
    return o;
  }
  if (pr.exit_code == kExitLoad && says("error "))
    return make_error(ErrorCode::runner_unavailable, what + ": " + verdict.substr(6));
  if ((pr.exit_code == kExitBadJob || pr.exit_code == kExitIo) && says("error "))
    return make_error(pr.exit_code == kExitIo ? ErrorCode::io_error : ErrorCode::internal,
                      what + ": " + verdict.substr(6));
  if (pr.exit_code == 0) {
    std::error_code ec;
    if (fs::exists(result_path, ec)) {
      FUSOR_TRY_ASSIGN(const std::string bytes, read_file(result_path));
      FUSOR_TRY_ASSIGN(o.outputs, decode_outputs(bytes));
      if (o.outputs.size() != ncalls)
        return make_error(ErrorCode::internal, what + ": the child returned " + std::to_string(o.outputs.size()) +
                                                   " outputs for " + std::to_string(ncalls) + " calls");
      o.kind = SandboxOutcome::Kind::ok;
      o.failed_call = -1;
      return o;
    }
  }
  // Any other ending (no verdict line, no result) means the kernel ended the process itself.
  if (rep.last_call_begun < 0)
    return make_error(ErrorCode::internal, what + ": fusor-sandbox exited with status " + std::to_string(pr.exit_code) +
                                               " before the first call\n" + trimmed(pr.err));
  o.kind = SandboxOutcome::Kind::crashed;
  o.detail = "the process exited with status " + std::to_string(pr.exit_code) + in_call(rep.last_call_begun) +
             " (the kernel called exit?)";
  return o;
}

} // namespace

std::string_view sandbox_kind_name(SandboxOutcome::Kind kind) {
  switch (kind) {
  case SandboxOutcome::Kind::ok: return "ok";
  case SandboxOutcome::Kind::kernel_error: return "kernel_error";
  case SandboxOutcome::Kind::crashed: return "crashed";
  case SandboxOutcome::Kind::timed_out: return "timed_out";
  case SandboxOutcome::Kind::out_of_bounds_write: return "out_of_bounds_write";
  }
  return "unknown";
}

std::string signal_display_name(int sig) {
  switch (sig) {
  case SIGSEGV: return "SIGSEGV";
  case SIGABRT: return "SIGABRT";
  case SIGFPE: return "SIGFPE";
  case SIGILL: return "SIGILL";
  case SIGBUS: return "SIGBUS";
  case SIGKILL: return "SIGKILL";
  case SIGTRAP: return "SIGTRAP";
  default: return "signal " + std::to_string(sig);
  }
}

Expected<fs::path> sandbox_executable() {
  if (const char* env = std::getenv("FUSOR_SANDBOX"); env != nullptr && *env != '\0') {
    if (is_executable_file(env)) return fs::path(env);
    return make_error(ErrorCode::runner_unavailable,
                      std::string("FUSOR_SANDBOX=") + env + " is not an executable file");
  }
  std::string searched;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / "fusor-sandbox";
    if (is_executable_file(beside)) return beside;
    searched += beside.string();
  }
#ifdef FUSOR_SANDBOX_BIN
  if (is_executable_file(FUSOR_SANDBOX_BIN)) return fs::path(FUSOR_SANDBOX_BIN);
  searched += std::string(searched.empty() ? "" : ", ") + FUSOR_SANDBOX_BIN;
#endif
  return make_error(ErrorCode::runner_unavailable,
                    "the fusor-sandbox executable was not found (FUSOR_SANDBOX is unset; looked at " + searched + ")");
}

Expected<SandboxOutcome> run_sandboxed(const fs::path& so_path, const std::string& entry,
                                       std::span<const KernelCall> calls, std::chrono::milliseconds timeout) {
  const std::string what = "sandboxed kernel '" + entry + "' from " + so_path.string();
  if (entry.empty())
    return make_error(ErrorCode::bad_argument, "run_sandboxed: empty entry name for " + so_path.string());
  if (timeout.count() <= 0)
    return make_error(ErrorCode::bad_argument,
                      what + ": timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  for (std::size_t i = 0; i < calls.size(); ++i)
    if (calls[i].output_elems < 0)
      return make_error(ErrorCode::bad_argument, what + ": call " + std::to_string(i) + " has output size " +
                                                     std::to_string(calls[i].output_elems));
  std::error_code ec;
  const fs::path so = fs::absolute(so_path, ec);
  if (ec || !fs::is_regular_file(so, ec))
    return make_error(ErrorCode::io_error, what + ": the shared object does not exist or is not a regular file");
  FUSOR_TRY_ASSIGN(const fs::path exe, sandbox_executable());

  FUSOR_TRY_ASSIGN(const JobDir dir, JobDir::create());
  const fs::path job_path = dir.path() / "job.bin", result_path = dir.path() / "result.bin";
  {
    Job job{so.string(), entry, std::vector<KernelCall>(calls.begin(), calls.end())};
    std::ofstream out(job_path, std::ios::binary);
    const std::string bytes = encode_job(job);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) return make_error(ErrorCode::io_error, what + ": cannot write the job file " + job_path.string());
  }
  // run_process puts the child in its own process group and SIGKILLs the group on timeout.
  FUSOR_TRY_ASSIGN(const ProcessResult pr,
                   run_process({exe.string(), job_path.string(), result_path.string()}, timeout));
  return interpret(pr, result_path, calls.size(), timeout, what);
}

} // namespace fusor
