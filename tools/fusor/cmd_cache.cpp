// `fusor cache stats|clear`: inspect or empty the on-disk kernel cache (SPEC §3).
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "fusor/cache.hpp"

namespace fusor::cli {
namespace {

struct CacheOptions {
  std::string dir; // empty: FUSOR_CACHE_DIR, else $XDG_CACHE_HOME/fusor, else ~/.cache/fusor
};

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

Expected<DiskCache> open_cache(const CacheOptions& o) {
  if (o.dir.empty()) return DiskCache::open();
  return DiskCache::open(std::filesystem::path(o.dir));
}

int run_stats(const CacheOptions& o) {
  auto cache = open_cache(o);
  if (!cache) return fail("fusor cache stats", cache.error());
  auto s = cache->stats();
  if (!s) return fail("fusor cache stats", s.error());
  std::cout << "dir:      " << s->dir.string() << "\n"
            << "entries:  " << s->entries << "\n"
            << "bytes:    " << s->bytes << " (" << human_bytes(s->bytes) << ")\n";
  if (s->last_run_pid == 0)
    std::cout << "last run: none recorded\n";
  else
    std::cout << "last run: pid " << s->last_run_pid << ": " << s->hits << " hits, " << s->misses << " misses, "
              << s->rebuilds << " rebuilt after corruption\n";
  return kExitOk;
}

int run_clear(const CacheOptions& o) {
  auto cache = open_cache(o);
  if (!cache) return fail("fusor cache clear", cache.error());
  auto before = cache->stats();
  if (!before) return fail("fusor cache clear", before.error());
  const Status cleared = cache->clear();
  if (!cleared) return fail("fusor cache clear", cleared.error());
  std::cout << "removed " << before->entries << " entries (" << human_bytes(before->bytes) << ") from "
            << cache->dir().string() << "\n";
  return kExitOk;
}

} // namespace

Command add_cache_command(CLI::App& app) {
  auto o = std::make_shared<CacheOptions>();
  CLI::App* sub = app.add_subcommand("cache", "Inspect or empty the on-disk cache of compiled kernels");
  sub->require_subcommand(1);
  sub->footer("The cache dir is --dir, else FUSOR_CACHE_DIR, else $XDG_CACHE_HOME/fusor, else ~/.cache/fusor.\n"
              "Entries are content-addressed by kernel source and toolchain identity; a dir writable by\n"
              "other users is refused (E_CACHE_UNSAFE).");
  CLI::App* stats = sub->add_subcommand("stats", "Print the cache dir, its entry count and size, and the hits,\n"
                                                 "misses and corruption rebuilds of the last process that used it");
  CLI::App* clear = sub->add_subcommand("clear", "Remove every cached kernel and its sidecars (keeps the dir)");
  for (CLI::App* s : {stats, clear})
    s->add_option("--dir", o->dir, "Cache directory (default: FUSOR_CACHE_DIR, then $XDG_CACHE_HOME/fusor)");
  return {sub, [o, stats, clear] {
            if (stats->parsed()) return run_stats(*o);
            if (clear->parsed()) return run_clear(*o);
            return kExitUserError; // unreachable: require_subcommand(1)
          }};
}

} // namespace fusor::cli
