// libFuzzer target for the region text form: any input must parse or fail with an error
// value, and whatever parses must print and read back to the same region. A mismatch
// aborts so the fuzzer records the input.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fusor/region_text.hpp"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "region_text_fuzzer: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// NaN != NaN, so a region with a NaN DAG constant is compared through its printed text.
bool has_nan_constant(const fusor::Region& region) {
  fusor::PointwiseSpec graph;
  if (const auto* p = std::get_if<fusor::PointwiseGraphRegion>(&region)) graph = p->spec();
  if (const auto* p = std::get_if<fusor::PointwiseReduceRegion>(&region)) graph = p->spec().graph;
  for (const auto& op : graph.ops)
    for (const auto& arg : op.args)
      if (const double* c = std::get_if<double>(&arg); c && std::isnan(*c)) return true;
  return false;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto regions = fusor::parse_regions(text);
  if (!regions) {
    const auto& e = regions.error();
    if (e.code == fusor::ErrorCode::parse && e.message.rfind(" at ", 0) != 0)
      fail("E_PARSE without a position", e.str());
    return 0;
  }
  for (const auto& region : *regions) {
    const std::string printed = fusor::print_region(region);
    if (printed.find('\n') != std::string::npos) fail("canonical form spans lines", printed);
    auto back = fusor::parse_region(printed);
    if (!back) fail("canonical form does not parse", printed + "\n" + back.error().str());
    const std::string reprinted = fusor::print_region(*back);
    if (reprinted != printed) fail("print is not a fixed point", printed + "\n" + reprinted);
    if (!(*back == region) && !has_nan_constant(region)) fail("parse(print(r)) != r", printed);
  }
  // parse_region agrees with parse_regions on single-block input.
  if (regions->size() == 1) {
    auto one = fusor::parse_region(text);
    if (!one) fail("parse_region rejects what parse_regions accepts", one.error().str());
    if (fusor::print_region(*one) != fusor::print_region(regions->front())) fail("parse_region differs", "");
  }
  return 0;
}
