// Probe generation. Shapes are chosen to be ragged against every tile size; values to
// expose logic bugs (exact integers), overflow handling (large magnitudes), IEEE special
// values, and masking.
#include "verify/probes.hpp"

#include <cmath>
#include <limits>

#include "codegen/abi.hpp"
#include "fusor/operand_gen.hpp"

namespace fusor::probing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

ProblemShape gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  ProblemShape s;
  s.M = m, s.N = n, s.K = k;
  return s;
}

ProblemShape attn(std::int64_t batch, std::int64_t heads, std::int64_t kv, std::int64_t m, std::int64_t nk,
                  std::int64_t d, std::int64_t dv) {
  ProblemShape s;
  s.batch = batch, s.heads = heads, s.kv_heads = kv, s.M = m, s.Nk = nk, s.D = d, s.Dv = dv;
  return s;
}

ProblemShape elementwise(Shape shape) {
  ProblemShape s;
  s.output = std::move(shape);
  return s;
}

bool gemm_kind(RegionKind k) { return k == RegionKind::fused || k == RegionKind::matmul || k == RegionKind::gated; }

// SPEC §4's fixed probes and their value scale.
std::pair<ProblemShape, double> fixed_probe(RegionKind kind) {
  switch (kind) {
  case RegionKind::fused:
  case RegionKind::gated: return {gemm(8, 16, 12), 0.2};
  case RegionKind::matmul: return {gemm(32, 32, 16), 0.4};
  case RegionKind::attention: return {attn(0, 1, 1, 8, 8, 16, 16), 1.0};
  default: return {elementwise({8, 16}), 1.0};
  }
}

std::vector<ProblemShape> ragged_shapes(RegionKind kind) {
  if (gemm_kind(kind)) return {gemm(1, 13, 1), gemm(17, 1000, 31), gemm(129, 13, 7), gemm(7, 1, 129)};
  if (kind == RegionKind::attention)
    return {attn(0, 1, 1, 1, 13, 16, 16), attn(0, 1, 1, 17, 29, 64, 64), attn(2, 4, 2, 9, 31, 16, 16),
            attn(1, 3, 1, 5, 7, 8, 24)};
  if (kind == RegionKind::pointwise) return {elementwise({1}), elementwise({13}), elementwise({17, 1000})};
  return {elementwise({1, 1}), elementwise({17, 1000}), elementwise({3, 5, 129})};
}

std::string shape_text(RegionKind kind, const ProblemShape& s) {
  const auto names = codegen::abi_dim_names(kind);
  const auto values = codegen::abi_dim_values(kind, s);
  std::string out;
  if (kind == RegionKind::pointwise || kind == RegionKind::pointwise_reduce || kind == RegionKind::norm_chain)
    return "shape=" + shape_str(s.output);
  for (size_t i = 0; i < names.size(); ++i)
    out += (i ? " " : "") + std::string(names[i]) + "=" + std::to_string(values[i]);
  return out;
}

// Whether f32 evaluation of the region on small integers is exact (no rounding anywhere).
bool exact_region(const Region& region) {
  auto exact_ops = [](const std::vector<Op>& ops) {
    for (Op op : ops)
      if (!op_info(op).exact_on_small_integers) return false;
    return true;
  };
  auto exact_graph = [](const PointwiseGraph& g) {
    for (const auto& node : g.nodes()) {
      if (!op_info(node.op).exact_on_small_integers) return false;
      for (const auto& arg : node.args)
        if (arg.kind == ValueRef::Kind::constant &&
            (std::fabs(arg.constant) > 16 || std::fmod(arg.constant * 16, 1.0) != 0.0))
          return false;
    }
    return true;
  };
  if (const auto* f = std::get_if<FusedRegion>(&region))
    return !f->reduction() && exact_ops(f->prologue()) && exact_ops(f->epilogue());
  if (std::holds_alternative<MatmulRegion>(region)) return true;
  if (const auto* g = std::get_if<GatedMatmulRegion>(&region)) return op_info(g->gate_act()).exact_on_small_integers;
  if (const auto* p = std::get_if<PointwiseGraphRegion>(&region)) return exact_graph(p->graph());
  if (const auto* r = std::get_if<PointwiseReduceRegion>(&region))
    return r->reduce() != ReduceOp::mean && exact_graph(r->graph());
  return false;
}

