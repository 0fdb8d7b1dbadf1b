// The content-addressed disk cache (SPEC §3). Layout under <dir>/objects/<key[0:2]>/:
//   <key>.<ext>          the artifact
//   <key>.json           its manifest (sha256, size, creation time, ext, caller meta)
//   <key>.side.<name>    sidecar documents (e.g. oracle certificates)
//   <key>.lock           flock target serialising builders of this key across processes
//   .tmp-*               files being written; renamed into place when complete
// The manifest is renamed into place after the artifact, so a manifest never points at a
// half-written artifact; every hit is re-hashed before it is returned.
#include "fusor/cache.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <system_error>

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fusor/log.hpp"

namespace fusor {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kManifestFormat = "fusor-cache-entry-v1";

std::string errno_text(int err) { return std::strerror(err); }

Error io_error(const std::string& what, const fs::path& path, int err) {
  return make_error(ErrorCode::io_error, what + " " + path.string() + ": " + errno_text(err));
}

bool is_hex_key(std::string_view key) {
  if (key.size() != 64) return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool is_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

Status check_key(std::string_view key) {
  if (is_hex_key(key)) return {};
  return make_error(ErrorCode::bad_argument,
                    "cache key '" + std::string(key) + "' is not 64 lowercase hex digits (use DiskCache::make_key)");
}

// Extensions are plain words, and never the names the cache uses for its own files.
Status check_ext(std::string_view ext) {
  bool ok = !ext.empty() && ext.size() <= 16 && ext != "json" && ext != "lock" && ext != "side";
  for (char c : ext) ok = ok && is_alnum(c);
  if (ok) return {};
  return make_error(ErrorCode::bad_argument, "cache artifact extension '" + std::string(ext) +
                                                 "' must be 1-16 letters/digits and not json, lock or side");
}

Status check_sidecar_name(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 64 && is_alnum(name.front());
  for (char c : name) ok = ok && (is_alnum(c) || c == '_' || c == '-' || c == '.');
  if (ok) return {};
  return make_error(ErrorCode::bad_argument,
                    "cache sidecar name '" + std::string(name) + "' must be 1-64 of [A-Za-z0-9_.-], starting alnum");
}

std::string mode_octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// mkdir -p with mode 0700 for every directory it creates.
Status make_dirs_private(const fs::path& dir) {
  fs::path prefix;
  for (const fs::path& part : dir) {
    prefix /= part;
    if (part == prefix.root_path() || part.empty()) continue;
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      return io_error("cannot create directory", prefix, errno);
  }
  return {};
}

// Refuse a directory another user could write into: they could plant an artifact that we
// would then dlopen.
Status check_private_dir(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return io_error("cannot stat cache dir", dir, errno);
  if (!S_ISDIR(st.st_mode))
    return make_error(ErrorCode::cache_unsafe, "cache dir " + dir.string() + " exists and is not a directory");
  if (st.st_uid != ::geteuid())
    return make_error(ErrorCode::cache_unsafe, "cache dir " + dir.string() + " is owned by uid " +
                                                   std::to_string(st.st_uid) + ", not by the current user (uid " +
                                                   std::to_string(::geteuid()) +
                                                   "); set FUSOR_CACHE_DIR to a dir you own");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return make_error(ErrorCode::cache_unsafe, "cache dir " + dir.string() + " has mode " + mode_octal(st.st_mode) +
                                                   " (group- or world-writable); run chmod 700 on it or set "
                                                   "FUSOR_CACHE_DIR to a private dir");
  return {};
}

// fsync a file or directory by path; the rename that follows is only durable after it.
Status fsync_path(const fs::path& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open for fsync", path, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("fsync failed on", path, err);
  return {};
}

std::atomic<std::uint64_t> g_temp_counter{0};

// A name no other thread or process writing into the same dir will pick.
fs::path temp_path_in(const fs::path& dir, std::string_view stem, std::string_view ext) {
  std::string name = ".tmp-" + std::string(stem) + "-" + std::to_string(::getpid()) + "-" +
                     std::to_string(g_temp_counter.fetch_add(1));
  if (!ext.empty()) name += "." + std::string(ext);
  return dir / name;
}

Status write_all(int fd, std::string_view content, const fs::path& path) {
  while (!content.empty()) {
    ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write", path, errno);
    }
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

// Temp file in the same dir + rename: readers see the old file or the new one. `durable`
// adds the fsyncs that make it survive a power loss (skipped for mere statistics).
Status write_file_atomic(const fs::path& path, std::string_view content, bool durable = true) {
  const fs::path tmp = temp_path_in(path.parent_path(), path.filename().string(), "");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("cannot create", tmp, errno);
  Status st = write_all(fd, content, tmp);
  if (st.ok() && durable && ::fsync(fd) != 0) st = io_error("fsync failed on", tmp, errno);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = io_error("cannot rename into", path, errno);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return durable ? fsync_path(path.parent_path(), true) : Status{};
}

std::optional<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

// An exclusive flock held for the object's lifetime. The lock file itself is never
// deleted while in use: unlinking it would let a second process lock a fresh inode.
class FileLock {
public:
  static Expected<FileLock> acquire(const fs::path& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return io_error("cannot open lock file", path, errno);
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return io_error("cannot lock", path, err);
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_); // closing releases the flock
  }

private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

// json::value() throws on a type mismatch; files on disk may hold anything.
std::string json_string(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::uint64_t json_u64(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

// ---- last-run counters ----------------------------------------------------------------

// pid alone repeats across reboots and pid wrap; pid + start time (clock ticks since boot)
// names one process.
std::string this_run_tag() {
  static std::mutex m;
  static pid_t cached_pid = 0;
  static std::string cached_tag;
  std::lock_guard<std::mutex> lock(m);
  const pid_t pid = ::getpid();
  if (pid == cached_pid) return cached_tag; // recomputed after fork(): the child is a new run
  std::string start = "?";
  if (auto stat = read_text("/proc/self/stat")) {
    // Field 22 (starttime); fields after the ')' closing the command name are space separated.
    const auto close = stat->rfind(')');
    if (close != std::string::npos) {
      std::istringstream fields(stat->substr(close + 1));
      std::string field;
      for (int i = 3; i <= 22 && fields >> field; ++i)
        if (i == 22) start = field;
    }
  }
  cached_pid = pid;
  cached_tag = std::to_string(pid) + "@" + start;
  return cached_tag;
}

enum class Counter { hit, miss, rebuild };

// Counting is best effort: a failure to record a statistic never fails a lookup.
void record(const fs::path& dir, Counter counter) {
  auto lock = FileLock::acquire(dir / "last-run.lock");
  if (!lock.ok()) return;
  const std::string tag = this_run_tag();
  nlohmann::json run;
  if (auto text = read_text(dir / "last-run.json")) {
    run = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!run.is_object() || json_string(run, "run") != tag) run = nlohmann::json();
  }
  if (run.is_null()) run = {{"run", tag}, {"pid", ::getpid()}, {"hits", 0}, {"misses", 0}, {"rebuilds", 0}};
  const char* field = counter == Counter::hit ? "hits" : counter == Counter::miss ? "misses" : "rebuilds";
  run[field] = json_u64(run, field) + 1;
  (void)write_file_atomic(dir / "last-run.json", run.dump(1), /*durable=*/false);
}

// ---- entries --------------------------------------------------------------------------

struct Paths {
  fs::path shard, artifact, manifest, lock;
};

Paths entry_paths(const fs::path& dir, const std::string& key, std::string_view ext) {
  Paths p;
  p.shard = dir / "objects" / key.substr(0, 2);
  p.artifact = p.shard / (key + "." + std::string(ext));
  p.manifest = p.shard / (key + ".json");
  p.lock = p.shard / (key + ".lock");
  return p;
}

enum class ProbeState { hit, absent, corrupt };
struct Probe {
  ProbeState state = ProbeState::absent;
  std::string why; // for corrupt
  CacheEntry entry;
};

Probe probe_entry(const Paths& p, const std::string& key, std::string_view ext) {
  Probe out;
  std::error_code ec;
  const bool have_manifest = fs::exists(p.manifest, ec);
  const bool have_artifact = fs::exists(p.artifact, ec);
  auto corrupt = [&](std::string why) {
    out.state = ProbeState::corrupt;
    out.why = std::move(why);
    return out;
  };
  if (!have_manifest && !have_artifact) return out;
  if (!have_manifest) return corrupt("artifact " + p.artifact.string() + " has no manifest");
  auto text = read_text(p.manifest);
  if (!text) return corrupt("manifest " + p.manifest.string() + " is unreadable");
  nlohmann::json m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) return corrupt("manifest " + p.manifest.string() + " is not a JSON object");
  if (json_string(m, "format") != kManifestFormat || json_string(m, "key") != key || !m.contains("sha256") ||
      !m["sha256"].is_string() || !m.contains("size") || !m["size"].is_number_unsigned())
    return corrupt("manifest " + p.manifest.string() + " lacks format/key/sha256/size fields");
  if (json_string(m, "ext") != ext)
    return corrupt("manifest records extension '" + json_string(m, "ext") + "', asked for '" + std::string(ext) + "'");
  if (!have_artifact) return corrupt("artifact " + p.artifact.string() + " is missing");
  const std::uint64_t want_size = m["size"].get<std::uint64_t>();
  const std::uint64_t size = fs::file_size(p.artifact, ec);
  if (ec) return corrupt("cannot size artifact " + p.artifact.string() + ": " + ec.message());
  if (size != want_size)
    return corrupt("artifact " + p.artifact.string() + " is " + std::to_string(size) + " bytes, manifest says " +
                   std::to_string(want_size) + " (truncated or altered)");
  const std::string want_sha = m["sha256"].get<std::string>();
  auto sha = sha256_file(p.artifact);
  if (!sha.ok()) return corrupt(sha.error().str());
  if (*sha != want_sha)
    return corrupt("artifact " + p.artifact.string() + " has sha256 " + *sha + ", manifest says " + want_sha);
  out.state = ProbeState::hit;
  out.entry.artifact = p.artifact;
  out.entry.key = key;
  out.entry.hit = true;
  out.entry.sha256 = want_sha;
  out.entry.meta = m.contains("meta") ? m["meta"] : nlohmann::json::object();
  return out;
}

// Everything named <key>.* except the lock (a corrupt artifact's certificates go with it).
void remove_entry_files(const fs::path& shard, const std::string& key) {
  std::error_code ec;
  const std::string prefix = key + ".";
  const std::string lock_name = key + ".lock";
  for (const auto& f : fs::directory_iterator(shard, ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name != lock_name) fs::remove(f.path(), ec);
  }
}

std::string utc_iso8601(std::time_t t) {
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace

// ---- DiskCache --------------------------------------------------------------------------

Expected<fs::path> DiskCache::default_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  std::error_code ec;
  if (std::string d = env("FUSOR_CACHE_DIR"); !d.empty()) return fs::absolute(d, ec);
  // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty() && fs::path(x).is_absolute()) return fs::path(x) / "fusor";
  std::string home = env("HOME");
  if (home.empty())
    if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_dir != nullptr) home = pw->pw_dir;
  if (home.empty())
    return make_error(ErrorCode::io_error,
                      "no cache dir: FUSOR_CACHE_DIR, XDG_CACHE_HOME and HOME are unset and the user has no home");
  return fs::path(home) / ".cache" / "fusor";
}

Expected<DiskCache> DiskCache::open(std::optional<fs::path> dir) {
  fs::path root;
  if (dir && !dir->empty()) {
    std::error_code ec;
    root = fs::absolute(*dir, ec);
    if (ec) return make_error(ErrorCode::io_error, "cannot resolve cache dir " + dir->string() + ": " + ec.message());
  } else {
    FUSOR_TRY_ASSIGN(root, default_dir());
  }
  root = root.lexically_normal();
  if (!root.has_filename() && root.has_parent_path()) root = root.parent_path(); // drop a trailing '/'
  FUSOR_TRY(make_dirs_private(root));
  FUSOR_TRY(check_private_dir(root));
  FUSOR_TRY(make_dirs_private(root / "objects"));
  FUSOR_TRY(check_private_dir(root / "objects"));
  return DiskCache(root);
}

std::string DiskCache::make_key(std::span<const std::string_view> parts) {
  // Each part as 8-byte little-endian length + bytes: no two part lists share an encoding.
  std::string encoded = "fusor-key-v1";
  for (std::string_view part : parts) {
    std::uint64_t n = part.size();
    for (int i = 0; i < 8; ++i) encoded.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    encoded.append(part);
  }
  return sha256_hex(encoded);
}

std::string DiskCache::make_key(const std::vector<std::string>& parts) {
  std::vector<std::string_view> views(parts.begin(), parts.end());
  return make_key(std::span<const std::string_view>(views));
}

Expected<CacheEntry> DiskCache::get_or_build(const std::string& key, std::string_view ext,
                                             const std::function<Status(const fs::path& out)>& build,
                                             const nlohmann::json& meta) {
  FUSOR_TRY(check_key(key));
  FUSOR_TRY(check_ext(ext));
  if (!meta.is_null() && !meta.is_object())
    return make_error(ErrorCode::bad_argument, "cache meta for key " + key + " must be a JSON object");
  const Paths p = entry_paths(dir_, key, ext);

  // Lock-free fast path: a verified hit needs no lock. Anything else is re-examined under
  // the lock, because a concurrent builder may be mid-way through replacing the entry.
  Probe first = probe_entry(p, key, ext);
  if (first.state == ProbeState::hit) {
    record(dir_, Counter::hit);
    return std::move(first.entry);
  }

  FUSOR_TRY(make_dirs_private(p.shard));
  FUSOR_TRY_ASSIGN(FileLock lock, FileLock::acquire(p.lock));
  Probe again = probe_entry(p, key, ext);
  if (again.state == ProbeState::hit) { // another process built it while we waited
    record(dir_, Counter::hit);
    return std::move(again.entry);
  }
  if (again.state == ProbeState::corrupt) {
    log_line("E_CACHE_CORRUPT: cache entry " + key + " in " + dir_.string() + ": " + again.why +
             "; deleting and rebuilding");
    record(dir_, Counter::rebuild);
  }
  remove_entry_files(p.shard, key);

  const fs::path tmp = temp_path_in(p.shard, key, ext);
  std::error_code ec;
  fs::remove(tmp, ec);
  Status built = build(tmp);
  if (!built.ok()) {
    fs::remove(tmp, ec);
    return built.error();
  }
  if (!fs::is_regular_file(tmp, ec)) {
    fs::remove(tmp, ec);
    return make_error(ErrorCode::internal,
                      "cache builder for key " + key + " reported success but wrote no file at " + tmp.string());
  }
  auto fail = [&](Error e) -> Expected<CacheEntry> {
    fs::remove(tmp, ec);
    return e;
  };
  if (Status st = fsync_path(tmp, false); !st.ok()) return fail(st.error());
  auto sha = sha256_file(tmp);
  if (!sha.ok()) return fail(sha.error());
  const std::uint64_t size = fs::file_size(tmp, ec);
  if (ec) return fail(make_error(ErrorCode::io_error, "cannot size " + tmp.string() + ": " + ec.message()));
  if (::rename(tmp.c_str(), p.artifact.c_str()) != 0) return fail(io_error("cannot rename into", p.artifact, errno));

  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  nlohmann::json manifest = {{"format", kManifestFormat},
                             {"key", key},
                             {"ext", std::string(ext)},
                             {"sha256", *sha},
                             {"size", size},
                             {"created_unix", static_cast<std::int64_t>(now)},
                             {"created", utc_iso8601(now)},
                             {"meta", meta.is_null() ? nlohmann::json::object() : meta}};
  if (Status st = write_file_atomic(p.manifest, manifest.dump(1)); !st.ok()) {
    fs::remove(p.artifact, ec); // an artifact without a manifest would read as corrupt
    return st.error();
  }
  record(dir_, Counter::miss);

  CacheEntry entry;
  entry.artifact = p.artifact;
  entry.key = key;
  entry.hit = false;
  entry.sha256 = *sha;
  entry.meta = manifest["meta"];
  return entry;
}

Status DiskCache::write_sidecar(const std::string& key, std::string_view name, std::string_view content) {
  FUSOR_TRY(check_key(key));
  FUSOR_TRY(check_sidecar_name(name));
  const fs::path shard = dir_ / "objects" / key.substr(0, 2);
  FUSOR_TRY(make_dirs_private(shard));
  return write_file_atomic(shard / (key + ".side." + std::string(name)), content);
}

std::optional<std::string> DiskCache::read_sidecar(const std::string& key, std::string_view name) const {
  if (!check_key(key).ok() || !check_sidecar_name(name).ok()) return std::nullopt;
  return read_text(dir_ / "objects" / key.substr(0, 2) / (key + ".side." + std::string(name)));
}

Expected<CacheStats> DiskCache::stats() const {
  CacheStats s;
  s.dir = dir_;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir_ / "objects", ec); !ec && it != fs::end(it); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    s.bytes += it->file_size(ec);
    const fs::path& path = it->path();
    if (path.extension() == ".json" && is_hex_key(path.stem().string())) ++s.entries;
  }
  if (ec) return make_error(ErrorCode::io_error, "cannot scan cache dir " + dir_.string() + ": " + ec.message());
  if (auto text = read_text(dir_ / "last-run.json")) {
    nlohmann::json run = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (run.is_object()) {
      s.hits = json_u64(run, "hits");
      s.misses = json_u64(run, "misses");
      s.rebuilds = json_u64(run, "rebuilds");
      s.last_run_pid = static_cast<std::int64_t>(json_u64(run, "pid"));
    }
  }
  return s;
}

Status DiskCache::clear() {
  std::error_code ec;
  const fs::path objects = dir_ / "objects";
  for (const auto& shard : fs::directory_iterator(objects, ec)) {
    fs::remove_all(shard.path(), ec);
    if (ec) return make_error(ErrorCode::io_error, "cannot remove " + shard.path().string() + ": " + ec.message());
  }
  if (ec) return make_error(ErrorCode::io_error, "cannot list " + objects.string() + ": " + ec.message());
  return {};
}

} // namespace fusor
