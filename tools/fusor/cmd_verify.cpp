// `fusor verify FILE --target x86 [--lane L] [--kernel my.c]`: run the oracle on a lane's
// kernel — or on a hand-written one implementing docs/abi.md — and print its report.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli_common.hpp"
#include "cli_lanes.hpp"
#include "codegen/abi.hpp"
#include "commands.hpp"
#include "fusor/oracle.hpp"
#include "fusor/region_text.hpp"

namespace fusor::cli {
namespace {

struct VerifyCliOptions {
  std::string file;
  int region = 0;
  std::string target = "x86";
  std::string lane;
  std::string kernel;
  double atol = 1e-3;
  bool json = false;
};

Expected<KernelSource> user_kernel(const Region& region, const std::string& path, const std::string& target) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::io_error, "cannot read kernel source " + path);
  std::stringstream text;
  text << in.rdbuf();
  KernelSource src;
  src.source = text.str();
  src.entry = "fusor_kernel";
  src.lang = "c";
  src.spec = SpecPolicy::dynamic;
  src.shape_key = codegen::shape_key(region_kind(region), SpecPolicy::dynamic, std::nullopt);
  src.dtype = region_storage(region);
  src.target = target;
  src.lane = target + "_user";
  src.region_text = print_region(region);
  return src;
}

int run_verify(const VerifyCliOptions& o) {
  auto region = load_region(o.file, o.region);
  if (!region) return fail(o.file, region.error());
  auto target = find_target(o.target);
  if (!target) return fail("fusor verify", target.error());
  if (Status ok = (*target)->available(); !ok) return fail("fusor verify", ok.error());
  Expected<KernelSource> src = make_error(ErrorCode::internal, "no kernel");
  if (!o.kernel.empty()) {
    src = user_kernel(*region, o.kernel, o.target);
  } else if (!o.lane.empty()) {
    auto lane = find_lane(*region, o.target, o.lane);
    if (!lane) return fail("fusor verify", lane.error());
    src = emit_candidate(**target, *lane, *region);
  } else {
    src = (*target)->emit(*region, {});
  }
  if (!src) return fail("fusor verify", src.error());
  auto artifact = (*target)->compile(*src);
  if (!artifact) return fail("fusor verify", artifact.error());
  auto report = verify(*region, **target, *artifact, {.caller_atol = o.atol});
  if (!report) return fail("fusor verify", report.error());
  if (o.kernel.empty()) (void)store_certificate(*artifact, *report);
  std::cout << "region: " << print_region(*region) << "\n";
  if (o.json)
    std::cout << report->to_json().dump(2) << "\n";
  else
    std::cout << report->summary();
  return report->verified ? kExitOk : kExitRejected;
}

} // namespace

Command add_verify_command(CLI::App& app) {
  auto o = std::make_shared<VerifyCliOptions>();
  CLI::App* sub = app.add_subcommand("verify", "Prove a kernel against the reference on every probe family");
  sub->add_option("FILE", o->file, "Region text file ('-' reads standard input)")->required();
  sub->add_option("--region", o->region, "Which block of FILE (1 = first)")->check(CLI::PositiveNumber);
  sub->add_option("--target", o->target, "Target (x86, cuda)")->capture_default_str();
  sub->add_option("--lane", o->lane, "A specific lane (candidate) of the target");
  sub->add_option("--kernel", o->kernel,
                  "Your own C kernel implementing the lane ABI (docs/abi.md) instead of the emitted one");
  sub->add_option("--atol", o->atol, "Caller absolute tolerance (the lane budget applies if larger)")
      ->capture_default_str();
  sub->add_flag("--json", o->json, "Print the report (the certificate) as JSON");
  sub->footer("Exit status: 0 verified, 1 rejected (the report names the failing probe), 2 usage or input error.");
  return {sub, [o] { return run_verify(*o); }};
}

} // namespace fusor::cli