// Kinds whose semantics promise overflow-safe normalisation (max-subtracted softmax,
// norms): large inputs must still give the reference's answer.
bool normalising(const Region& region) {
  if (const auto* f = std::get_if<FusedRegion>(&region)) return f->reduction().has_value();
  return std::holds_alternative<AttentionRegion>(region) || std::holds_alternative<NormChainRegion>(region);
}

void to_small_integers(std::vector<Tensor>& operands) {
  for (auto& t : operands)
    for (auto& v : t.data) v = std::clamp(std::round(v * 2.0f), -4.0f, 4.0f);
}

// Scales operands so normalised outputs stay O(1) while pre-normalisation values are far
// beyond exp()'s f32 range.
void to_large(const Region& region, const ProblemShape& dims, std::vector<Tensor>& operands) {
  auto scale = [](Tensor& t, double s) {
    for (auto& v : t.data) v = static_cast<float>(v * s);
  };
  if (std::holds_alternative<FusedRegion>(region)) {
    const double s = std::sqrt(400.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(dims.K, 1))));
    scale(operands[0], s);
    scale(operands[1], s);
  } else if (const auto* a = std::get_if<AttentionRegion>(&region)) {
    const double target = 300.0 / std::max(std::fabs(a->scale()), 1e-6);
    const double s = std::sqrt(target / std::sqrt(static_cast<double>(std::max<std::int64_t>(dims.D, 1))));
    scale(operands[0], s);
    scale(operands[1], s);
  } else {
    scale(operands[0], 1000.0);
  }
}

void set(Tensor& t, std::int64_t index, double value) {
  if (index < t.numel()) t.data[static_cast<size_t>(index)] = static_cast<float>(value);
}

// NaN and ±inf where every kind's semantics define what follows from them.
void to_special(const Region& region, const ProblemShape& dims, std::vector<Tensor>& operands) {
  const RegionKind kind = region_kind(region);
  if (gemm_kind(kind)) {
    // Raw orientation does not matter: each special lands in some row of A.
    set(operands[0], 0, kNaN);
    set(operands[0], 2 * dims.K + 1, kInf);
    set(operands[0], 3 * dims.K + 2, -kInf);
  } else if (kind == RegionKind::attention) {
    set(operands[2], 3 * dims.Dv, kNaN); // V[key 3, 0]: rows that see key 3 get NaN in column 0
    set(operands[0], 5 * dims.D, kInf);  // Q[5, 0]: that row's scores become ±inf
  } else if (kind == RegionKind::pointwise_reduce) {
    const std::int64_t n = dims.output.back();
    Tensor& x = operands[0];
    set(x, n + 1, kNaN);                                          // one NaN in row 1
    for (std::int64_t j = 0; j < n; ++j) set(x, 2 * n + j, kNaN); // row 2 all NaN
    set(x, 3 * n, kInf);
    set(x, 3 * n + 1, -kInf);
  } else {
    Tensor& x = operands[0];
    const double specials[] = {kNaN, kInf, -kInf, 0.0, -0.0, 1e-40, -1e-30};
    for (size_t i = 0; i < std::size(specials); ++i) set(x, static_cast<std::int64_t>(7 * i + 1), specials[i]);
  }
}

// Input 1 becomes the trailing axis only ([n]), input 2 keeps the leading axes with a
// unit last axis ([.., 1]), input 3 a single element: every broadcast path of the ABI.
void broadcast_inputs(std::vector<Tensor>& operands) {
  for (size_t i = 1; i < operands.size(); ++i) {
    Tensor& t = operands[i];
    Shape shape;
    switch (i % 3) {
    case 1: shape = {t.shape.back()}; break;
    case 2:
      shape = t.shape;
      shape.back() = 1;
      break;
    default: shape = {1}; break;
    }
    t = Tensor(shape, std::vector<float>(t.data.begin(), t.data.begin() + shape_numel(shape)));
  }
}

} // namespace

