// fusor-cuda-bench: the fusor side of the GPU benchmark (bench/gpu/run_bench.py runs it
// beside PyTorch on the same input files). Reads a JSON list of cases on stdin; for each:
// emits the named lane, compiles it, runs the oracle on it (verify(): every probe family),
// times the kernel with CUDA events on the case's inputs (median of reps after warm-up), and
// checks sampled rows of the output against the double-precision reference evaluated on
// the same inputs. Prints one JSON line per case.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>

#include <nlohmann/json.hpp>

#include "codegen/abi.hpp"
#include "fusor/oracle.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/target.hpp"
#include "targets/cuda/cuda_exec.hpp"

using namespace fusor;
using nlohmann::json;

namespace {

Expected<std::string> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorCode::io_error, "cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Storage bytes → f32 tensor holding the storage-rounded values the reference sees.
Tensor to_tensor(const std::string& bytes, const Shape& shape, DType dtype) {
  Tensor t(shape);
  const auto n = static_cast<size_t>(t.numel());
  if (dtype == DType::f16 || dtype == DType::bf16) {
    for (size_t i = 0; i < n; ++i) {
      std::uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      t.data[i] = dtype == DType::f16 ? half_bits_to_float(b) : bf16_bits_to_float(b);
    }
  } else {
    std::memcpy(t.data.data(), bytes.data(), n * sizeof(float));
  }
  return t;
}

Tensor rows_of(const Tensor& t, std::int64_t row0, std::int64_t rows) {
  const std::int64_t width = t.numel() / t.shape[0];
  Shape s = t.shape;
  s[0] = rows;
  return Tensor(s, std::vector<float>(t.data.begin() + row0 * width, t.data.begin() + (row0 + rows) * width));
}

struct Check {
  double max_abs = 0;
  std::int64_t bad = 0, checked = 0;
};

void compare(Check& c, std::span<const float> got, std::span<const double> ref, double atol, double rtol) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], r = ref[i];
    ++c.checked;
    if (std::isnan(r) && std::isnan(g)) continue;
    const double e = std::fabs(g - r);
    if (!(e <= atol + rtol * std::fabs(r))) ++c.bad;
    if (std::isfinite(e)) c.max_abs = std::max(c.max_abs, e);
  }
}

