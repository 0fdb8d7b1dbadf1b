// `fusor bench SUITE [--filter TEXT] [--json] [--save FILE] [--lane LANE] [--shape SHAPE ...] [--knob K=V ...]`:
// runs fusor-bench, the CPU benchmark of the x86 lanes against oneDNN and OpenBLAS
// (bench/fusor_bench.cpp). It is a separate program so the CLI never links the peers' libraries.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"

namespace fusor::cli {
namespace {

struct BenchOptions {
  std::string suite;
  std::string filter;
  bool json = false;
  std::string save;
  double min_ms = 0;
  std::string lane;
  std::vector<std::string> shapes;
  std::vector<std::string> knobs;
};

// fusor-bench next to this executable (the build tree and an install both keep them
// together), else whatever PATH finds.
std::string bench_program() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "fusor-bench";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "fusor-bench";
}

int run_bench(const BenchOptions& o) {
  if (o.suite.empty() && o.shapes.empty()) {
    std::cerr << "fusor bench: name a SUITE (gemm | gated | attention | norm | pointwise | small | all) or --shape\n";
    return kExitUserError;
  }
  std::vector<std::string> args{bench_program()};
  if (!o.suite.empty()) args.push_back(o.suite);
  for (const auto& shape : o.shapes) args.insert(args.end(), {"--shape", shape});
  if (!o.filter.empty()) args.insert(args.end(), {"--filter", o.filter});
  if (o.json) args.push_back("--json");
  if (!o.save.empty()) args.insert(args.end(), {"--save", o.save});
  if (o.min_ms > 0) args.insert(args.end(), {"--min-ms", std::to_string(o.min_ms)});
  if (!o.lane.empty()) args.insert(args.end(), {"--lane", o.lane});
  for (const auto& knob : o.knobs) args.insert(args.end(), {"--knob", knob});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  ::execvp(argv[0], argv.data());
  std::cerr << "fusor bench: cannot run " << args[0] << ": " << std::strerror(errno)
            << " (build the fusor-bench target; it needs oneDNN/OpenBLAS only for their columns)\n";
  return kExitUserError;
}

} // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub =
      app.add_subcommand("bench", "Benchmark fusor's x86 lanes against oneDNN and OpenBLAS: per case "
                                  "fusor's time and lane, each peer's, the ratio, GFLOP/s or GB/s, the oracle's error");
  sub->add_option("SUITE", o->suite,
                  "gemm | gated | attention | norm | pointwise | small | all (with --shape: the shapes' suite, "
                  "all or none)")
      ->check(CLI::IsMember({"gemm", "gated", "attention", "norm", "pointwise", "small", "all"}));
  sub->add_option("--filter", o->filter, "Only cases whose name contains TEXT");
  sub->add_flag("--json", o->json, "One JSON object per line per case");
  sub->add_option("--save", o->save, "Also write the machine description and every case to FILE (JSON)");
  sub->add_option("--min-ms", o->min_ms, "Time spent timing each case (default 1500)");
  sub->add_option("--lane", o->lane,
                  "Run every case whose kind this lane computes on it alone (x86_amx: GEMM-rooted and attention; "
                  "the others keep the base lane). Default: GEMM-rooted and attention cases on x86_amx and "
                  "x86_avx512 where the host has AMX, fusor's time the faster one's, else x86_avx512, every other "
                  "case on x86_avx512; without AVX-512, every case on x86_avx2 and the portable x86_c lane, the "
                  "faster one's")
      ->check(CLI::IsMember({"x86_amx", "x86_avx512", "x86_avx2"}));
  sub->add_option("--shape", o->shapes,
                  "MxNxK: f32 GEMM + bias + GELU at this shape; BxHxMxNkxD[:causal]: attention of B x H heads of "
                  "M queries against Nk keys of D features (causal: top-left); RxC (SUITE norm, pointwise or all): "
                  "those suites' cases of R rows of C; against the same peers, in place of the suite's listed cases "
                  "(repeatable)");
  sub->add_option("--knob", o->knobs,
                  "KEY=VALUE: a lane option for A/B runs (mr, kc, nb, byhead, ...; a lane refuses a KEY it does not "
                  "take and names those it does), given to the kernels timed for fusor, recorded in each case and "
                  "the saved machine (repeatable; fusor-bench checks the spelling)");
  return {sub, [o] { return run_bench(*o); }};
}

} // namespace fusor::cli
