// DiskCache: hits across calls and processes, one build under concurrency, corruption
// detection, directory safety, sidecars, stats of the last run, clear.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fusor/cache.hpp"
#include "fusor/log.hpp"
#include "fusor/toolchain.hpp"
#include "support/scoped_env.hpp"

using namespace fusor;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// O_APPEND writes of one byte are atomic across processes: the file's size counts builds.
void append_mark(const fs::path& p) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd >= 0) {
    (void)!::write(fd, "x", 1);
    ::close(fd);
  }
}

std::size_t marks(const fs::path& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  return ec ? 0 : static_cast<std::size_t>(n);
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  ::stat(p.c_str(), &st);
  return st.st_mode & 07777;
}

// Waits for a forked child; returns its exit status, or -1 if it did not exit normally.
int wait_child(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

class LogCapture {
public:
  LogCapture() {
    previous_ = set_log_sink([this](std::string_view line) {
      std::lock_guard<std::mutex> lock(m_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { set_log_sink(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string all() {
    std::lock_guard<std::mutex> lock(m_);
    std::string s;
    for (auto& l : lines_) s += l + "\n";
    return s;
  }

private:
  std::mutex m_;
  std::vector<std::string> lines_;
  LogSink previous_;
};

class CacheTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fusor-cache-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    dir_ = root_ / "cache";
    marks_ = root_ / "builds";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  DiskCache open_cache() {
    auto c = DiskCache::open(dir_);
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().str());
    return std::move(c).value();
  }

  // A builder that writes `payload` and leaves one mark per call.
  std::function<Status(const fs::path&)> builder(const std::string& payload,
                                                 std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
    return [this, payload, delay](const fs::path& out) -> Status {
      append_mark(marks_);
      std::this_thread::sleep_for(delay);
      write_file(out, payload);
      return {};
    };
  }

  fs::path root_, dir_, marks_;
};

const std::string kKey = DiskCache::make_key(std::vector<std::string>{"test", "entry"});

} // namespace

TEST(Sha256, KnownVectors) {
  // FIPS 180-2 examples.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_F(CacheTest, Sha256FileMatchesAndMissingFileIsIoError) {
  fs::create_directories(root_);
  // One million 'a': the long FIPS vector, large enough to span many read buffers.
  write_file(root_ / "a.bin", std::string(1000000, 'a'));
  auto h = sha256_file(root_ / "a.bin");
  ASSERT_TRUE(h.ok()) << h.error().str();
  EXPECT_EQ(*h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  auto missing = sha256_file(root_ / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::io_error);
  EXPECT_NE(missing.error().message.find("nope"), std::string::npos);
}

TEST(CacheKey, LengthPrefixedPartsAreUnambiguous) {
  const auto k = [](std::vector<std::string> parts) { return DiskCache::make_key(parts); };
  EXPECT_NE(k({"ab", "c"}), k({"a", "bc"}));
  EXPECT_NE(k({"a", ""}), k({"a"}));
  EXPECT_NE(k({"a", "b"}), k({"b", "a"}));
  EXPECT_EQ(k({"a", "b"}), k({"a", "b"}));
  const std::string key = k({"x"});
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  std::vector<std::string_view> views = {"x"};
  EXPECT_EQ(DiskCache::make_key(std::span<const std::string_view>(views)), key);
}

TEST_F(CacheTest, CreatesMissingDirsPrivate) {
  dir_ = root_ / "a" / "b" / "cache";
  DiskCache cache = open_cache();
  EXPECT_EQ(cache.dir(), dir_);
  EXPECT_EQ(mode_of(root_ / "a"), 0700u);
  EXPECT_EQ(mode_of(root_ / "a" / "b"), 0700u);
  EXPECT_EQ(mode_of(dir_), 0700u);
}

TEST_F(CacheTest, DefaultDirFollowsEnvironmentOrder) {
  std::optional<fusor::testing::ScopedEnv> fcd(std::in_place, "FUSOR_CACHE_DIR", "/tmp/fusor-explicit");
  const fusor::testing::ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg"), home("HOME", "/tmp/home");
  auto d1 = DiskCache::default_dir();
  ::unsetenv("FUSOR_CACHE_DIR");
  auto d2 = DiskCache::default_dir();
  ::unsetenv("XDG_CACHE_HOME");
  auto d3 = DiskCache::default_dir();
  ASSERT_TRUE(d1.ok() && d2.ok() && d3.ok());
  EXPECT_EQ(*d1, fs::path("/tmp/fusor-explicit"));
  EXPECT_EQ(*d2, fs::path("/tmp/xdg/fusor"));
  EXPECT_EQ(*d3, fs::path("/tmp/home/.cache/fusor"));

  // open() without a dir uses FUSOR_CACHE_DIR.
  ::setenv("FUSOR_CACHE_DIR", dir_.c_str(), 1);
  auto c = DiskCache::open();
  fcd.reset();
  ASSERT_TRUE(c.ok()) << c.error().str();
  EXPECT_EQ(c->dir(), dir_);
}

TEST_F(CacheTest, GroupOrWorldWritableDirIsRefused) {
  for (mode_t mode : {0777u, 0770u, 0702u}) {
    fs::create_directories(dir_);
    ASSERT_EQ(::chmod(dir_.c_str(), mode), 0);
    auto c = DiskCache::open(dir_);
    ASSERT_FALSE(c.ok()) << "mode " << std::oct << mode;
    EXPECT_EQ(c.error().code, ErrorCode::cache_unsafe);
    EXPECT_NE(c.error().message.find(dir_.string()), std::string::npos) << c.error().message;
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(c.error().message.find(octal), std::string::npos) << c.error().message;
  }
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0); // readable by others is fine, writable is not
  EXPECT_TRUE(DiskCache::open(dir_).ok());
}

TEST_F(CacheTest, DirOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a dir to another user";
  fs::create_directories(dir_);
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0);
  auto c = DiskCache::open(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::cache_unsafe);
  EXPECT_NE(c.error().message.find("uid 65534"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find(dir_.string()), std::string::npos);
}

TEST_F(CacheTest, HitOnSecondLookup) {
  DiskCache cache = open_cache();
  const nlohmann::json meta = {{"lane", "x86_avx512"}, {"n", 3}};
  auto first = cache.get_or_build(kKey, "so", builder("payload-1"), meta);
  ASSERT_TRUE(first.ok()) << first.error().str();
  EXPECT_FALSE(first->hit);
  EXPECT_EQ(first->key, kKey);
  EXPECT_EQ(first->artifact, dir_ / "objects" / kKey.substr(0, 2) / (kKey + ".so"));
  EXPECT_EQ(first->sha256, sha256_hex("payload-1"));
  EXPECT_EQ(read_file(first->artifact), "payload-1");

  auto second = cache.get_or_build(kKey, "so", builder("other"), {});
  ASSERT_TRUE(second.ok()) << second.error().str();
  EXPECT_TRUE(second->hit);
  EXPECT_EQ(second->artifact, first->artifact);
  EXPECT_EQ(second->sha256, first->sha256);
  EXPECT_EQ(second->meta, meta); // the meta recorded at build time
  EXPECT_EQ(read_file(second->artifact), "payload-1");
  EXPECT_EQ(marks(marks_), 1u);

  // The manifest holds what SPEC §3 asks: hash, size, time, ext, meta.
  auto manifest = nlohmann::json::parse(read_file(dir_ / "objects" / kKey.substr(0, 2) / (kKey + ".json")));
  EXPECT_EQ(manifest["sha256"], sha256_hex("payload-1"));
  EXPECT_EQ(manifest["size"], 9);
  EXPECT_EQ(manifest["ext"], "so");
  EXPECT_TRUE(manifest.contains("created"));
  EXPECT_EQ(manifest["meta"], meta);
}

TEST_F(CacheTest, SecondProcessBuildsNothing) {
  {
    DiskCache cache = open_cache();
    ASSERT_TRUE(cache.get_or_build(kKey, "so", builder("payload")).ok());
  }
  ASSERT_EQ(marks(marks_), 1u);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto c = DiskCache::open(dir_);
    if (!c.ok()) ::_exit(10);
    auto e = c->get_or_build(kKey, "so", builder("different"));
    if (!e.ok()) ::_exit(11);
    if (!e->hit) ::_exit(12);
    if (read_file(e->artifact) != "payload") ::_exit(13);
    ::_exit(0);
  }
  EXPECT_EQ(wait_child(pid), 0);
  EXPECT_EQ(marks(marks_), 1u) << "the second process ran the build callback";
}

TEST_F(CacheTest, EightConcurrentProcessesBuildOnce) {
  (void)open_cache();
  std::fflush(nullptr);
  std::vector<pid_t> kids;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto c = DiskCache::open(dir_);
      if (!c.ok()) ::_exit(10);
      auto e = c->get_or_build(kKey, "so", builder(std::string(100000, 'k'), std::chrono::milliseconds(200)));
      if (!e.ok()) ::_exit(11);
      if (read_file(e->artifact) != std::string(100000, 'k')) ::_exit(12);
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) EXPECT_EQ(wait_child(pid), 0);
  EXPECT_EQ(marks(marks_), 1u) << "the per-key lock should let exactly one process build";

  DiskCache cache = open_cache();
  auto s = cache.stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entries, 1u);
  // Only the artifact, its manifest and its lock remain: no temp files left behind.
  std::vector<std::string> names;
  for (auto& f : fs::directory_iterator(dir_ / "objects" / kKey.substr(0, 2))) names.push_back(f.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{kKey + ".json", kKey + ".lock", kKey + ".so"}));
  auto hit = cache.get_or_build(kKey, "so", builder("unused"));
  ASSERT_TRUE(hit.ok());
  EXPECT_TRUE(hit->hit);
  EXPECT_EQ(hit->sha256, sha256_hex(std::string(100000, 'k')));
}