Expected<json> run_case(const json& spec) {
  FUSOR_TRY_ASSIGN(const Region region, parse_region(spec.at("region").get<std::string>()));
  const RegionKind kind = region_kind(region);
  const DType dtype = region_storage(region);
  const std::string lane = spec.at("lane");
  const Target* target = builtin_registry().target("cuda");
  if (!target) return make_error(ErrorCode::runner_unavailable, "this fusor has no cuda target");
  const Candidate* cand = nullptr;
  for (const auto* c : builtin_registry().candidates("cuda", kind))
    if (c->name == lane) cand = c;
  if (!cand) return make_error(ErrorCode::arbiter_forced_unknown, "no cuda candidate " + lane);
  EmitOptions eo;
  const json options = spec.value("options", json::object()); // items() must not outlive its json
  for (const auto& [k, v] : options.items()) eo.options[k] = v.get<std::string>();
  auto src = emit_candidate(*target, cand, region, eo);
  if (!src) return src.error();
  FUSOR_TRY_ASSIGN(const Artifact art, target->compile(*src));
  FUSOR_TRY_ASSIGN(const VerifyReport oracle, verify(region, *target, art));

  ProblemShape shape;
  for (const char* k : {"M", "N", "K", "batch", "heads", "kv_heads", "Nk", "D", "Dv", "rows", "row_len"})
    if (spec.contains(k)) {
      const std::int64_t v = spec[k];
      std::string_view key(k);
      if (key == "M") shape.M = v;
      if (key == "N") shape.N = v;
      if (key == "K") shape.K = v;
      if (key == "batch") shape.batch = v;
      if (key == "heads") shape.heads = v;
      if (key == "kv_heads") shape.kv_heads = v;
      if (key == "Nk") shape.Nk = v;
      if (key == "D") shape.D = v;
      if (key == "Dv") shape.Dv = v;
      if (key == "rows") shape.rows = v;
      if (key == "row_len") shape.row_len = v;
    }
  KernelCall call;
  std::vector<Tensor> inputs;
  const auto shapes = spec.at("shapes").get<std::vector<Shape>>();
  const auto paths = spec.at("inputs").get<std::vector<std::string>>();
  for (size_t i = 0; i < paths.size(); ++i) {
    FUSOR_TRY_ASSIGN(std::string bytes, read_bytes(paths[i]));
    const DType op_dtype = kind == RegionKind::norm_chain ? DType::f32 : dtype;
    const size_t want = static_cast<size_t>(shape_numel(shapes[i])) * (op_dtype == DType::f32 ? 4 : 2);
    if (bytes.size() != want)
      return make_error(ErrorCode::shape_mismatch,
                        paths[i] + ": " + std::to_string(bytes.size()) + " bytes, expected " + std::to_string(want));
    inputs.push_back(to_tensor(bytes, shapes[i], op_dtype));
    call.operands.emplace_back(bytes.begin(), bytes.end());
  }
  call.dims = codegen::abi_dim_values(kind, shape);
  std::int64_t out_elems = 0;
  switch (kind) {
  case RegionKind::attention: out_elems = shape.batch * shape.heads * shape.M * shape.Dv; break;
  case RegionKind::norm_chain: out_elems = shape.rows * shape.row_len; break;
  default: out_elems = shape.M * shape.N; break;
  }
  call.output_elems = out_elems;

  FUSOR_TRY_ASSIGN(const cuda::Driver* d, cuda::driver());
  FUSOR_TRY_ASSIGN(const cuda::LaunchSpec ls, cuda::parse_launch(src->source));
  FUSOR_TRY_ASSIGN(const std::string image, read_bytes(art.path.string()));
  FUSOR_TRY_ASSIGN(auto kernel, cuda::LoadedKernel::load(*d, image, src->entry, ls));
  cuda::CallOptions timing;
  timing.warmup = spec.value("warmup", 5);
  timing.reps = spec.value("reps", 20);
  FUSOR_TRY_ASSIGN(cuda::CallResult r, cuda::run_call(*d, *kernel, call, timing));
  if (r.kind != cuda::CallResult::Kind::ok) return make_error(ErrorCode::internal, "kernel failed: " + r.detail);

  // Sampled rows against the double reference on the same inputs.
  const Budget budget = lane_budget(lane, dtype);
  const double atol = std::max(1e-3, budget.atol), rtol = budget.rtol;
  Check check;
  std::mt19937_64 rng(spec.value("seed", 7));
  const int samples = spec.value("sample_rows", 8);
  if (kind == RegionKind::attention) {
    const auto& a = std::get<AttentionRegion>(region);
    AttentionSpec sub_spec = a.spec();
    sub_spec.causal = false; // row m of a causal problem = the same row against keys 0..m
    FUSOR_TRY_ASSIGN(const Region sub, AttentionRegion::make(sub_spec));
    const std::int64_t D = shape.D, Dv = shape.Dv, M = shape.M, Nk = shape.Nk;
    for (int s = 0; s < samples; ++s) {
      const std::int64_t bh = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(shape.batch * shape.heads));
      const std::int64_t m = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(M));
      const std::int64_t b = bh / shape.heads, h = bh % shape.heads;
      const std::int64_t kvh = b * shape.kv_heads + h / (shape.heads / shape.kv_heads);
      const std::int64_t nvis = a.causal() ? std::min(m + 1, Nk) : Nk;
      Tensor q({1, D}, std::vector<float>(inputs[0].data.begin() + (bh * M + m) * D,
                                          inputs[0].data.begin() + (bh * M + m + 1) * D));
      Tensor k({nvis, D}, std::vector<float>(inputs[1].data.begin() + kvh * Nk * D,
                                             inputs[1].data.begin() + (kvh * Nk + nvis) * D));
      Tensor v({nvis, Dv}, std::vector<float>(inputs[2].data.begin() + kvh * Nk * Dv,
                                              inputs[2].data.begin() + (kvh * Nk + nvis) * Dv));
      const std::vector<Tensor> ops{q, k, v};
      FUSOR_TRY_ASSIGN(const TensorF64 ref, evaluate_reference_f64(sub, ops));
      compare(check, std::span<const float>(r.output).subspan(static_cast<size_t>((bh * M + m) * Dv), Dv), ref.data,
              atol, rtol);
    }
  } else {
    // `samples` consecutive rows at a random offset: one reference evaluation.
    const std::int64_t rows = kind == RegionKind::norm_chain ? shape.rows : shape.M;
    const std::int64_t width = kind == RegionKind::norm_chain ? shape.row_len : shape.N;
    const std::int64_t count = std::min<std::int64_t>(samples, rows);
    const std::int64_t row0 = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(rows - count + 1));
    const auto names = operand_names(region);
    std::vector<Tensor> ops;
    for (size_t i = 0; i < inputs.size(); ++i) {
      // Row-indexed operands: A, the residual, x; the rest (B, bias, gamma...) whole.
      const bool per_row = names[i] == "A" || names[i] == "residual" || names[i] == "x";
      ops.push_back(per_row ? rows_of(inputs[i], row0, count) : inputs[i]);
    }
    FUSOR_TRY_ASSIGN(const TensorF64 ref, evaluate_reference_f64(region, ops));
    compare(
        check,
        std::span<const float>(r.output).subspan(static_cast<size_t>(row0 * width), static_cast<size_t>(count * width)),
        ref.data, atol, rtol);
  }
  return json{{"case", spec.at("case")},
              {"lane", lane},
              {"device", d->device.describe()},
              {"fusor_ms", r.ms},
              {"max_abs_err", check.max_abs},
              {"sampled_elements", check.checked},
              {"sampled_out_of_budget", check.bad},
              {"atol", atol},
              {"rtol", rtol},
              {"oracle_verified", oracle.verified},
              {"oracle_max_abs_err", oracle.max_abs_err},
              {"oracle_probes", oracle.probes},
              {"oracle_summary", oracle.summary()}};
}

} // namespace

int main() {
  json cases;
  try {
    cases = json::parse(std::cin);
  } catch (const std::exception& e) {
    std::cerr << "fusor-cuda-bench: bad case list on stdin: " << e.what() << "\n";
    return 2;
  }
  int failures = 0;
  for (const auto& spec : cases) {
    auto res = run_case(spec);
    if (!res) {
      ++failures;
      std::cout << json{{"case", spec.value("case", "?")},
                        {"lane", spec.value("lane", "?")},
                        {"error", res.error().str()}}
                       .dump()
                << std::endl;
      continue;
    }
    std::cout << res->dump() << std::endl;
  }
  return failures ? 1 : 0;
}
