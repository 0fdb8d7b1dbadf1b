// fusor-results: renders docs/targets.md from the committed bench results, or checks that
// the committed page still matches them (CI's DashboardMatchesResults test).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "dashboard.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Summarise bench/results/cpu-*.json against issue 8's performance targets as Markdown "
               "(the page docs/targets.md is generated from)."};
  std::string results = "bench/results", out, check;
  app.add_option("--results", results, "directory of the results files")->capture_default_str();
  app.add_option("--out", out, "write the page to this file (default: standard output)");
  app.add_option("--check", check, "compare this file with the page the results give; exit 1 when they differ");
  CLI11_PARSE(app, argc, argv);

  const auto rows = fusor::results::read_results(results);
  if (!rows.ok()) {
    std::fprintf(stderr, "fusor-results: %s\n", rows.error().str().c_str());
    return 2;
  }
  const std::string page = fusor::results::render(*rows);
  if (!check.empty()) {
    std::ifstream in(check);
    if (!in) {
      std::fprintf(stderr, "fusor-results: cannot read %s\n", check.c_str());
      return 2;
    }
    std::ostringstream have;
    have << in.rdbuf();
    if (have.str() != page) {
      std::fprintf(stderr, "fusor-results: %s does not match the results in %s; regenerate it with `make dashboard`\n",
                   check.c_str(), results.c_str());
      return 1;
    }
    std::printf("%s matches %zu result blocks in %s\n", check.c_str(), rows->size(), results.c_str());
    return 0;
  }
  if (out.empty()) {
    std::cout << page;
    return 0;
  }
  std::ofstream file(out);
  file << page;
  if (!file.flush()) {
    std::fprintf(stderr, "fusor-results: cannot write %s\n", out.c_str());
    return 2;
  }
  std::printf("wrote %s (%zu result blocks)\n", out.c_str(), rows->size());
  return 0;
}