TEST_F(CacheTest, TruncatedArtifactIsDetectedAndRebuilt) {
  DiskCache cache = open_cache();
  auto e = cache.get_or_build(kKey, "so", builder("0123456789abcdef"));
  ASSERT_TRUE(e.ok());
  fs::resize_file(e->artifact, 5);
  LogCapture log;
  auto again = cache.get_or_build(kKey, "so", builder("0123456789abcdef"));
  ASSERT_TRUE(again.ok()) << again.error().str();
  EXPECT_FALSE(again->hit);
  EXPECT_EQ(marks(marks_), 2u);
  EXPECT_EQ(read_file(again->artifact), "0123456789abcdef");
  const std::string text = log.all();
  EXPECT_NE(text.find("E_CACHE_CORRUPT"), std::string::npos) << text;
  EXPECT_NE(text.find(kKey), std::string::npos) << text;
  EXPECT_NE(text.find("5 bytes"), std::string::npos) << text;
  auto third = cache.get_or_build(kKey, "so", builder("x"));
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->hit);
}

TEST_F(CacheTest, BitFlippedArtifactIsDetectedAndRebuilt) {
  DiskCache cache = open_cache();
  auto e = cache.get_or_build(kKey, "so", builder("0123456789abcdef"));
  ASSERT_TRUE(e.ok());
  std::string bytes = read_file(e->artifact);
  bytes[7] = static_cast<char>(bytes[7] ^ 0x04); // same size, one bit different
  write_file(e->artifact, bytes);
  LogCapture log;
  auto again = cache.get_or_build(kKey, "so", builder("0123456789abcdef"));
  ASSERT_TRUE(again.ok()) << again.error().str();
  EXPECT_FALSE(again->hit);
  EXPECT_EQ(marks(marks_), 2u);
  EXPECT_EQ(read_file(again->artifact), "0123456789abcdef");
  const std::string text = log.all();
  EXPECT_NE(text.find("E_CACHE_CORRUPT"), std::string::npos) << text;
  EXPECT_NE(text.find(kKey), std::string::npos) << text;
  EXPECT_NE(text.find("sha256"), std::string::npos) << text;
}

