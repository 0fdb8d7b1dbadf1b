// The region text form: one block per region, `kind { field = value; ... }`, `#` comments.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/region.hpp"

namespace fusor {

// Parses every block of `text`. Syntax errors are E_PARSE with " at LINE:COL: expected
// X, found Y"; a misspelled or repeated field is E_PARSE too; semantic errors carry the
// region's validation code.
Expected<std::vector<Region>> parse_regions(std::string_view text);
// Exactly one block.
Expected<Region> parse_region(std::string_view text);
Expected<std::vector<Region>> load_region_file(const std::filesystem::path& path);

// The canonical form: every field explicit, one line, numbers in shortest round-trip form.
std::string print_region(const Region& region);

} // namespace fusor
