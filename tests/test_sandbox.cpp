// Crash isolation: small C kernels with the native ABI that compute, crash, hang, return
// errors, or touch memory outside their buffers, each run through run_sandboxed; the parent
// must survive every one, classify it, and leave nothing behind in the temp dir.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <unistd.h>

#include "fusor/sandbox.hpp"
#include "fusor/toolchain.hpp"
#include "support/scoped_env.hpp"

using namespace fusor;
namespace fs = std::filesystem;
using Kind = SandboxOutcome::Kind;
using namespace std::chrono_literals;

namespace {

using fusor::testing::ScopedEnv;

// Every kernel below sees in = operands[0] (f32), n = dims[0], and a per-call flag dims[1].
constexpr const char* kPrelude = "#include <stdint.h>\n#include <stdlib.h>\n"
                                 "int fusor_kernel(const void* const* operands, float* out, const int64_t* dims) {\n"
                                 "  const float* in = (const float*)operands[0];\n"
                                 "  const int64_t n = dims[0], flag = dims[1];\n"
                                 "  (void)in; (void)n; (void)flag;\n";

ByteBuffer bytes_of(const std::vector<float>& v) {
  const auto* first = reinterpret_cast<const char*>(v.data());
  return {first, first + v.size() * sizeof(float)};
}

ByteBuffer bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

// in[i] = i/2 - 3: exact in f32, so twice it is exact too.
std::vector<float> ramp(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i) * 0.5f - 3.0f;
  return v;
}

KernelCall call_of(std::int64_t n, std::int64_t flag = 0, std::optional<std::int64_t> out_elems = std::nullopt) {
  return KernelCall{{bytes_of(ramp(n))}, {n, flag}, out_elems.value_or(n)};
}

class SandboxTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "fusor-sandbox-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = new fs::path(tmpl);
    auto c = DiskCache::open(*root_ / "cache");
    ASSERT_TRUE(c.ok()) << c.error().str();
    cache_ = new DiskCache(std::move(c).value());
    auto cc = detect_host_compiler();
    ASSERT_TRUE(cc.ok()) << cc.error().str();
    cc_ = new HostCompiler(*cc);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (root_ != nullptr) fs::remove_all(*root_, ec);
    delete cc_;
    delete cache_;
    delete root_;
  }

  // Each test gets its own TMPDIR, so "nothing leaked" is checked per test.
  void SetUp() override {
    ASSERT_NE(root_, nullptr);
    tmp_ = *root_ / ("tmp-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(tmp_);
    tmpdir_.emplace("TMPDIR", tmp_.string());
    sandbox_env_.emplace("FUSOR_SANDBOX", std::nullopt);
  }
  void TearDown() override {
    tmpdir_.reset();
    sandbox_env_.reset();
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(tmp_)) left.push_back(e.path().filename().string());
    EXPECT_TRUE(left.empty()) << "left in TMPDIR: " << ::testing::PrintToString(left);
  }

  // Compiles prelude + body + "}" as a lang "c" kernel with entry fusor_kernel.
  static fs::path kernel(const std::string& body) {
    KernelSource k;
    k.source = std::string(kPrelude) + body + "\n}\n";
    k.entry = "fusor_kernel";
    k.lang = "c";
    k.spec = SpecPolicy::dynamic;
    k.shape_key = "dynamic:n";
    k.dtype = DType::f32;
    k.target = "x86";
    k.lane = "test";
    k.region_text = "sandbox test kernel";
    auto e = compile_shared_object(k, *cc_, *cache_);
    EXPECT_TRUE(e.ok()) << e.error().str();
    return e.ok() ? e->artifact : fs::path("/nonexistent.so");
  }

  static SandboxOutcome run(const fs::path& so, const std::vector<KernelCall>& calls,
                            std::chrono::milliseconds timeout = 20s) {
    auto r = run_sandboxed(so, "fusor_kernel", calls, timeout);
    EXPECT_TRUE(r.ok()) << r.error().str();
    return r.ok() ? std::move(r).value() : SandboxOutcome{Kind::ok, -99, 0, 0, "run_sandboxed failed", {}};
  }

  static inline fs::path* root_ = nullptr;
  static inline DiskCache* cache_ = nullptr;
  static inline HostCompiler* cc_ = nullptr;
  fs::path tmp_;
  std::optional<ScopedEnv> tmpdir_, sandbox_env_;
};

constexpr const char* kDouble = "for (int64_t i = 0; i < n; ++i) out[i] = in[i] * 2.0f;\nreturn 0;";