TEST_F(CacheTest, BrokenOrMissingManifestIsDetectedAndRebuilt) {
  DiskCache cache = open_cache();
  ASSERT_TRUE(cache.get_or_build(kKey, "so", builder("data")).ok());
  const fs::path manifest = dir_ / "objects" / kKey.substr(0, 2) / (kKey + ".json");
  write_file(manifest, "{\"format\": \"fusor-cache-entry-v1\", trunc");
  {
    LogCapture log;
    auto e = cache.get_or_build(kKey, "so", builder("data"));
    ASSERT_TRUE(e.ok());
    EXPECT_FALSE(e->hit);
    EXPECT_NE(log.all().find("E_CACHE_CORRUPT"), std::string::npos);
    EXPECT_NE(log.all().find("manifest"), std::string::npos);
  }
  // Valid JSON with the wrong types is just as broken (and must not throw).
  write_file(manifest, R"({"format": 5, "key": [], "ext": {}, "sha256": 3, "size": "big"})");
  {
    LogCapture log;
    auto e = cache.get_or_build(kKey, "so", builder("data"));
    ASSERT_TRUE(e.ok());
    EXPECT_FALSE(e->hit);
    EXPECT_NE(log.all().find("E_CACHE_CORRUPT"), std::string::npos);
  }
  fs::remove(manifest);
  {
    LogCapture log;
    auto e = cache.get_or_build(kKey, "so", builder("data"));
    ASSERT_TRUE(e.ok());
    EXPECT_FALSE(e->hit);
    EXPECT_NE(log.all().find("has no manifest"), std::string::npos) << log.all();
  }
  EXPECT_EQ(marks(marks_), 4u);
}

