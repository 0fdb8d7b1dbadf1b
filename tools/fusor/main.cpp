// fusor: the command-line front end. Each subcommand lives in its own cmd_*.cpp; adding
// one is one line in `commands` below.
#include <iostream>
#include <string>

#include "cli_common.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  using namespace fusor::cli;
  CLI::App app{"fusor: a fused-kernel synthesizer. Regions (fused GEMM epilogues, attention, gated matmuls,\n"
               "pointwise DAGs, norm chains) are written in a small text form; see examples/.",
               "fusor"};
  app.set_version_flag("--version", std::string("fusor ") + FUSOR_VERSION);
  app.require_subcommand(1);
  app.footer("Exit status: 0 success; 2 usage, parse, validation, operand or I/O error;\n"
             "1 is reserved for a kernel the verifier rejected. `fusor COMMAND --help` describes each command.");

  const Command commands[] = {
      add_parse_command(app),   add_ref_command(app),        add_run_command(app),  add_cache_command(app),
      add_regions_command(app), add_check_onnx_command(app), add_emit_command(app), add_verify_command(app),
      add_explain_command(app), add_bench_command(app),
  };

  // An unknown command gets its own message; CLI11 would call it an unexpected argument.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto& c : commands) {
      names += (names.empty() ? "" : ", ") + c.app->get_name();
      known = known || c.app->get_name() == argv[1];
    }
    if (!known) {
      std::cerr << "fusor: unknown command '" << argv[1] << "' (commands: " << names << "; see fusor --help)\n";
      return kExitUserError;
    }
  }
  if (argc > 1 && argv[1][0] == '-' && app.get_option_no_throw(argv[1]) == nullptr) {
    std::cerr << "fusor: unknown option '" << argv[1] << "' (see fusor --help)\n";
    return kExitUserError;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other command-line error is a usage error (2).
    return app.exit(e) == 0 ? kExitOk : kExitUserError;
  }
  for (const auto& c : commands)
    if (c.app->parsed()) return c.run();
  return kExitUserError; // unreachable: require_subcommand(1)
}
