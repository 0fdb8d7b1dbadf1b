// What the host CPU offers, as the compiler's -march=native will see it. Part of the
// compiler identity, hence of every cache key.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "fusor/toolchain.hpp"

namespace fusor {

namespace {

struct CpuInfo {
  std::string model;           // "model name", plus family/model numbers: a VM's generic name hides
  std::set<std::string> flags; // the microarchitecture that -march=native picks from them
};

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The first processor's lines (x86 cores of one machine share an ISA).
const CpuInfo& cpuinfo() {
  static const CpuInfo info = [] {
    CpuInfo ci;
    std::string name, family, model;
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (trim(line).empty()) break; // end of the first processor's block
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = trim(line.substr(0, colon));
      const std::string value = trim(line.substr(colon + 1));
      if (key == "model name")
        name = value;
      else if (key == "cpu family")
        family = value;
      else if (key == "model")
        model = value;
      else if (key == "flags") {
        std::istringstream words(value);
        for (std::string w; words >> w;) ci.flags.insert(w);
      }
    }
    ci.model = name.empty() ? "unknown cpu" : name;
    if (!family.empty()) ci.model += " (family " + family + " model " + model + ")";
    return ci;
  }();
  return info;
}

bool cpu_flag(const char* name) { return cpuinfo().flags.count(name) != 0; }

} // namespace

bool host_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

namespace {

// The data or unified caches one core of the host sees, from sysfs: (level, bytes) of each.
const std::vector<std::pair<int, std::int64_t>>& host_caches() {
  static const std::vector<std::pair<int, std::int64_t>> caches = [] {
    std::vector<std::pair<int, std::int64_t>> found;
    for (int i = 0; i < 8; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      std::ifstream level_in(dir + "level"), size_in(dir + "size"), type_in(dir + "type");
      std::int64_t level = 0, size = 0;
      std::string type;
      char unit = 0;
      if (!(level_in >> level) || !(size_in >> size)) continue;
      if ((type_in >> type) && type == "Instruction") continue;
      size_in >> unit; // sysfs writes "32768K"
      size *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1;
      found.emplace_back(static_cast<int>(level), size);
    }
    return found;
  }();
  return caches;
}

} // namespace

std::int64_t host_llc_bytes() {
  std::int64_t best = 0, level_best = 0;
  for (const auto& [level, size] : host_caches())
    if (level > level_best) best = size, level_best = level;
  return best;
}

std::int64_t host_llc_share_bytes() {
  const std::int64_t llc = host_llc_bytes();
  if (!cpu_flag("hypervisor")) return llc;
  // About one core's slice of a Xeon's L3 (Sapphire Rapids 1.875 MiB), and no less than 12 MiB.
  // On the lent host's 16 vCPUs the whole 300 MiB let a reused 4096 x 4096 B (64 MiB) count as
  // cached, but it was read at the speed of memory, and 14-24 rows took the packed path at
  // 0.80-0.97 of oneDNN against 1.04-1.26 on the row path; on the two-core VM B of 8-9 MiB
  // stayed cached (packed 0.96-1.23, rows 0.82-1.01) and B of 16-24 MiB did not (packed
  // 0.77-1.18, rows 1.01-1.51). Run bi, x86_simd_gemm_rows.cpp and decisions.md.
  constexpr std::int64_t kPerCpu = std::int64_t{2} << 20, kFloor = std::int64_t{12} << 20;
  return std::min(llc, std::max(kFloor, host_affinity_cpus() * kPerCpu));
}

int host_affinity_cpus() {
  int cpus = 1;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) cpus = CPU_COUNT(&set);
#endif
  return cpus;
}

std::int64_t host_l2_bytes() {
  for (const auto& [level, size] : host_caches())
    if (level == 2) return size;
  return 0;
}

bool host_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool amx_emulated() {
  static const bool on = [] {
    const char* v = std::getenv("FUSOR_AMX_EMULATE");
    return v && std::string_view(v) == "1" && cpu_flag("avx512_bf16") && cpu_flag("avx512bw");
  }();
  return on;
}

std::optional<std::string> host_lacks_amx_bf16() {
  static const std::optional<std::string> why = []() -> std::optional<std::string> {
    if (!cpu_flag("amx_tile") || !cpu_flag("amx_bf16")) return "the CPU lacks AMX (amx_tile, amx_bf16)";
#if defined(__linux__) && defined(__x86_64__)
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) != 0)
      return "the kernel refused AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM; Linux 5.16+)";
    return std::nullopt;
#else
    return "AMX tile state is only requested on Linux x86-64";
#endif
  }();
  return why;
}

std::string host_isa() {
  std::string isa;
#if defined(__x86_64__)
  isa = "x86_64";
#elif defined(__aarch64__)
  isa = "aarch64";
#else
  isa = "unknown-arch";
#endif
#if defined(__x86_64__) || defined(__i386__)
  auto add = [&](bool present, const char* name) {
    if (present) isa += std::string(" ") + name;
  };
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512dq"), "avx512dq");
  // Not every compiler's __builtin_cpu_supports knows these (clang 14 lacks bf16); the
  // kernel's flags are authoritative.
  add(cpu_flag("avx512_vnni"), "avx512vnni");
  add(cpu_flag("avx512_bf16"), "avx512bf16");
  add(cpu_flag("avx512_fp16"), "avx512fp16");
  add(cpu_flag("amx_tile"), "amx");
#endif
  isa += " | " + cpuinfo().model;
  return isa;
}

} // namespace fusor