TEST_F(CacheTest, GarbledLastRunFileIsReplaced) {
  DiskCache cache = open_cache();
  write_file(dir_ / "last-run.json", R"({"run": 5, "pid": "me", "hits": "many", "misses": -3})");
  auto s = cache.stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->hits, 0u);
  EXPECT_EQ(s->last_run_pid, 0);
  ASSERT_TRUE(cache.get_or_build(kKey, "so", builder("x")).ok());
  s = cache.stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->misses, 1u);
  EXPECT_EQ(s->last_run_pid, ::getpid());
}

TEST_F(CacheTest, BuildErrorIsReturnedAsIsAndLeavesNoEntry) {
  DiskCache cache = open_cache();
  auto failing = [&](const fs::path& out) -> Status {
    write_file(out, "half");
    return make_error(ErrorCode::compile_failed, "boom: x.c:1:1: error: nope");
  };
  auto e = cache.get_or_build(kKey, "so", failing);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::compile_failed);
  EXPECT_EQ(e.error().message, "boom: x.c:1:1: error: nope");
  auto s = cache.stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entries, 0u);
  std::size_t files = 0;
  for (auto& f : fs::directory_iterator(dir_ / "objects" / kKey.substr(0, 2)))
    files += f.path().filename() != kKey + ".lock";
  EXPECT_EQ(files, 0u) << "a failed build left files behind";
  auto ok = cache.get_or_build(kKey, "so", builder("good"));
  ASSERT_TRUE(ok.ok());
  EXPECT_FALSE(ok->hit);
}

TEST_F(CacheTest, BuilderThatWritesNothingIsAnInternalError) {
  DiskCache cache = open_cache();
  auto e = cache.get_or_build(kKey, "so", [](const fs::path&) { return Status{}; });
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::internal);
}

TEST_F(CacheTest, BadKeyExtensionOrMetaIsBadArgument) {
  DiskCache cache = open_cache();
  EXPECT_EQ(cache.get_or_build("../../etc/passwd", "so", builder("x")).error().code, ErrorCode::bad_argument);
  EXPECT_EQ(cache.get_or_build(kKey, "json", builder("x")).error().code, ErrorCode::bad_argument);
  EXPECT_EQ(cache.get_or_build(kKey, "s/o", builder("x")).error().code, ErrorCode::bad_argument);
  EXPECT_EQ(cache.get_or_build(kKey, "so", builder("x"), nlohmann::json::array()).error().code,
            ErrorCode::bad_argument);
  EXPECT_EQ(marks(marks_), 0u);
}

TEST_F(CacheTest, Sidecars) {
  DiskCache cache = open_cache();
  EXPECT_FALSE(cache.read_sidecar(kKey, "oracle").has_value());
  ASSERT_TRUE(cache.write_sidecar(kKey, "oracle", "{\"verdict\":\"pass\"}").ok());
  EXPECT_EQ(cache.read_sidecar(kKey, "oracle"), std::optional<std::string>("{\"verdict\":\"pass\"}"));
  ASSERT_TRUE(cache.write_sidecar(kKey, "oracle", "v2").ok()); // replaced, not appended
  EXPECT_EQ(cache.read_sidecar(kKey, "oracle"), std::optional<std::string>("v2"));
  EXPECT_EQ(cache.write_sidecar(kKey, "../x", "bad").error().code, ErrorCode::bad_argument);
  EXPECT_FALSE(cache.read_sidecar(kKey, "../x").has_value());

  // A certificate describes one artifact: rebuilding a corrupt entry drops it.
  auto e = cache.get_or_build(kKey, "so", builder("artifact"));
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(cache.write_sidecar(kKey, "oracle", "certified").ok());
  fs::resize_file(e->artifact, 1);
  LogCapture log;
  ASSERT_TRUE(cache.get_or_build(kKey, "so", builder("artifact")).ok());
  EXPECT_FALSE(cache.read_sidecar(kKey, "oracle").has_value());
}

