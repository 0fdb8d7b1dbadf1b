// fusor-sandbox JOB RESULT: the child half of crash isolation (include/fusor/sandbox.hpp).
// Loads the job's shared object, runs each call on guard-paged buffers, and reports how it
// went through its exit status, "FUSOR_SANDBOX ..." lines on stderr, and the RESULT file.
// Not meant to be run by hand; run_sandboxed starts it.
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <csignal>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <ucontext.h>
#include <unistd.h>

#include "fusor/sandbox.hpp"
#include "fusor/toolchain.hpp"

namespace {

using namespace fusor;
using namespace fusor::sandbox_wire;
using KernelFn = int (*)(const void* const*, float*, const std::int64_t*);

constexpr unsigned char kCanary = 0xa5;

// ---- async-signal-safe output ---------------------------------------------------------

// A fixed line buffer written with one write(2): no malloc, no stdio, usable in a handler.
class Line {
public:
  Line& operator<<(const char* s) {
    while (*s != '\0' && n_ < sizeof buf_ - 1) buf_[n_++] = *s++;
    return *this;
  }
  Line& operator<<(long long v) {
    char tmp[24];
    int k = 0;
    const bool neg = v < 0;
    unsigned long long u = neg ? 0ULL - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
    do {
      tmp[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (neg) tmp[k++] = '-';
    while (k > 0 && n_ < sizeof buf_ - 1) buf_[n_++] = tmp[--k];
    return *this;
  }
  void emit() {
    buf_[n_++] = '\n';
    for (std::size_t off = 0; off < n_;) {
      const ssize_t w = ::write(STDERR_FILENO, buf_ + off, n_ - off);
      if (w <= 0 && errno != EINTR) return;
      if (w > 0) off += static_cast<std::size_t>(w);
    }
  }

private:
  char buf_[512];
  std::size_t n_ = 0;
};

[[noreturn]] void fail(int status, const char* kind, const std::string& message) {
  (Line() << "FUSOR_SANDBOX error " << kind << ": " << message.c_str()).emit();
  ::_exit(status);
}

// ---- guarded buffers ------------------------------------------------------------------

// What the fault handler needs to know about one mapping.
struct Guarded {
  std::uintptr_t map_begin, start, end, map_end;
  int buffer;
};

// Published for the handler while a call runs: count is zeroed before the table changes.
Guarded g_regions[1024];
std::atomic<int> g_region_count{0};
std::atomic<int> g_call{-1};

// One buffer between two kGuardBytes PROT_NONE zones, its end touching the trailing one.
class GuardedBuffer {
public:
  GuardedBuffer(std::size_t size, int buffer) : size_(size), buffer_(buffer) {
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    guard_ = (kGuardBytes + page - 1) / page * page;
    data_len_ = (size + page - 1) / page * page;
    map_len_ = 2 * guard_ + data_len_;
    void* m = ::mmap(nullptr, map_len_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
      fail(kExitIo, "io", "cannot map " + std::to_string(map_len_) + " bytes for a buffer: " + std::strerror(errno));
    map_ = static_cast<char*>(m);
    char* data = map_ + guard_;
    if (data_len_ != 0 && ::mprotect(data, data_len_, PROT_READ | PROT_WRITE) != 0)
      fail(kExitIo, "io", std::string("mprotect: ") + std::strerror(errno));
    start_ = data + data_len_ - size;
    std::memset(data, kCanary, data_len_ - size); // the slack before the start
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  ~GuardedBuffer() { ::munmap(map_, map_len_); }

  char* start() const { return start_; }
  void make_read_only() {
    if (data_len_ != 0 && ::mprotect(map_ + guard_, data_len_, PROT_READ) != 0)
      fail(kExitIo, "io", std::string("mprotect: ") + std::strerror(errno));
  }
  Guarded region() const {
    const auto b = reinterpret_cast<std::uintptr_t>(map_);
    const auto s = reinterpret_cast<std::uintptr_t>(start_);
    return Guarded{b, s, s + size_, b + map_len_, buffer_};
  }
  // Offset from the start of the first changed slack byte (negative), or 0 if intact.
  long long slack_damage() const {
    for (const char* p = map_ + guard_; p < start_; ++p)
      if (static_cast<unsigned char>(*p) != kCanary) return -static_cast<long long>(start_ - p);
    return 0;
  }
  std::size_t size() const { return size_; }

private:
  std::size_t size_;
  int buffer_;
  std::size_t guard_ = 0, data_len_ = 0, map_len_ = 0;
  char* map_ = nullptr;
  char* start_ = nullptr;
};

// ---- fault handler --------------------------------------------------------------------

[[noreturn]] void report_fault(const char* access, int call, const Guarded& r, long long offset, int sig,
                               const char* via) {
  (Line() << "FUSOR_SANDBOX fault access=" << access << " call=" << static_cast<long long>(call)
          << " buffer=" << static_cast<long long>(r.buffer) << " offset=" << offset << " size="
          << static_cast<long long>(r.end - r.start) << " sig=" << static_cast<long long>(sig) << " via=" << via)
      .emit();
  ::_exit(kExitFault);
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
  // si_code > 0: raised by the kernel for this access, so si_addr is meaningful.
  if (info->si_code > 0) {
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const int n = g_region_count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      const Guarded& r = g_regions[i];
      if (addr < r.map_begin || addr >= r.map_end) continue;
      const char* access = "access";
#if defined(__x86_64__)
      // Bit 1 of the page-fault error code is set for writes.
      const auto* uc = static_cast<const ucontext_t*>(uctx);
      access = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0 ? "write" : "read";
#else
      (void)uctx;
#endif
      const long long offset = static_cast<long long>(addr) - static_cast<long long>(r.start);
      report_fault(access, g_call.load(), r, offset, sig, "guard");
    }
  }
  // Not ours: die of this signal as if no handler had been installed.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig); // pending until the handler returns (the signal is blocked meanwhile)
}

void install_fault_handlers() {
  // Kernels get no core dumps: crashes are expected here and reported as outcomes.
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  // An alternate stack, so a stack overflow in the main thread still reaches the handler.
  constexpr std::size_t kAltStack = 256 * 1024;
  void* alt = ::mmap(nullptr, kAltStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (alt != MAP_FAILED) {
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = kAltStack;
    ::sigaltstack(&ss, nullptr);
  }
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGSEGV, &sa, nullptr);
  ::sigaction(SIGBUS, &sa, nullptr);
}

// ---- the job --------------------------------------------------------------------------

std::string read_all(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(kExitBadJob, "job", std::string("cannot read the job file ") + path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(kExitBadJob, "job", std::string("cannot read the job file ") + path);
  return s;
}

// Runs one call on fresh guarded buffers; returns its output or ends the process.
std::vector<float> run_call(KernelFn fn, const KernelCall& call, int index) {
  (Line() << "FUSOR_SANDBOX call " << static_cast<long long>(index) << " begin").emit();
  if (call.operands.size() + 3 > std::size(g_regions))
    fail(kExitBadJob, "job", "call " + std::to_string(index) + " has too many operands");

  std::vector<std::unique_ptr<GuardedBuffer>> inputs;
  for (std::size_t k = 0; k < call.operands.size(); ++k) {
    auto b = std::make_unique<GuardedBuffer>(call.operands[k].size(), static_cast<int>(k));
    std::memcpy(b->start(), call.operands[k].data(), call.operands[k].size());
    b->make_read_only();
    inputs.push_back(std::move(b));
  }
  GuardedBuffer table(inputs.size() * sizeof(void*), kBufferOperandTable);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const void* p = inputs[k]->start();
    std::memcpy(table.start() + k * sizeof p, &p, sizeof p);
  }
  table.make_read_only();
  GuardedBuffer dims(call.dims.size() * sizeof(std::int64_t), kBufferDims);
  std::memcpy(dims.start(), call.dims.data(), dims.size());
  dims.make_read_only();
  const std::size_t n = static_cast<std::size_t>(call.output_elems);
  GuardedBuffer out(n * sizeof(float), kBufferOutput);
  for (std::size_t i = 0; i < n; ++i) std::memcpy(out.start() + i * sizeof(float), &kUnwrittenBits, sizeof(float));

  int count = 0;
  for (const auto& b : inputs) g_regions[count++] = b->region();
  for (const GuardedBuffer* b : {&table, &dims, &out}) g_regions[count++] = b->region();
  g_call.store(index);
  g_region_count.store(count, std::memory_order_release);

  const int rc = fn(reinterpret_cast<const void* const*>(table.start()), reinterpret_cast<float*>(out.start()),
                    reinterpret_cast<const std::int64_t*>(dims.start()));
  g_region_count.store(0, std::memory_order_release);

  // A write just before the output lands in its slack without faulting: check the canary.
  if (const long long off = out.slack_damage(); off != 0) report_fault("write", index, out.region(), off, 0, "canary");
  if (rc != 0) {
    (Line() << "FUSOR_SANDBOX kernel-error call=" << static_cast<long long>(index)
            << " rc=" << static_cast<long long>(rc))
        .emit();
    ::_exit(kExitKernelError);
  }
  std::vector<float> result(n);
  std::memcpy(result.data(), out.start(), n * sizeof(float));
  return result;
}

} // namespace

// In sanitizer builds, leave fatal signals to this program (it classifies them itself or
// dies by them so the parent can name the signal); otherwise ASan would turn a kernel's
// SIGFPE or SIGSEGV into its own report and exit status 1. Unused in other builds.
extern "C" const char* __asan_default_options() {
  return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0:allow_user_segv_handler=1";
}

int main(int argc, char** argv) {
  if (argc != 3) fail(kExitBadJob, "job", "usage: fusor-sandbox JOB RESULT (started by fusor's oracle)");
  install_fault_handlers();
  auto job = decode_job(read_all(argv[1]));
  if (!job.ok()) fail(kExitBadJob, "job", job.error().str());

  auto lib = SharedLibrary::load(job->so_path);
  if (!lib.ok()) fail(kExitLoad, "load", lib.error().str());
  auto sym = lib->symbol(job->entry);
  if (!sym.ok()) fail(kExitLoad, "load", sym.error().str());
  const auto fn = reinterpret_cast<KernelFn>(*sym);

  std::vector<std::vector<float>> outputs;
  outputs.reserve(job->calls.size());
  for (std::size_t i = 0; i < job->calls.size(); ++i)
    outputs.push_back(run_call(fn, job->calls[i], static_cast<int>(i)));

  // Written under a temporary name and renamed: the parent never sees half a result.
  const std::string tmp = std::string(argv[2]) + ".partial";
  {
    const std::string bytes = encode_outputs(outputs);
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) fail(kExitIo, "io", "cannot write the result file " + tmp);
  }
  if (::rename(tmp.c_str(), argv[2]) != 0)
    fail(kExitIo, "io", "cannot rename " + tmp + " to " + argv[2] + ": " + std::strerror(errno));
  // _exit: skip static destructors and dlclose while OpenMP worker threads may still idle.
  ::_exit(0);
}
