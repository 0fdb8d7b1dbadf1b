// The fusor subcommands. Each add_*_command declares its subcommand (options, help) on
// `app` and returns the action main runs when that subcommand was chosen; registering a
// new command is one line in main.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace fusor::cli {

struct Command {
  CLI::App* app;            // the subcommand
  std::function<int()> run; // its action; returns the process exit code
};

Command add_parse_command(CLI::App& app);      // cmd_parse.cpp
Command add_ref_command(CLI::App& app);        // cmd_ref.cpp
Command add_run_command(CLI::App& app);        // cmd_run.cpp
Command add_cache_command(CLI::App& app);      // cmd_cache.cpp
Command add_regions_command(CLI::App& app);    // cmd_regions.cpp
Command add_check_onnx_command(CLI::App& app); // cmd_check_onnx.cpp
Command add_emit_command(CLI::App& app);       // cmd_emit.cpp
Command add_verify_command(CLI::App& app);     // cmd_verify.cpp
Command add_explain_command(CLI::App& app);    // cmd_explain.cpp
Command add_bench_command(CLI::App& app);      // cmd_bench.cpp

} // namespace fusor::cli
