// `fusor parse FILE`: validate region text and print each block's canonical form.
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "fusor/region_text.hpp"

namespace fusor::cli {

Command add_parse_command(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("parse", "Check a region file and print the canonical form of each region");
  sub->add_option("FILE", *file, "Region text file ('-' reads standard input)")->required();
  sub->footer("Prints one line per region block: every field explicit, numbers in shortest round-trip form.\n"
              "A syntax error prints E_PARSE at LINE:COL; a region that fails validation prints its code\n"
              "(e.g. E_FUSED_EPILOGUE_BAD_ORDER); both exit with status 2.");
  return {sub, [file] {
            auto regions = load_regions(*file);
            if (!regions) return fail(*file, regions.error());
            for (const Region& region : *regions) std::cout << print_region(region) << "\n";
            return kExitOk;
          }};
}

} // namespace fusor::cli
