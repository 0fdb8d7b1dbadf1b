// The host toolchain: ISA detection, compiler detection, compile → cache → dlopen → call,
// compiler diagnostics in errors, and cache keys that follow the toolchain identity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sched.h>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include "fusor/toolchain.hpp"
#include "support/scoped_env.hpp"

using namespace fusor;
namespace fs = std::filesystem;

namespace {

using fusor::testing::ScopedEnv;

std::size_t count_lines(const fs::path& p) {
  std::ifstream in(p);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

KernelSource c_kernel(std::string source, std::string entry) {
  KernelSource k;
  k.source = std::move(source);
  k.entry = std::move(entry);
  k.lang = "c";
  k.spec = SpecPolicy::dynamic;
  k.shape_key = "dynamic:M,N,K";
  k.layouts = "a=row_major,b=row_major";
  k.dtype = DType::f32;
  k.target = "x86";
  k.lane = "x86_avx512";
  k.region_text = "matmul test";
  return k;
}

const char* kAddSource = "int fusor_test_add(int a, int b) { return a + b; }\n";

class HostCompilerTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fusor-cc-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    auto c = DiskCache::open(root_ / "cache");
    ASSERT_TRUE(c.ok()) << c.error().str();
    cache_.emplace(std::move(c).value());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  HostCompiler compiler() {
    auto cc = detect_host_compiler();
    EXPECT_TRUE(cc.ok()) << cc.error().str();
    return cc.ok() ? *cc : HostCompiler{};
  }

  fs::path root_;
  std::optional<DiskCache> cache_;
};

} // namespace

TEST(HostIsa, DescribesArchitectureFlagsAndModel) {
  const std::string isa = host_isa();
#if defined(__x86_64__)
  EXPECT_EQ(isa.rfind("x86_64", 0), 0u) << isa;
#endif
  EXPECT_NE(isa.find(" | "), std::string::npos) << isa;
  EXPECT_EQ(isa, host_isa()); // stable within a process: it is part of cache keys
  if (host_has_avx512()) {
    for (const char* f : {" avx512f", " avx512bw", " avx512vl", " avx512dq"})
      EXPECT_NE(isa.find(f), std::string::npos) << f << " missing from " << isa;
  } else {
    EXPECT_TRUE(isa.find(" avx512f") == std::string::npos || isa.find(" avx512bw") == std::string::npos ||
                isa.find(" avx512vl") == std::string::npos || isa.find(" avx512dq") == std::string::npos)
        << isa;
  }
}

// The last-level cache comes from sysfs in bytes (it writes "32768K"): at least the L2 that
// glibc reports, a whole number of KiB, the same every call. The x86 lanes' cold-B rule
// (Tuning::crows) compares B with it. The L2 (attention's claim rule, Tuning::l2) comes from
// the same files: where sysfs lists one, a whole number of KiB, no larger than the last level.
TEST(HostIsa, LastLevelCacheFromSysfs) {
  const std::int64_t llc = host_llc_bytes(), l2_read = host_l2_bytes();
  EXPECT_EQ(llc, host_llc_bytes());
  EXPECT_EQ(l2_read, host_l2_bytes());
  if (!std::ifstream("/sys/devices/system/cpu/cpu0/cache/index0/size"))
    GTEST_SKIP() << "no cache sizes in sysfs here: host_llc_bytes() is " << llc;
  EXPECT_GT(llc, 0);
  EXPECT_EQ(llc % 1024, 0) << llc;
  EXPECT_EQ(l2_read % 1024, 0) << l2_read;
  EXPECT_LE(l2_read, llc);
  if (std::ifstream("/sys/devices/system/cpu/cpu0/cache/index2/size")) {
    EXPECT_GT(l2_read, 0);
  }
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 > 0) {
    EXPECT_GE(llc, l2) << "the L2 glibc reports is larger than the last level read from sysfs";
  }
}

