#include "targets/cuda/cuda_launch.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

namespace fusor::cuda {
namespace {

constexpr std::string_view kPrefix = "// fusor-launch: ";
constexpr std::int64_t kMaxGridX = 2147483647, kMaxGridYZ = 65535;
// Grid-stride kernels never need more blocks than this to fill any current GPU.
constexpr std::int64_t kStrideBlocks = 65536;

std::string_view rule_name(LaunchSpec::Rule r) {
  switch (r) {
  case LaunchSpec::Rule::elementwise: return "elementwise";
  case LaunchSpec::Rule::rows: return "rows";
  case LaunchSpec::Rule::gemm: return "gemm";
  case LaunchSpec::Rule::attention: return "attention";
  case LaunchSpec::Rule::library: return "library";
  }
  return "?";
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

Error bad(const std::string& why) { return make_error(ErrorCode::internal, "cuda kernel launch line: " + why); }

} // namespace

std::string launch_line(const LaunchSpec& s) {
  return std::string(kPrefix) + std::string(rule_name(s.rule)) + " threads=" + std::to_string(s.threads) +
         " tile_m=" + std::to_string(s.tile_m) + " tile_n=" + std::to_string(s.tile_n) +
         " smem=" + std::to_string(s.smem);
}

Expected<LaunchSpec> parse_launch(std::string_view source) {
  const size_t at = source.find(kPrefix);
  if (at == std::string_view::npos) return bad("missing (\"" + std::string(kPrefix) + "...\")");
  std::string_view line = source.substr(at + kPrefix.size());
  line = line.substr(0, line.find('\n'));
  std::vector<std::string_view> words;
  while (!line.empty()) {
    const size_t sp = line.find(' ');
    if (sp != 0) words.push_back(line.substr(0, sp));
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
  }
  if (words.empty()) return bad("empty");
  LaunchSpec s;
  bool known = false;
  for (auto r : {LaunchSpec::Rule::elementwise, LaunchSpec::Rule::rows, LaunchSpec::Rule::gemm,
                 LaunchSpec::Rule::attention, LaunchSpec::Rule::library})
    if (words[0] == rule_name(r)) s.rule = r, known = true;
  if (!known) return bad("unknown rule '" + std::string(words[0]) + "'");
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    if (eq == std::string_view::npos) return bad("'" + std::string(words[i]) + "' is not key=value");
    const std::string_view key = words[i].substr(0, eq), val = words[i].substr(eq + 1);
    int v = 0;
    auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
    if (ec != std::errc{} || p != val.data() + val.size() || v < 0)
      return bad("bad value in '" + std::string(words[i]) + "'");
    if (key == "threads")
      s.threads = v;
    else if (key == "tile_m")
      s.tile_m = v;
    else if (key == "tile_n")
      s.tile_n = v;
    else if (key == "smem")
      s.smem = v;
    else
      return bad("unknown key '" + std::string(key) + "'");
  }
  if (s.threads < 1 || s.threads > 1024 || s.tile_m < 1) return bad("threads must be 1..1024 and tile_m >= 1");
  return s;
}

Expected<Geometry> geometry(const LaunchSpec& s, std::span<const std::int64_t> dims) {
  auto need = [&](size_t n) -> Status {
    if (dims.size() < n)
      return make_error(ErrorCode::shape_mismatch, "cuda launch: " + std::to_string(dims.size()) +
                                                       " dims given, the kernel's rule needs " + std::to_string(n));
    return {};
  };
  Geometry g;
  g.block = static_cast<unsigned>(s.threads);
  g.smem = static_cast<unsigned>(s.smem);
  std::int64_t gx = 1, gy = 1;
  switch (s.rule) {
  case LaunchSpec::Rule::elementwise:
    FUSOR_TRY(need(1));
    g.empty = dims[0] <= 0;
    gx = std::min(ceil_div(std::max<std::int64_t>(dims[0], 1), s.threads), kStrideBlocks);
    break;
  case LaunchSpec::Rule::rows:
    FUSOR_TRY(need(1));
    g.empty = dims[0] <= 0;
    gx = std::min(ceil_div(std::max<std::int64_t>(dims[0], 1), s.tile_m), kStrideBlocks);
    break;
  case LaunchSpec::Rule::gemm:
    FUSOR_TRY(need(2));
    g.empty = dims[0] <= 0 || dims[1] <= 0;
    gx = s.tile_n > 0 ? ceil_div(std::max<std::int64_t>(dims[1], 1), s.tile_n) : 1;
    gy = ceil_div(std::max<std::int64_t>(dims[0], 1), s.tile_m);
    // Tile-swizzled kernels fold the grid into x when y is past the hardware limit.
    if (gy > kMaxGridYZ) gx *= gy, gy = 1;
    break;
  case LaunchSpec::Rule::attention:
    FUSOR_TRY(need(4));
    g.empty = dims[3] <= 0 || dims[0] * dims[1] <= 0;
    gx = ceil_div(std::max<std::int64_t>(dims[3], 1), s.tile_m);
    gy = std::max<std::int64_t>(dims[0] * dims[1], 1);
    break;
  case LaunchSpec::Rule::library:
    FUSOR_TRY(need(2));
    g.empty = dims[0] <= 0 || dims[1] <= 0;
    break;
  }
  if (gx > kMaxGridX || gy > kMaxGridYZ)
    return make_error(ErrorCode::shape_mismatch, "cuda launch: grid " + std::to_string(gx) + "x" + std::to_string(gy) +
                                                     " exceeds the device's grid limits");
  g.grid_x = static_cast<unsigned>(gx);
  g.grid_y = static_cast<unsigned>(gy);
  return g;
}

} // namespace fusor::cuda