void expect_doubled(const std::vector<float>& out, std::int64_t n) {
  ASSERT_EQ(out.size(), static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out[static_cast<std::size_t>(i)], static_cast<float>(i) - 6.0f) << i;
}

TEST_F(SandboxTest, CorrectKernelReturnsEveryOutput) {
  const auto so = kernel(kDouble);
  const auto o = run(so, {call_of(1), call_of(16), call_of(1000), call_of(1024)});
  ASSERT_EQ(o.kind, Kind::ok) << o.detail;
  EXPECT_EQ(o.failed_call, -1);
  ASSERT_EQ(o.outputs.size(), 4u);
  expect_doubled(o.outputs[0], 1);
  expect_doubled(o.outputs[1], 16);
  expect_doubled(o.outputs[2], 1000);
  expect_doubled(o.outputs[3], 1024);
}

TEST_F(SandboxTest, UnwrittenOutputElementsAreTheNaNPattern) {
  const auto so = kernel("for (int64_t i = 0; i < n; i += 2) out[i] = in[i] * 2.0f;\nreturn 0;");
  const auto o = run(so, {call_of(7)});
  ASSERT_EQ(o.kind, Kind::ok) << o.detail;
  ASSERT_EQ(o.outputs.at(0).size(), 7u);
  for (int i = 0; i < 7; ++i) {
    const float v = o.outputs[0][static_cast<std::size_t>(i)];
    if (i % 2 == 0) {
      EXPECT_EQ(v, static_cast<float>(i) - 6.0f);
    } else {
      EXPECT_TRUE(std::isnan(v)) << i;
      std::uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      EXPECT_EQ(bits, sandbox_wire::kUnwrittenBits);
    }
  }
}

TEST_F(SandboxTest, NullDereferenceIsACrashOfTheRightCall) {
  const auto so = kernel("if (flag == 1) *(volatile float*)0 = 1.0f;\nfor (int64_t i = 0; i < n; ++i) out[i] = 0;\n"
                         "return 0;");
  const auto o = run(so, {call_of(4, 0), call_of(4, 1), call_of(4, 0)});
  EXPECT_EQ(o.kind, Kind::crashed);
  EXPECT_EQ(o.signal, SIGSEGV);
  EXPECT_EQ(o.detail, "SIGSEGV");
  EXPECT_EQ(o.failed_call, 1);
  EXPECT_TRUE(o.outputs.empty());
}

TEST_F(SandboxTest, AbortIsSIGABRT) {
  const auto o = run(kernel("abort();"), {call_of(4)});
  EXPECT_EQ(o.kind, Kind::crashed);
  EXPECT_EQ(o.signal, SIGABRT);
  EXPECT_EQ(o.detail, "SIGABRT");
  EXPECT_EQ(o.failed_call, 0);
}

TEST_F(SandboxTest, IntegerDivisionByZeroIsSIGFPE) {
  const auto o = run(kernel("volatile int zero = (int)flag;\nout[0] = (float)(7 / zero);\nreturn 0;"), {call_of(4)});
  EXPECT_EQ(o.kind, Kind::crashed);
  EXPECT_EQ(o.detail, "SIGFPE");
}

TEST_F(SandboxTest, KernelCallingExitIsACrash) {
  const auto o = run(kernel("if (flag == 1) exit(0);\nreturn 0;"), {call_of(4, 0), call_of(4, 1)});
  EXPECT_EQ(o.kind, Kind::crashed);
  EXPECT_EQ(o.signal, 0);
  EXPECT_EQ(o.failed_call, 1);
  EXPECT_NE(o.detail.find("exited with status 0 in call 1"), std::string::npos) << o.detail;
}

