// `fusor emit FILE --target T [--lane L] [--spec static|bucket|dynamic] [--dims ...]`:
// print the kernel source a lane would compile.
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "cli_lanes.hpp"
#include "commands.hpp"

namespace fusor::cli {
namespace {

struct EmitCliOptions {
  std::string file;
  int region = 0;
  std::string target = "x86";
  std::string lane;
  std::string spec = "dynamic";
  std::string dims;
  std::vector<std::string> options;
};

int run_emit(const EmitCliOptions& o) {
  auto region = load_region(o.file, o.region);
  if (!region) return fail(o.file, region.error());
  auto target = find_target(o.target);
  if (!target) return fail("fusor emit", target.error());
  EmitOptions emit;
  emit.spec = *spec_policy_from_name(o.spec);
  if (!o.dims.empty()) {
    auto dims = parse_dims(*region, o.dims);
    if (!dims) return fail("fusor emit", dims.error());
    emit.dims = *dims;
  }
  for (const auto& kv : o.options) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      return fail("fusor emit", make_error(ErrorCode::bad_argument, "--option '" + kv + "': expected KEY=VALUE"));
    emit.options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  Expected<KernelSource> src = make_error(ErrorCode::internal, "no emitter");
  if (o.lane.empty()) {
    src = (*target)->emit(*region, emit);
  } else {
    auto lane = find_lane(*region, o.target, o.lane);
    if (!lane) return fail("fusor emit", lane.error());
    src = (*lane)->emit ? (*lane)->emit(*region, emit) : (*target)->emit(*region, emit);
  }
  if (!src) return fail("fusor emit", src.error());
  std::cout << src->source;
  return kExitOk;
}

} // namespace

Command add_emit_command(CLI::App& app) {
  auto o = std::make_shared<EmitCliOptions>();
  CLI::App* sub = app.add_subcommand("emit", "Print the kernel source a lane emits for a region");
  sub->add_option("FILE", o->file, "Region text file ('-' reads standard input)")->required();
  sub->add_option("--region", o->region, "Which block of FILE (1 = first)")->check(CLI::PositiveNumber);
  sub->add_option("--target", o->target, "Target whose emitter to use (x86, cuda)")->capture_default_str();
  sub->add_option("--lane", o->lane, "A specific lane (candidate) of the target, e.g. x86_avx512");
  sub->add_option("--spec", o->spec,
                  "static (dims baked in; needs --dims), bucket (dims rounded up to powers of two; needs --dims) or "
                  "dynamic (dims at run time)")
      ->check(CLI::IsMember({"static", "bucket", "dynamic"}))
      ->capture_default_str();
  sub->add_option("--dims", o->dims,
                  "Problem dims: M,N,K (fused, matmul, gated); M,Nk,D or batch,heads,kv_heads,M,Nk,D,Dv "
                  "(attention); the input shape (pointwise kinds, norm_chain)");
  sub->add_option("--option", o->options, "Lane-specific KEY=VALUE (an emitter rejects keys it does not know)");
  sub->footer("The source opens with a comment naming the region, the lane and the spec (shape key).");
  return {sub, [o] { return run_emit(*o); }};
}

} // namespace fusor::cli
