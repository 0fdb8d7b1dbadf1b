// `fusor run MODEL` as a library call: load → discover → verify and run regions → report.
#include "fusor/model_run.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <numeric>
#include <unistd.h>

#include "fusor/discovery.hpp"
#include "fusor/model_exec.hpp"
#include "fusor/npy.hpp"
#include "fusor/onnx_import.hpp"
#include "fusor/oracle.hpp"
#include "fusor/toolchain.hpp"

namespace fusor {
namespace {

namespace fs = std::filesystem;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double max_abs_diff(const GraphTensor& a, const GraphTensor& b) {
  if (a.shape != b.shape) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (std::int64_t k = 0; k < a.numel(); ++k) {
    const double x = a.at(k), y = b.at(k);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (x == y) continue; // equal infinities too
    m = std::max(m, std::fabs(x - y));
  }
  return m;
}

Expected<ValueMap> make_inputs(const Graph& g, const ModelRunOptions& o) {
  ValueMap inputs;
  if (!o.inputs.empty() && o.inputs.size() != g.inputs.size())
    return make_error(ErrorCode::bad_argument, "the model takes " + std::to_string(g.inputs.size()) +
                                                   " input(s), got " + std::to_string(o.inputs.size()) + " --in files");
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const GraphInput& in = g.inputs[k];
    if (!o.inputs.empty()) {
      FUSOR_TRY_ASSIGN(Tensor t, read_npy(o.inputs[k]));
      GraphTensor v = GraphTensor::f32(t.shape, std::move(t.data));
      if (in.type != ElemType::f32) { // integer and bool inputs arrive as npy numbers
        GraphTensor c = GraphTensor::zeros(in.type, v.shape);
        for (size_t i = 0; i < c.i.size(); ++i) c.i[i] = static_cast<std::int64_t>(v.f[i]);
        v = std::move(c);
      }
      inputs[in.name] = std::move(v);
      continue;
    }
    Shape s = in.shape;
    for (auto& d : s) d = d < 0 ? 1 : d; // a free dimension runs at size 1
    GraphTensor v = GraphTensor::zeros(in.type, s);
    if (in.type == ElemType::f32) v.f = normal_values(shape_numel(s), o.seed + k, 1.0);
    if (in.type == ElemType::boolean) std::fill(v.i.begin(), v.i.end(), 1);
    inputs[in.name] = std::move(v);
  }
  return inputs;
}

struct Verdict {
  std::string text;
  bool rejected = false;
};

// The oracle's numbers for the kernel the region's target compiles (certificates make
// this cheap after the first run).
Verdict verdict_for(const Region& region, const RegionRun& run) {
  if (run.tag == "reference") return {"declined -> reference (" + run.note + ")"};
  // The lane the arbiter chose: candidates are named after the lane tag they run under.
  const Candidate* lane = nullptr;
  const Target* target = nullptr;
  for (const Candidate* c : builtin_registry().candidates("", region_kind(region)))
    if (c->name == run.tag) lane = c;
  if (lane) target = builtin_registry().target(lane->target);
  if (!target) target = dispatch_target();
  if (!target) return {"no target"};
  auto src = emit_candidate(*target, lane, region);
  if (!src) return {"emit: " + src.error().str()};
  auto art = target->compile(*src);
  if (!art) return {"compile: " + art.error().str()};
  auto report = ensure_verified(*target, region, *art);
  if (!report) return {"oracle: " + report.error().str()};
  return {fmt::format("oracle max_err {:.2e} <= budget {:.1e}{}", report->max_abs_err, report->atol,
                      report->verified ? "" : " REJECTED"),
          !report->verified};
}

struct OrtResult {
  std::string line;
  std::vector<GraphTensor> outputs;
  double ms = 0;
};

constexpr const char* kOrtScript = R"PY(import sys, time
import numpy as np, onnxruntime as ort
model, d, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
so = ort.SessionOptions()
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feeds = {}
for k, i in enumerate(s.get_inputs()):
    a = np.load(f"{d}/in{k}.npy")
    feeds[i.name] = a.astype(bool) if i.type == "tensor(bool)" else a
outs = s.run(None, feeds)
ts = []
for _ in range(reps):
    t = time.perf_counter(); s.run(None, feeds); ts.append((time.perf_counter() - t) * 1e3)
for k, o in enumerate(outs):
    np.save(f"{d}/out{k}.npy", np.asarray(o).astype(np.float32))
print(ort.__version__, sorted(ts)[len(ts) // 2])
)PY";

OrtResult run_onnxruntime(const Graph& g, const ValueMap& inputs, const std::string& model_path,
                          std::span<const unsigned char> model_bytes, int repeats) {
  auto probe = run_process({"python3", "-c", "import onnxruntime"}, std::chrono::seconds(60));
  if (!probe || !probe->succeeded())
    return {"onnxruntime: not installed (pip install onnxruntime numpy to compare)", {}, 0};
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec) / ("fusor-ort-" + std::to_string(::getpid()));
  fs::create_directories(dir, ec);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(d, e);
    }
  } cleanup{dir};
  std::string model = model_path;
  if (model.empty()) {
    model = (dir / "model.onnx").string();
    std::ofstream(model, std::ios::binary)
        .write(reinterpret_cast<const char*>(model_bytes.data()), static_cast<std::streamsize>(model_bytes.size()));
  }
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const GraphTensor& t = inputs.at(g.inputs[k].name);
    const Status s = t.type == ElemType::f32
                         ? write_npy(dir / ("in" + std::to_string(k) + ".npy"), t.to_tensor())
                         : write_npy(dir / ("in" + std::to_string(k) + ".npy"), t.to_tensor(), NpyDType::i64);
    if (!s) return {"onnxruntime: " + s.error().str(), {}, 0};
  }
  auto r = run_process({"python3", "-c", kOrtScript, model, dir.string(), std::to_string(repeats)},
                       std::chrono::seconds(300));
  if (!r) return {"onnxruntime: " + r.error().str(), {}, 0};
  if (!r->succeeded()) {
    std::string err = r->err.size() > 400 ? r->err.substr(r->err.size() - 400) : r->err;
    return {"onnxruntime: failed: " + err, {}, 0};
  }
  OrtResult res;
  std::string version;
  double ms = 0;
  {
    std::istringstream is(r->out);
    is >> version >> ms;
  }
  res.ms = ms;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    auto t = read_npy(dir / ("out" + std::to_string(k) + ".npy"));
    if (!t) return {"onnxruntime: " + t.error().str(), {}, 0};
    res.outputs.push_back(GraphTensor::f32(t->shape, std::move(t->data)));
  }
  res.line = "onnxruntime " + version;
  return res;
}

} // namespace