TEST_F(SandboxTest, InfiniteLoopTimesOutAndTheParentCarriesOn) {
  const auto spin = kernel("volatile int spin = 1;\nif (flag == 1) while (spin) {}\nreturn 0;");
  const auto start = std::chrono::steady_clock::now();
  const auto o = run(spin, {call_of(4, 0), call_of(4, 1)}, 1500ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(o.kind, Kind::timed_out);
  EXPECT_EQ(o.failed_call, 1);
  EXPECT_EQ(o.detail, "timeout after 1500 ms in call 1");
  EXPECT_GE(took, 1500ms);
  EXPECT_LT(took, 10s);

  const auto good = run(kernel(kDouble), {call_of(16)});
  ASSERT_EQ(good.kind, Kind::ok) << good.detail;
  expect_doubled(good.outputs.at(0), 16);
}

TEST_F(SandboxTest, HangInsideOpenMPThreadsTimesOut) {
  if (!cc_->openmp) GTEST_SKIP() << "the host compiler has no OpenMP";
  const auto o =
      run(kernel("volatile int spin = 1;\n#pragma omp parallel\n{ while (spin) {} }\nreturn 0;"), {call_of(4)}, 1000ms);
  EXPECT_EQ(o.kind, Kind::timed_out);
  EXPECT_EQ(o.failed_call, 0);
}

TEST_F(SandboxTest, WriteOnePastTheEndOfTheOutput) {
  const auto so = kernel("if (flag == 1) for (int64_t i = 0; i <= n; ++i) out[i] = 1.0f;\nreturn 0;");
  // 16 floats leave slack before the start; 1024 floats fill the page exactly.
  for (std::int64_t n : {16, 1024}) {
    const auto o = run(so, {call_of(8), call_of(n, 1)});
    EXPECT_EQ(o.kind, Kind::out_of_bounds_write) << o.detail;
    EXPECT_EQ(o.failed_call, 1);
    const std::string where = "out-of-bounds write to the output of call 1: byte " + std::to_string(4 * n) + " of a " +
                              std::to_string(4 * n) + "-byte buffer (element " + std::to_string(n) + " of " +
                              std::to_string(n) + ")";
    EXPECT_NE(o.detail.find(where), std::string::npos) << o.detail;
  }
}

TEST_F(SandboxTest, WriteBeforeTheStartOfTheOutput) {
  const auto so = kernel("out[-1] = 1.0f;\nreturn 0;");
  // With slack before the start the canary catches it after the call...
  const auto a = run(so, {call_of(4), call_of(16)});
  EXPECT_EQ(a.kind, Kind::out_of_bounds_write);
  EXPECT_EQ(a.failed_call, 0);
  EXPECT_NE(a.detail.find("output of call 0: byte -4 of a 16-byte buffer (element -1 of 4)"), std::string::npos)
      << a.detail;
  EXPECT_NE(a.detail.find("found after the call"), std::string::npos) << a.detail;
  // ...without slack (a whole page of output) the leading guard faults at once.
  const auto b = run(so, {call_of(1024)});
  EXPECT_EQ(b.kind, Kind::out_of_bounds_write);
  EXPECT_NE(b.detail.find("byte -4 of a 4096-byte buffer (element -1 of 1024)"), std::string::npos) << b.detail;
  EXPECT_EQ(b.detail.find("found after the call"), std::string::npos) << b.detail;
  EXPECT_EQ(b.signal, SIGSEGV);
}

TEST_F(SandboxTest, WriteFarPastTheEndOfTheOutput) {
  const auto o = run(kernel("out[n + 4000] = 1.0f;\nreturn 0;"), {call_of(10)});
  EXPECT_EQ(o.kind, Kind::out_of_bounds_write);
  EXPECT_NE(o.detail.find("(element 4010 of 10)"), std::string::npos) << o.detail;
}

TEST_F(SandboxTest, ReadPastAnOperandIsACrashWithAnOutOfBoundsReadDetail) {
  const auto o = run(kernel("out[0] = in[n + 1024];\nreturn 0;"), {call_of(16), call_of(16)});
  EXPECT_EQ(o.kind, Kind::crashed);
  EXPECT_EQ(o.signal, SIGSEGV);
  EXPECT_EQ(o.failed_call, 0);
  EXPECT_NE(o.detail.find("out-of-bounds read of operand 0 of call 0: byte " + std::to_string(4 * (16 + 1024)) +
                          " of a 64-byte buffer"),
            std::string::npos)
      << o.detail;
}

TEST_F(SandboxTest, ReadPastTheDimsArray) {
  const auto o = run(kernel("out[0] = (float)dims[2];\nreturn 0;"), {call_of(3)});
  EXPECT_EQ(o.kind, Kind::crashed);
  EXPECT_NE(o.detail.find("out-of-bounds read of the dims array of call 0: byte 16 of a 16-byte buffer (element 2 "
                          "of 2)"),
            std::string::npos)
      << o.detail;
}

TEST_F(SandboxTest, WritingIntoAnInputIsReported) {
  const auto o = run(kernel("((float*)operands[0])[1] = 0.0f;\nreturn 0;"), {call_of(8)});
  EXPECT_EQ(o.kind, Kind::crashed);
  EXPECT_NE(o.detail.find("write into read-only operand 0 of call 0: byte 4 of a 32-byte buffer"), std::string::npos)
      << o.detail;
}

TEST_F(SandboxTest, NonzeroReturnIsAKernelErrorOfTheRightCall) {
  const auto so = kernel("if (flag == 2) return 7;\nif (flag == 3) return 2;\n"
                         "for (int64_t i = 0; i < n; ++i) out[i] = in[i] * 2.0f;\nreturn 0;");
  const auto o = run(so, {call_of(4, 0), call_of(4, 1), call_of(4, 2), call_of(4, 3)});
  EXPECT_EQ(o.kind, Kind::kernel_error);
  EXPECT_EQ(o.return_code, 7);
  EXPECT_EQ(o.failed_call, 2);
  EXPECT_EQ(o.detail, "kernel returned 7 in call 2");
  // Codes of the ABI say what they mean.
  const auto oom = run(so, {call_of(4, 3)});
  EXPECT_EQ(oom.detail, "kernel returned 2 (out of memory) in call 0");
}

TEST_F(SandboxTest, OpenMPKernelRunsInTheChildEvenWhenTheParentUsesOpenMP) {
  if (!cc_->openmp) GTEST_SKIP() << "the host compiler has no OpenMP";
  // out[n] = how many threads ran the loop: the child's OpenMP runtime works.
  const auto so = kernel("#include <omp.h>\nint threads = 0;\n"
                         "#pragma omp parallel for reduction(max : threads)\n"
                         "for (int64_t i = 0; i < n; ++i) { out[i] = in[i] * 2.0f; threads = omp_get_num_threads(); }\n"
                         "out[n] = (float)threads;\nreturn 0;");
  // Start an OpenMP thread pool in this (parent) process first: the child must not inherit
  // it (a fork without exec would hang or crash in libgomp).
  auto lib = SharedLibrary::load(so);
  ASSERT_TRUE(lib.ok()) << lib.error().str();
  auto sym = lib->symbol("fusor_kernel");
  ASSERT_TRUE(sym.ok()) << sym.error().str();
  const auto fn = reinterpret_cast<int (*)(const void* const*, float*, const std::int64_t*)>(*sym);
  const auto in = ramp(4096);
  std::vector<float> out(4097);
  const void* ops[] = {in.data()};
  const std::int64_t dims[] = {4096, 0};
  ASSERT_EQ(fn(ops, out.data(), dims), 0);
  const float parent_threads = out[4096];

  const auto o = run(so, {call_of(100000, 0, 100001), call_of(5, 0, 6)});
  ASSERT_EQ(o.kind, Kind::ok) << o.detail;
  for (int c = 0; c < 2; ++c) {
    const auto& r = o.outputs.at(static_cast<std::size_t>(c));
    const std::int64_t n = static_cast<std::int64_t>(r.size()) - 1;
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(r[static_cast<std::size_t>(i)], static_cast<float>(i) - 6.0f);
    EXPECT_GE(r.back(), 1.0f);
  }
  // Same environment, same machine: the child's team is as large as the parent's.
  EXPECT_EQ(o.outputs[0].back(), parent_threads);
}

TEST_F(SandboxTest, FiftySmallCallsAreQuick) {
  const auto so = kernel(kDouble);
  std::vector<KernelCall> calls;
  for (int i = 0; i < 50; ++i) calls.push_back(call_of(1 + 37 * i));
  const auto start = std::chrono::steady_clock::now();
  const auto o = run(so, calls);
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  std::printf("[ sandbox ] 50 calls in one child: %.1f ms\n", ms.count());
  ASSERT_EQ(o.kind, Kind::ok) << o.detail;
  ASSERT_EQ(o.outputs.size(), 50u);
  for (int i = 0; i < 50; ++i) expect_doubled(o.outputs[static_cast<std::size_t>(i)], 1 + 37 * i);
  EXPECT_LT(ms.count(), 10000.0);
}

TEST_F(SandboxTest, MissingSharedObjectOrEntryIsAnError) {
  const std::vector<KernelCall> calls = {call_of(4)};
  auto missing = run_sandboxed(tmp_ / "nope.so", "fusor_kernel", calls, 5s);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::io_error);
  EXPECT_NE(missing.error().message.find("nope.so"), std::string::npos);

  auto no_entry = run_sandboxed(kernel(kDouble), "not_there", calls, 5s);
  ASSERT_FALSE(no_entry.ok());
  EXPECT_EQ(no_entry.error().code, ErrorCode::runner_unavailable);
  EXPECT_NE(no_entry.error().message.find("not_there"), std::string::npos) << no_entry.error().message;

  std::vector<KernelCall> negative = {call_of(4, 0, -1)};
  auto bad = run_sandboxed(kernel(kDouble), "fusor_kernel", negative, 5s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::bad_argument);
}

