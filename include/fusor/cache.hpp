// The on-disk, content-addressed artifact cache (SPEC §3), and the SHA-256 it is built on.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusor/error.hpp"

namespace fusor {

// Lowercase hex SHA-256 of a byte string.
std::string sha256_hex(std::string_view bytes);
// Lowercase hex SHA-256 of a file's contents; E_IO if it cannot be read.
Expected<std::string> sha256_file(const std::filesystem::path& path);

struct CacheEntry {
  std::filesystem::path artifact; // <dir>/objects/<key[0:2]>/<key>.<ext>
  std::string key;
  bool hit = false; // false: this call built it
  std::string sha256;
  nlohmann::json meta; // what the builder's caller recorded
};

struct CacheStats {
  std::filesystem::path dir;
  std::uint64_t entries = 0; // manifests present
  std::uint64_t bytes = 0;   // every file under objects/ (artifacts, manifests, sidecars)
  // Counters of the most recent process that used this cache dir (the "last run").
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t rebuilds = 0;    // corrupt entries detected, deleted and rebuilt
  std::int64_t last_run_pid = 0; // 0 when no process has recorded a run yet
};

class DiskCache {
public:
  // The directory a cache opened without an explicit dir uses: FUSOR_CACHE_DIR, else
  // $XDG_CACHE_HOME/fusor, else $HOME/.cache/fusor.
  static Expected<std::filesystem::path> default_dir();

  // Creates the dir (and missing parents) with mode 0700. E_CACHE_UNSAFE if it is group- or
  // world-writable or not owned by the effective user: another user could plant a .so there.
  static Expected<DiskCache> open(std::optional<std::filesystem::path> dir = std::nullopt);

  const std::filesystem::path& dir() const { return dir_; }

  // SHA-256 over length-prefixed parts, so ("ab","c") and ("a","bc") differ.
  static std::string make_key(std::span<const std::string_view> parts);
  static std::string make_key(const std::vector<std::string>& parts);

  // Returns the verified entry for key, building it on a miss. `build` writes the artifact
  // to the path it is given; its error is returned as is and leaves no entry. A corrupt
  // entry (artifact altered or truncated, manifest broken) is logged as E_CACHE_CORRUPT,
  // deleted and rebuilt. Concurrent processes asking for the same key build it once.
  Expected<CacheEntry> get_or_build(const std::string& key, std::string_view ext,
                                    const std::function<Status(const std::filesystem::path& out)>& build,
                                    const nlohmann::json& meta = {});

  // Small documents stored beside an entry (e.g. oracle certificates); written atomically.
  Status write_sidecar(const std::string& key, std::string_view name, std::string_view content);
  std::optional<std::string> read_sidecar(const std::string& key, std::string_view name) const;

  Expected<CacheStats> stats() const;
  // Removes every entry, sidecar and lock file; keeps the dir and the last-run counters.
  Status clear();

private:
  explicit DiskCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

  std::filesystem::path dir_;
};

} // namespace fusor