std::vector<Probe> make_probes(const Region& region, const KernelSource& source) {
  const RegionKind kind = region_kind(region);
  const bool exact = exact_region(region);

  // (family, dims, scale) before spec constraints.
  struct Plan {
    ProbeFamily family;
    ProblemShape dims;
    double scale;
    bool broadcast = false; // pointwise kinds: inputs after the first broadcast along trailing axes
  };
  std::vector<Plan> plans;
  const auto [fixed_dims, fixed_scale] = fixed_probe(kind);
  plans.push_back({ProbeFamily::fixed, fixed_dims, fixed_scale});
  for (const auto& d : ragged_shapes(kind)) plans.push_back({ProbeFamily::ragged, d, 0.5});
  const bool several_inputs = operand_names(region).size() > 1;
  if ((kind == RegionKind::pointwise || kind == RegionKind::pointwise_reduce) && several_inputs)
    plans.push_back({ProbeFamily::ragged, elementwise({5, 3, 7}), 1.0, true});
  plans.push_back({ProbeFamily::exact_int, fixed_dims, 1.0});
  plans.push_back({ProbeFamily::exact_int, ragged_shapes(kind)[1], 1.0});
  if (normalising(region)) {
    plans.push_back({ProbeFamily::large, fixed_dims, 1.0});
    plans.push_back({ProbeFamily::large, ragged_shapes(kind)[1], 1.0});
  }
  plans.push_back({ProbeFamily::special, gemm_kind(kind) ? gemm(8, 16, 12) : fixed_dims, 0.5});
  if (const auto* a = std::get_if<AttentionRegion>(&region); a && a->causal()) {
    plans.push_back({ProbeFamily::masked, attn(0, 1, 1, 13, 5, 16, 16), 1.0}); // rows past Nk see every key
    plans.push_back({ProbeFamily::masked, attn(0, 1, 1, 3, 17, 16, 16), 1.0}); // short rows of a long mask
    plans.push_back({ProbeFamily::masked, attn(2, 2, 1, 33, 40, 8, 8), 1.0});
  }

  // Spec constraints: a static kernel runs only its dims; a bucket kernel dims within bounds.
  if (source.spec == SpecPolicy::static_dims && !source.spec_dims.empty()) {
    const ProblemShape only = codegen::problem_from_abi_dims(kind, source.spec_dims);
    for (auto& p : plans) p.dims = only;
  } else if (source.spec == SpecPolicy::bucket && !source.spec_dims.empty()) {
    std::vector<Plan> kept;
    for (const auto& p : plans) {
      const auto v = codegen::abi_dim_values(kind, p.dims);
      bool fits = true;
      for (size_t i = 0; i < v.size(); ++i) fits = fits && v[i] <= source.spec_dims[i];
      if (fits) kept.push_back(p);
    }
    kept.push_back({ProbeFamily::ragged, codegen::problem_from_abi_dims(kind, source.spec_dims), 0.5});
    plans = std::move(kept);
  }

  std::vector<Probe> probes;
  std::uint64_t seed = 1000;
  for (const auto& plan : plans) {
    Probe p{plan.family, plan.dims, shape_text(kind, plan.dims), ++seed, {}, false};
    p.operands = make_operands(region, plan.dims, p.seed, plan.scale);
    if (plan.broadcast) broadcast_inputs(p.operands);
    switch (plan.family) {
    case ProbeFamily::exact_int:
      to_small_integers(p.operands);
      p.bit_exact = exact;
      break;
    case ProbeFamily::large: to_large(region, plan.dims, p.operands); break;
    case ProbeFamily::special: to_special(region, plan.dims, p.operands); break;
    default: break;
    }
    probes.push_back(std::move(p));
  }
  return probes;
}

} // namespace fusor::probing