TEST_F(SandboxTest, JobDirGoesUnderTMPDIR) {
  // A TMPDIR that does not exist makes the job fail to start: the job dir is made there.
  ScopedEnv tmp("TMPDIR", (tmp_ / "absent").string());
  auto r = run_sandboxed(kernel(kDouble), "fusor_kernel", std::vector<KernelCall>{call_of(4)}, 5s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::io_error) << r.error().str();
}

TEST_F(SandboxTest, ExecutableLookupHonoursTheEnvironment) {
  {
    ScopedEnv env("FUSOR_SANDBOX", FUSOR_SANDBOX_BIN);
    auto p = sandbox_executable();
    ASSERT_TRUE(p.ok()) << p.error().str();
    EXPECT_EQ(*p, fs::path(FUSOR_SANDBOX_BIN));
  }
  {
    ScopedEnv env("FUSOR_SANDBOX", (tmp_ / "no-such-sandbox").string());
    auto p = sandbox_executable();
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.error().code, ErrorCode::runner_unavailable);
    EXPECT_NE(p.error().message.find("no-such-sandbox"), std::string::npos);
    auto r = run_sandboxed(kernel(kDouble), "fusor_kernel", std::vector<KernelCall>{call_of(4)}, 5s);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::runner_unavailable);
  }
  // Unset: the test binary sits next to fusor-sandbox in the build dir.
  auto p = sandbox_executable();
  ASSERT_TRUE(p.ok()) << p.error().str();
  EXPECT_EQ(p->filename(), "fusor-sandbox");
}

