// `fusor ref FILE --in ... --out OUT`: the reference evaluator on the user's arrays.
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "fusor/npy.hpp"
#include "fusor/reference.hpp"

namespace fusor::cli {
namespace {

struct RefOptions {
  std::string file;
  std::vector<std::string> inputs;
  std::string out;
  int region = 0; // 0: not given
};

int run_ref(const RefOptions& o) {
  auto region = load_region(o.file, o.region);
  if (!region) return fail(o.file, region.error());
  auto operands = load_operands(o.inputs);
  if (!operands) return fail("fusor ref", operands.error());
  auto result = evaluate_reference(*region, *operands);
  if (!result) return fail("fusor ref", result.error(), &*region);
  const Status written = write_npy(o.out, *result);
  if (!written) return fail("fusor ref", written.error());
  std::cout << "wrote " << o.out << " shape=" << compact_shape(result->shape) << " dtype=f32\n";
  return kExitOk;
}

} // namespace

Command add_ref_command(CLI::App& app) {
  auto o = std::make_shared<RefOptions>();
  CLI::App* sub = app.add_subcommand("ref", "Evaluate a region with the reference evaluator (double precision) "
                                            "on .npy inputs");
  sub->add_option("FILE", o->file, "Region text file ('-' reads standard input)")->required();
  sub->add_option("--in", o->inputs, "Operand .npy files, in the region's operand order (below)")
      ->required()
      ->expected(1, -1);
  sub->add_option("--out", o->out, "Where to write the output (.npy, f32)")->required();
  sub->add_option("--region", o->region, "Which block of FILE to evaluate (1 = first); needed when FILE has several")
      ->check(CLI::PositiveNumber);
  sub->footer(operand_order_help());
  return {sub, [o] { return run_ref(*o); }};
}

} // namespace fusor::cli