// The share a process counts on (what Tuning::crows compares B with): the whole last level on
// bare metal; in a virtual machine 2 MiB for each CPU of the process's affinity mask, at least
// 12 MiB, at most the last level (this VM's sysfs may report its host's whole L3).
TEST(HostIsa, LastLevelCacheShare) {
  const std::int64_t llc = host_llc_bytes(), share = host_llc_share_bytes();
  EXPECT_LE(share, llc);
  EXPECT_EQ(share % 1024, 0) << share;
  bool guest = false;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line) && !line.empty();)
    if (line.rfind("flags", 0) == 0) guest = (" " + line + " ").find(" hypervisor ") != std::string::npos;
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const std::int64_t cap = std::max(std::int64_t{12} << 20, std::int64_t{CPU_COUNT(&set)} << 21);
  EXPECT_EQ(share, guest ? std::min(llc, cap) : llc) << (guest ? "a guest" : "bare metal") << ", last level " << llc;
}

TEST_F(HostCompilerTest, DetectsCompilerWithExpectedFlags) {
  HostCompiler cc = compiler();
  ASSERT_FALSE(cc.path.empty());
  EXPECT_TRUE(fs::path(cc.path).is_absolute());
  EXPECT_EQ(::access(cc.path.c_str(), X_OK), 0);
  EXPECT_FALSE(cc.version.empty());
  EXPECT_EQ(cc.version.find('\n'), std::string::npos);
  auto has = [&](const std::string& f) { return std::find(cc.flags.begin(), cc.flags.end(), f) != cc.flags.end(); };
  for (const char* f : {"-O3", "-march=native", "-fPIC", "-shared", "-std=c11", "-fno-math-errno", "-fno-trapping-math",
                        "-ffp-contract=fast"})
    EXPECT_TRUE(has(f)) << f;
  EXPECT_FALSE(has("-ffast-math"));
  EXPECT_EQ(has("-fopenmp"), cc.openmp);
  const std::string id = cc.identity();
  EXPECT_NE(id.find(cc.path), std::string::npos);
  EXPECT_NE(id.find(cc.version), std::string::npos);
  EXPECT_NE(id.find(host_isa()), std::string::npos);
  EXPECT_NE(id.find("-march=native"), std::string::npos);
}

TEST_F(HostCompilerTest, CompileLoadAndCall) {
  HostCompiler cc = compiler();
  auto entry = compile_shared_object(c_kernel(kAddSource, "fusor_test_add"), cc, *cache_);
  ASSERT_TRUE(entry.ok()) << entry.error().str();
  EXPECT_FALSE(entry->hit);
  EXPECT_EQ(entry->artifact.extension(), ".so");
  EXPECT_EQ(entry->meta["lane"], "x86_avx512");
  EXPECT_EQ(entry->meta["region_text"], "matmul test");
  EXPECT_EQ(entry->meta["shape_key"], "dynamic:M,N,K");
  EXPECT_EQ(entry->meta["compiler"], cc.identity());

  auto lib = SharedLibrary::load(entry->artifact);
  ASSERT_TRUE(lib.ok()) << lib.error().str();
  auto sym = lib->symbol("fusor_test_add");
  ASSERT_TRUE(sym.ok()) << sym.error().str();
  auto add = reinterpret_cast<int (*)(int, int)>(*sym);
  EXPECT_EQ(add(2, 3), 5);
  EXPECT_EQ(add(-7, 100), 93);

  auto missing = lib->symbol("fusor_no_such_symbol");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::runner_unavailable);
  EXPECT_NE(missing.error().message.find("fusor_no_such_symbol"), std::string::npos);
}

TEST_F(HostCompilerTest, SecondCompileIsAHitAndRunsNoCompiler) {
  // A wrapper that logs each invocation, then runs the real compiler.
  const fs::path log = root_ / "cc.log";
  const fs::path wrapper = root_ / "logging-cc";
  {
    std::ofstream w(wrapper);
    w << "#!/bin/sh\necho \"$@\" >> '" << log.string() << "'\nexec cc \"$@\"\n";
  }
  ::chmod(wrapper.c_str(), 0755);
  ScopedEnv env("FUSOR_CC", wrapper.string());
  HostCompiler cc = compiler();
  EXPECT_EQ(cc.path, wrapper.string());

  const std::size_t before = count_lines(log); // --version and the probe
  auto first = compile_shared_object(c_kernel(kAddSource, "fusor_test_add"), cc, *cache_);
  ASSERT_TRUE(first.ok()) << first.error().str();
  EXPECT_FALSE(first->hit);
  EXPECT_EQ(count_lines(log), before + 1);
  auto second = compile_shared_object(c_kernel(kAddSource, "fusor_test_add"), cc, *cache_);
  ASSERT_TRUE(second.ok()) << second.error().str();
  EXPECT_TRUE(second->hit);
  EXPECT_EQ(second->artifact, first->artifact);
  EXPECT_EQ(count_lines(log), before + 1) << "a cache hit ran the compiler";
}

