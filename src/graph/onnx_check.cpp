// ONNX node-test runner behind `fusor check-onnx`.
#include "fusor/onnx_check.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "fusor/discovery.hpp"
#include "fusor/model_exec.hpp"
#include "fusor/onnx_import.hpp"

namespace fusor {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> sorted_entries(const fs::path& dir, bool dirs, const std::string& prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && (dirs ? e.is_directory() : e.is_regular_file())) out.push_back(e.path());
  }
  // input_10.pb after input_9.pb: order by the number after the prefix when there is one.
  std::sort(out.begin(), out.end(), [&](const fs::path& a, const fs::path& b) {
    const std::string sa = a.stem().string().substr(prefix.size()), sb = b.stem().string().substr(prefix.size());
    if (sa.size() != sb.size()) return sa.size() < sb.size();
    return sa < sb;
  });
  return out;
}

enum class Outcome { pass, fail, skip };

struct TestResult {
  Outcome outcome = Outcome::pass;
  std::string why;
};

TestResult failed(const std::string& why) { return {Outcome::fail, why}; }

TestResult from_error(const Error& e) {
  if (e.code == ErrorCode::onnx_unsupported_dtype) {
    // "skipped: int8 (graph input 'x')": the dtype first, where it was met after.
    const std::string& m = e.message;
    const auto at = m.find("' is ");
    const auto end = at == std::string::npos ? at : m.find(';', at);
    if (end == std::string::npos) return {Outcome::skip, "skipped: " + m};
    const auto start = m.rfind(": ", at);
    const std::string where =
        m.substr(start == std::string::npos ? 0 : start + 2, at + 1 - (start == std::string::npos ? 0 : start + 2));
    return {Outcome::skip, "skipped: " + m.substr(at + 5, end - at - 5) + " (" + where + ")"};
  }
  return failed(e.str());
}

// " (reference evaluator: Cos, Elu)" for the graph's reference nodes, each type once.
std::string reference_note(const Graph& g) {
  std::vector<std::string> types;
  for (const auto& n : g.nodes)
    if (is_reference_op(n.op)) {
      const std::string t = n.op.substr(kReferenceOpPrefix.size());
      if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    }
  std::string note;
  for (const auto& t : types) note += (note.empty() ? " (reference evaluator: " : ", ") + t;
  return note.empty() ? note : note + ")";
}

TestResult run_graph_test(const fs::path& dir, const Graph& graph, const OnnxCheckOptions& o) {
  Discovery discovery;
  if (o.fuse) {
    auto types = infer_value_types(graph);
    if (types) discovery = discover_regions(graph, *types);
  }
  const auto sets = sorted_entries(dir, true, "test_data_set_");
  if (sets.empty()) return failed("no test_data_set_* directory");
  for (const auto& set : sets) {
    ValueMap inputs;
    const auto in_files = sorted_entries(set, false, "input_");
    if (in_files.size() != graph.inputs.size())
      return failed(set.filename().string() + " has " + std::to_string(in_files.size()) + " inputs, the model takes " +
                    std::to_string(graph.inputs.size()));
    for (size_t k = 0; k < in_files.size(); ++k) {
      auto t = read_onnx_tensor_file(in_files[k]);
      if (!t) return from_error(t.error());
      inputs[graph.inputs[k].name] = std::move(t->tensor);
    }
    auto run = execute_graph(graph, discovery, inputs);
    if (!run) return failed(run.error().str());
    const auto out_files = sorted_entries(set, false, "output_");
    if (out_files.size() != graph.outputs.size())
      return failed(set.filename().string() + " has " + std::to_string(out_files.size()) + " outputs, the model " +
                    std::to_string(graph.outputs.size()));
    for (size_t k = 0; k < out_files.size(); ++k) {
      auto want = read_onnx_tensor_file(out_files[k]);
      if (!want) return from_error(want.error());
      const std::string& name = graph.outputs[k];
      std::string why;
      if (!outputs_match(run->values.at(name), want->tensor, o.rtol, o.atol, &why))
        return failed(set.filename().string() + " output '" + name + "': " + why);
    }
  }
  return {};
}

// `note` names the reference-evaluated ops of the model, when it has any.
TestResult run_test(const fs::path& dir, const OnnxCheckOptions& o, std::string& note) {
  auto graph = import_onnx_file(dir / "model.onnx", {.allow_reference = o.allow_reference});
  if (!graph) return from_error(graph.error());
  note = reference_note(*graph);
  return run_graph_test(dir, *graph, o);
}

std::string fmt_num(double v) {
  std::ostringstream os;
  os.precision(7);
  os << v;
  return os.str();
}

} // namespace

bool outputs_match(const GraphTensor& got, const GraphTensor& want, double rtol, double atol, std::string* why) {
  if (got.shape != want.shape) {
    if (why) *why = "shape " + shape_str(got.shape) + ", expected " + shape_str(want.shape);
    return false;
  }
  const std::int64_t n = want.numel();
  for (std::int64_t k = 0; k < n; ++k) {
    const double g = got.at(k), w = want.at(k);
    bool ok;
    if (std::isnan(w) || std::isnan(g))
      ok = std::isnan(w) && std::isnan(g);
    else if (std::isinf(w) || std::isinf(g))
      ok = g == w;
    else
      ok = std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok) {
      if (why) *why = "element " + std::to_string(k) + " is " + fmt_num(g) + ", expected " + fmt_num(w);
      return false;
    }
  }
  return true;
}

Expected<OnnxCheckSummary> check_onnx(std::span<const fs::path> paths, const OnnxCheckOptions& options,
                                      std::ostream& out) {
  if (!onnx_import_available())
    return make_error(ErrorCode::onnx_unavailable,
                      "this fusor was built without libonnx; check-onnx cannot read models");
  std::vector<fs::path> tests;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_regular_file(p / "model.onnx", ec)) {
      tests.push_back(p);
      continue;
    }
    if (!fs::is_directory(p, ec))
      return make_error(ErrorCode::io_error, p.string() + " is not a node-test directory or a directory of them");
    auto subs = sorted_entries(p, true, "");
    std::sort(subs.begin(), subs.end());
    for (const auto& s : subs)
      if (fs::is_regular_file(s / "model.onnx", ec)) tests.push_back(s);
  }
  OnnxCheckSummary sum;
  for (const auto& t : tests) {
    std::string note;
    const TestResult r = run_test(t, options, note);
    const std::string name = t.filename().string();
    switch (r.outcome) {
    case Outcome::pass:
      ++sum.passed;
      if (options.verbose) out << "PASS " << name << note << "\n";
      break;
    case Outcome::fail:
      ++sum.failed;
      out << "FAIL " << name << note << ": " << r.why << "\n";
      break;
    case Outcome::skip:
      ++sum.skipped;
      out << "SKIP " << name << ": " << r.why << "\n";
      break;
    }
  }
  out << sum.passed << " passed, " << sum.failed << " failed, " << sum.skipped << " skipped\n";
  return sum;
}

} // namespace fusor