TEST_F(CacheTest, StatsCountTheLastRun) {
  DiskCache cache = open_cache();
  const std::string k2 = DiskCache::make_key(std::vector<std::string>{"second"});
  ASSERT_TRUE(cache.get_or_build(kKey, "so", builder(std::string(1000, 'a'))).ok()); // miss
  ASSERT_TRUE(cache.get_or_build(kKey, "so", builder("unused")).ok());               // hit
  ASSERT_TRUE(cache.get_or_build(kKey, "so", builder("unused")).ok());               // hit
  auto e2 = cache.get_or_build(k2, "so", builder(std::string(500, 'b')));            // miss
  ASSERT_TRUE(e2.ok());
  fs::resize_file(e2->artifact, 10);
  {
    LogCapture log;
    ASSERT_TRUE(cache.get_or_build(k2, "so", builder(std::string(500, 'b'))).ok()); // rebuild + miss
  }
  auto s = cache.stats();
  ASSERT_TRUE(s.ok()) << s.error().str();
  EXPECT_EQ(s->dir, dir_);
  EXPECT_EQ(s->entries, 2u);
  EXPECT_EQ(s->hits, 2u);
  EXPECT_EQ(s->misses, 3u);
  EXPECT_EQ(s->rebuilds, 1u);
  EXPECT_EQ(s->last_run_pid, ::getpid());
  EXPECT_GE(s->bytes, 1500u); // both artifacts plus their manifests
  EXPECT_LT(s->bytes, 1500u + 8192u);

  // A new process starts fresh counters: the stats now describe its single hit.
  std::fflush(nullptr);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto c = DiskCache::open(dir_);
    ::_exit(c.ok() && c->get_or_build(kKey, "so", builder("unused")).ok() ? 0 : 1);
  }
  ASSERT_EQ(wait_child(pid), 0);
  auto after = cache.stats();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->hits, 1u);
  EXPECT_EQ(after->misses, 0u);
  EXPECT_EQ(after->rebuilds, 0u);
  EXPECT_EQ(after->last_run_pid, pid);
}

TEST_F(CacheTest, ClearRemovesEntriesAndKeepsDir) {
  DiskCache cache = open_cache();
  const std::string k2 = DiskCache::make_key(std::vector<std::string>{"second"});
  ASSERT_TRUE(cache.get_or_build(kKey, "so", builder("one")).ok());
  ASSERT_TRUE(cache.get_or_build(k2, "bin", builder("two")).ok());
  ASSERT_TRUE(cache.write_sidecar(k2, "cert", "c").ok());
  ASSERT_EQ(cache.stats()->entries, 2u);
  ASSERT_TRUE(cache.clear().ok());
  auto s = cache.stats();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->entries, 0u);
  EXPECT_EQ(s->bytes, 0u);
  EXPECT_TRUE(fs::is_directory(dir_));
  EXPECT_FALSE(cache.read_sidecar(k2, "cert").has_value());
  auto e = cache.get_or_build(kKey, "so", builder("one"));
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->hit);
  EXPECT_EQ(marks(marks_), 3u);
}

TEST_F(CacheTest, CliStatsAndClear) {
  DiskCache cache = open_cache();
  const std::string k2 = DiskCache::make_key(std::vector<std::string>{"second"});
  ASSERT_TRUE(cache.get_or_build(kKey, "so", builder(std::string(3000, 'a'))).ok());
  ASSERT_TRUE(cache.get_or_build(k2, "so", builder("b")).ok());
  ASSERT_TRUE(cache.get_or_build(k2, "so", builder("b")).ok());
  auto run = [&](const char* verb) {
    auto r = run_process({FUSOR_BIN, "cache", verb, "--dir", dir_.string()}, std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << r.error().str();
    return r.ok() ? *r : ProcessResult{};
  };
  ProcessResult stats = run("stats");
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_NE(stats.out.find("dir:      " + dir_.string()), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("entries:  2\n"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("1 hits, 2 misses, 0 rebuilt"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("pid " + std::to_string(::getpid())), std::string::npos) << stats.out;

  ProcessResult clear = run("clear");
  EXPECT_EQ(clear.exit_code, 0) << clear.err;
  EXPECT_NE(clear.out.find("removed 2 entries"), std::string::npos) << clear.out;
  EXPECT_EQ(cache.stats()->entries, 0u);

  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  ProcessResult unsafe = run("stats");
  EXPECT_EQ(unsafe.exit_code, 2);
  EXPECT_NE(unsafe.err.find("E_CACHE_UNSAFE"), std::string::npos) << unsafe.err;
}