Expected<Graph> load_model(const fs::path& path, const OnnxImportOptions& onnx) {
  if (path.extension() == ".onnx") return import_onnx_file(path, onnx);
  FUSOR_TRY_ASSIGN(Graph g, load_graph_file(path));
  FUSOR_TRY(fold_graph(g));
  return g;
}

int run_model(const ModelRunOptions& o, std::ostream& out, std::ostream& err) {
  const bool embedded = o.model.empty();
  const std::string name = embedded ? std::string(kDefaultModelName) + " (embedded default)" : o.model;
  auto fail = [&](const Error& e) {
    err << "fusor run: " << (embedded ? std::string(kDefaultModelName) : o.model) << ": " << e.str() << "\n";
    return 2;
  };
  const OnnxImportOptions onnx{.allow_reference = o.allow_reference};
  auto loaded = embedded ? import_onnx_bytes(default_model_bytes(), std::string(kDefaultModelName), onnx)
                         : load_model(o.model, onnx);
  if (!loaded) return fail(loaded.error());
  Graph g = std::move(*loaded);
  auto inputs = make_inputs(g, o);
  if (!inputs) return fail(inputs.error());
  // Concrete input shapes: shape computations fold and every value gets a shape.
  for (auto& in : g.inputs) in.shape = inputs->at(in.name).shape;
  if (Status s = fold_graph(g); !s) return fail(s.error());
  auto types = infer_value_types(g);
  if (!types) return fail(types.error());
  const Discovery d = discover_regions(g, *types);
  const std::vector<std::string> targets = dispatch_target_names();
  std::string target_list;
  for (const auto& t : targets) target_list += (target_list.empty() ? "" : ", ") + t;

  out << "model: " << name << ": " << g.inputs.size() << " input(s), " << g.outputs.size() << " output(s), "
      << g.nodes.size() << " ops after import\n";
  // The arbiter picks each region's lane among every available target; naming only one
  // read as if every region ran there.
  out << (targets.size() > 1 ? "targets: " : "target: ")
      << (targets.empty() ? std::string("none (reference evaluator)") : target_list)
      << (targets.size() > 1 ? " (the arbiter picks each region's lane)" : "") << "; " << d.regions.size()
      << " region(s), " << d.unfused.size() << " op(s) left to native kernels\n";
  std::vector<std::string> reference_ops;
  for (const auto& node : g.nodes)
    if (is_reference_op(node.op)) reference_ops.push_back(node.label());
  if (!reference_ops.empty()) {
    out << "reference evaluator (--allow-reference): " << reference_ops.size()
        << " op(s) outside fusor's set, evaluated in double, never fused:";
    for (size_t k = 0; k < reference_ops.size(); ++k) out << (k ? ", " : " ") << reference_ops[k];
    out << "\n";
  }

  // Warm-up: compiles (or loads from the cache) and verifies every region's kernel.
  auto warm = execute_graph(g, d, *inputs);
  if (!warm) return fail(warm.error());
  const Discovery none;
  std::vector<double> fused_total, unfused_total, fused_kernels, fused_native;
  std::vector<std::vector<double>> region_fused(d.regions.size()), region_unfused(d.regions.size());
  std::optional<GraphRun> fused_run, unfused_run;
  const int reps = std::max(1, o.repeats);
  RegionOperands kept; // a deployment keeps its weights converted; so do the timed runs
  // Each path's runs back to back, as ONNX Runtime's are timed: interleaved with the slow
  // native path, the fused path's kernels measured 0.21 ms instead of 0.12 (the thread pool
  // and the caches were cold at every start).
  for (int r = 0; r < reps; ++r) {
    auto f = execute_graph(g, d, *inputs, &kept);
    if (!f) return fail(f.error());
    fused_total.push_back(f->total_ms);
    double kernels = 0;
    for (const auto& rr : f->regions) {
      region_fused[rr.region].push_back(rr.time_ms);
      kernels += rr.time_ms;
    }
    fused_kernels.push_back(kernels);
    fused_native.push_back(std::accumulate(f->node_ms.begin(), f->node_ms.end(), 0.0));
    fused_run = std::move(*f);
  }
  for (int r = 0; r < reps; ++r) {
    auto u = execute_graph(g, none, *inputs);
    if (!u) return fail(u.error());
    unfused_total.push_back(u->total_ms);
    for (size_t k = 0; k < d.regions.size(); ++k) {
      double sum = 0;
      for (auto n : d.regions[k].nodes) sum += u->node_ms[n];
      region_unfused[k].push_back(sum);
    }
    unfused_run = std::move(*u);
  }

  bool rejected = false;
  out << "regions:\n";
  for (size_t k = 0; k < d.regions.size(); ++k) {
    const auto& r = d.regions[k];
    const RegionRun* rr = nullptr;
    for (const auto& x : fused_run->regions)
      if (x.region == k) rr = &x;
    const Verdict v = rr ? verdict_for(r.region, *rr) : Verdict{"not run"};
    rejected = rejected || v.rejected;
    const double fused = median(region_fused[k]), unfused = median(region_unfused[k]);
    out << fmt::format("  #{} {:<16} {}\n", k + 1, region_kind_name(region_kind(r.region)), r.ops);
    out << fmt::format("     lane {}{}; {}; fused {:.3f} ms vs unfused {:.3f} ms: {:.2f}x\n", rr ? rr->tag : "?",
                       rr && rr->verified ? " (verified)" : "", v.text, fused, unfused,
                       fused > 0 ? unfused / fused : 0.0);
  }
  if (!d.unfused.empty()) {
    out << "native ops:\n";
    for (const auto& u : d.unfused) out << "  " << g.nodes[u.node].label() << ": " << u.reason << "\n";
  }
  const double ft = median(fused_total), ut = median(unfused_total);
  out << fmt::format("end to end: fusor {:.3f} ms; unfused native path {:.3f} ms ({:.2f}x)\n", ft, ut,
                     ft > 0 ? ut / ft : 0.0);
  const double fk = median(fused_kernels), fn = median(fused_native);
  out << fmt::format("  fusor's time: region kernels {:.3f} ms, native ops {:.3f} ms, the rest (dispatch, operand "
                     "checks, copies) {:.3f} ms\n",
                     fk, fn, std::max(0.0, ft - fk - fn));
  for (const auto& name_out : g.outputs)
    out << fmt::format("  output '{}' {}: max |fused - unfused| = {:.3e}\n", name_out,
                       shape_str(fused_run->values.at(name_out).shape),
                       max_abs_diff(fused_run->values.at(name_out), unfused_run->values.at(name_out)));

  const bool is_onnx = embedded || fs::path(o.model).extension() == ".onnx";
  if (!o.compare_onnxruntime) {
    out << "onnxruntime: comparison not requested\n";
  } else if (!is_onnx) {
    out << "onnxruntime: not compared (the model is op-graph text, not ONNX)\n";
  } else {
    const OrtResult ort = run_onnxruntime(g, *inputs, embedded ? std::string() : o.model, default_model_bytes(), reps);
    if (ort.outputs.empty()) {
      out << ort.line << "\n";
    } else {
      out << fmt::format("{}: {:.3f} ms (fusor {:.2f}x its speed)\n", ort.line, ort.ms, ft > 0 ? ort.ms / ft : 0.0);
      for (size_t k = 0; k < g.outputs.size() && k < ort.outputs.size(); ++k)
        out << fmt::format("  output '{}': max |fusor - onnxruntime| = {:.3e}\n", g.outputs[k],
                           max_abs_diff(fused_run->values.at(g.outputs[k]), ort.outputs[k]));
    }
  }
  if (!o.out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    for (const auto& name_out : g.outputs) {
      std::string file = name_out;
      std::replace_if(
          file.begin(), file.end(), [](char c) { return c == '/' || c == ':' || c == '\\'; }, '_');
      const fs::path p = fs::path(o.out_dir) / (file + ".npy");
      if (Status s = write_npy(p, fused_run->values.at(name_out).to_tensor()); !s) return fail(s.error());
      out << "wrote " << p.string() << "\n";
    }
  }
  return rejected ? 1 : 0;
}

} // namespace fusor