TEST(SandboxWire, JobRoundTripsAndEveryTruncationIsRejected) {
  sandbox_wire::Job job{
      "/x/k.so",
      "entry",
      {KernelCall{{bytes_of("abc"), bytes_of(std::string_view("\0\1", 2))}, {7, -2}, 5}, KernelCall{}}};
  const std::string bytes = sandbox_wire::encode_job(job);
  auto back = sandbox_wire::decode_job(bytes);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->so_path, "/x/k.so");
  EXPECT_EQ(back->entry, "entry");
  ASSERT_EQ(back->calls.size(), 2u);
  EXPECT_EQ(back->calls[0].operands, (std::vector<ByteBuffer>{bytes_of("abc"), bytes_of(std::string_view("\0\1", 2))}));
  // The child hands the kernel its operands on cache lines, as the in-process runner does.
  for (const auto& op : back->calls[0].operands) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(op.data()) % 64, 0u);
  EXPECT_EQ(back->calls[0].dims, (std::vector<std::int64_t>{7, -2}));
  EXPECT_EQ(back->calls[0].output_elems, 5);
  EXPECT_TRUE(back->calls[1].operands.empty());
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    auto cut = sandbox_wire::decode_job(std::string_view(bytes).substr(0, len));
    ASSERT_FALSE(cut.ok()) << len;
    EXPECT_EQ(cut.error().code, ErrorCode::internal);
  }
  EXPECT_FALSE(sandbox_wire::decode_job(bytes + "x").ok());
}

TEST(SandboxWire, OutputsRoundTrip) {
  const std::vector<std::vector<float>> outs = {{1.5f, -2.0f}, {}, {NAN}};
  auto back = sandbox_wire::decode_outputs(sandbox_wire::encode_outputs(outs));
  ASSERT_TRUE(back.ok()) << back.error().str();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0], (std::vector<float>{1.5f, -2.0f}));
  EXPECT_TRUE((*back)[1].empty());
  EXPECT_TRUE(std::isnan((*back)[2].at(0)));
}

TEST(SandboxNames, KindsAndSignals) {
  EXPECT_EQ(sandbox_kind_name(Kind::out_of_bounds_write), "out_of_bounds_write");
  EXPECT_EQ(sandbox_kind_name(Kind::timed_out), "timed_out");
  EXPECT_EQ(signal_display_name(SIGBUS), "SIGBUS");
  EXPECT_EQ(signal_display_name(SIGTERM), "signal " + std::to_string(SIGTERM));
}

} // namespace