TEST_F(HostCompilerTest, SyntaxErrorCarriesCompilerDiagnosticsAndCommand) {
  HostCompiler cc = compiler();
  auto r = compile_shared_object(c_kernel("int broken(int a) { return a + ; }\n", "broken_kernel"), cc, *cache_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::compile_failed);
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("error:"), std::string::npos) << m;
  EXPECT_NE(m.find("broken_kernel.c:1:"), std::string::npos) << m; // file:line of the diagnostic
  EXPECT_NE(m.find(cc.path + " -O3"), std::string::npos) << m;     // the command line
  EXPECT_NE(m.find("broken_kernel"), std::string::npos) << m;
  auto s = cache_->stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entries, 0u);
}

TEST_F(HostCompilerTest, MissingCompilerIsCompileFailed) {
  {
    ScopedEnv env("FUSOR_CC", "/nonexistent");
    auto cc = detect_host_compiler();
    ASSERT_FALSE(cc.ok());
    EXPECT_EQ(cc.error().code, ErrorCode::compile_failed);
    EXPECT_NE(cc.error().message.find("/nonexistent"), std::string::npos) << cc.error().message;
    EXPECT_NE(cc.error().message.find("FUSOR_CC"), std::string::npos) << cc.error().message;
  }
  {
    ScopedEnv env("FUSOR_CC", "fusor-no-such-cc");
    ScopedEnv path("PATH", "/usr/bin:/bin");
    auto cc = detect_host_compiler();
    ASSERT_FALSE(cc.ok());
    EXPECT_EQ(cc.error().code, ErrorCode::compile_failed);
    EXPECT_NE(cc.error().message.find("fusor-no-such-cc"), std::string::npos);
    EXPECT_NE(cc.error().message.find("/usr/bin:/bin"), std::string::npos) << cc.error().message;
  }
}

TEST_F(HostCompilerTest, CacheKeyFollowsSourceMetadataAndToolchainIdentity) {
  HostCompiler cc = compiler();
  const KernelSource base = c_kernel(kAddSource, "fusor_test_add");
  const std::string key = shared_object_cache_key(base, cc);
  EXPECT_EQ(key, shared_object_cache_key(base, cc));

  std::vector<KernelSource> variants(13, base);
  variants[0].source += " ";
  variants[1].entry = "other";
  variants[2].spec = SpecPolicy::bucket;
  variants[3].shape_key = "bucket:M<=64";
  variants[4].layouts = "a=row_major,b=col_major";
  variants[5].dtype = DType::bf16;
  variants[6].target = "x86-other";
  variants[7].lane = "x86_generic";
  variants[8].lang = "c ";
  variants[9].source = "";
  variants[10].include_dirs = {"/opt/vendor/include"};
  variants[11].library_dirs = {"/opt/vendor/lib"};
  variants[12].compile_flags = {"-mno-avx512f"};
  for (std::size_t i = 0; i < variants.size(); ++i)
    EXPECT_NE(shared_object_cache_key(variants[i], cc), key) << "variant " << i;

  HostCompiler other_flags = cc;
  other_flags.flags.push_back("-O0");
  HostCompiler other_version = cc;
  other_version.version += " (patched)";
  HostCompiler other_path = cc;
  other_path.path = "/opt/other/cc";
  for (const HostCompiler* c : {&other_flags, &other_version, &other_path}) {
    EXPECT_NE(c->identity(), cc.identity());
    EXPECT_NE(shared_object_cache_key(base, *c), key);
  }
}

