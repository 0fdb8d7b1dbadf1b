// `fusor check-onnx DIR...`: run ONNX node-test directories and compare with their outputs.
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "fusor/onnx_check.hpp"
#include "fusor/onnx_import.hpp"

namespace fusor::cli {
namespace {

// The ops --allow-reference runs, wrapped like the rest of the footer.
std::string reference_ops_help() {
  std::string text = "--allow-reference runs these ONNX ops on the reference evaluator:\n ", line;
  for (const auto& t : reference_onnx_op_types()) {
    if (line.size() + t.size() > 92) {
      text += line + "\n ";
      line.clear();
    }
    line += " " + t + ",";
  }
  if (!line.empty()) line.back() = '.';
  return text + line;
}

} // namespace

Command add_check_onnx_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> dirs;
    OnnxCheckOptions check;
    bool native = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub =
      app.add_subcommand("check-onnx", "Run ONNX node-test directories and compare with their expected outputs");
  sub->add_option("DIR", o->dirs, "A node-test directory, or a directory of them")->required();
  sub->add_option("--rtol", o->check.rtol, "Relative tolerance (default 1e-3)");
  sub->add_option("--atol", o->check.atol, "Absolute tolerance (default 1e-5)");
  sub->add_flag("--native", o->native, "Run every op natively (no region discovery, no compiled kernels)");
  sub->add_flag("-v,--verbose", o->check.verbose, "Also print a line for each passing test");
  sub->add_flag("--allow-reference", o->check.allow_reference,
                "Run tests whose model uses ops outside fusor's set that the reference evaluator has (Cos, "
                "Elu, Clip, ReduceL2, LogSoftmax...) instead of failing their import; their lines name those ops");
  sub->footer("NaN matches NaN and infinities must match in sign. A test is skipped only when it uses a dtype\n"
              "fusor does not compute in (float16, float64, int8...), and the skip names it. Exit status 1\n"
              "when any test fails.\n" +
              reference_ops_help());
  return {sub, [o] {
            std::vector<std::filesystem::path> paths(o->dirs.begin(), o->dirs.end());
            o->check.fuse = !o->native;
            auto sum = check_onnx(paths, o->check, std::cout);
            if (!sum) return fail("fusor check-onnx", sum.error());
            return sum->failed == 0 ? kExitOk : kExitRejected;
          }};
}

} // namespace fusor::cli