// A vendor library outside the compiler's search path (oneDNN under conda or /opt/intel): the
// kernel names its header and library directories, and the artifact finds the library when
// it is loaded, with no LD_LIBRARY_PATH.
TEST_F(HostCompilerTest, VendorLibraryOutsideTheSearchPath) {
  HostCompiler cc = compiler();
  const fs::path inc = root_ / "vendor" / "include", lib = root_ / "vendor" / "lib";
  fs::create_directories(inc);
  fs::create_directories(lib);
  std::ofstream(inc / "fusor_vendor_test.h") << "int fusor_vendor_twice(int a);\n";
  std::ofstream(root_ / "vendor.c") << "int fusor_vendor_twice(int a) { return 2 * a; }\n";
  const std::string build = cc.path + " -shared -fPIC -o '" + (lib / "libfusorvendortest.so").string() + "' '" +
                            (root_ / "vendor.c").string() + "'";
  ASSERT_EQ(std::system(build.c_str()), 0) << build;

  KernelSource k =
      c_kernel("#include <fusor_vendor_test.h>\nint fusor_test_vendor(int a) { return fusor_vendor_twice(a) + 1; }\n",
               "fusor_test_vendor");
  k.link_libs = {"fusorvendortest"};
  auto without = compile_shared_object(k, cc, *cache_);
  ASSERT_FALSE(without.ok());
  EXPECT_NE(without.error().message.find("fusor_vendor_test.h"), std::string::npos) << without.error().message;

  k.include_dirs = {inc.string()};
  k.library_dirs = {lib.string()};
  auto entry = compile_shared_object(k, cc, *cache_);
  ASSERT_TRUE(entry.ok()) << entry.error().str();
  auto so = SharedLibrary::load(entry->artifact);
  ASSERT_TRUE(so.ok()) << so.error().str();
  auto sym = so->symbol("fusor_test_vendor");
  ASSERT_TRUE(sym.ok()) << sym.error().str();
  EXPECT_EQ(reinterpret_cast<int (*)(int)>(*sym)(20), 41);
}

TEST_F(HostCompilerTest, NaNSemanticsSurviveTheFlags) {
  // Under -ffast-math (-ffinite-math-only) a compiler may fold x != x to 0.
  HostCompiler cc = compiler();
  auto e = compile_shared_object(c_kernel("int fusor_is_nan(float x) { return x != x; }\n"
                                          "float fusor_max(float a, float b) { return a > b ? a : b; }\n",
                                          "fusor_is_nan"),
                                 cc, *cache_);
  ASSERT_TRUE(e.ok()) << e.error().str();
  auto lib = SharedLibrary::load(e->artifact);
  ASSERT_TRUE(lib.ok()) << lib.error().str();
  auto is_nan = reinterpret_cast<int (*)(float)>(*lib->symbol("fusor_is_nan"));
  EXPECT_EQ(is_nan(std::nanf("")), 1);
  EXPECT_EQ(is_nan(1.5f), 0);
}

TEST_F(HostCompilerTest, OpenMpKernelRuns) {
  HostCompiler cc = compiler();
  if (!cc.openmp) GTEST_SKIP() << "compiler has no working -fopenmp: " << cc.identity();
  auto e = compile_shared_object(c_kernel("#include <omp.h>\n"
                                          "long fusor_sum(long n) {\n"
                                          "  long s = 0;\n"
                                          "#pragma omp parallel for reduction(+ : s)\n"
                                          "  for (long i = 1; i <= n; ++i) s += i;\n"
                                          "  return s;\n"
                                          "}\n",
                                          "fusor_sum"),
                                 cc, *cache_);
  ASSERT_TRUE(e.ok()) << e.error().str();
  auto lib = SharedLibrary::load(e->artifact);
  ASSERT_TRUE(lib.ok()) << lib.error().str();
  auto sum = reinterpret_cast<long (*)(long)>(*lib->symbol("fusor_sum"));
  EXPECT_EQ(sum(100000), 100000L * 100001L / 2);
}

TEST_F(HostCompilerTest, NonCLanguageIsRejected) {
  HostCompiler cc = compiler();
  KernelSource k = c_kernel("__global__ void k() {}", "k");
  k.lang = "cuda";
  auto r = compile_shared_object(k, cc, *cache_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::bad_argument);
  EXPECT_NE(r.error().message.find("cuda"), std::string::npos);
}

TEST(SharedLibrary, MissingFileCarriesDlerror) {
  auto lib = SharedLibrary::load("/nonexistent/libfusor-none.so");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().code, ErrorCode::runner_unavailable);
  EXPECT_NE(lib.error().message.find("/nonexistent/libfusor-none.so"), std::string::npos);
  EXPECT_NE(lib.error().message.find("No such file"), std::string::npos) << lib.error().message;
}
