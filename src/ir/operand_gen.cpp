// Deterministic operands: shapes follow check_operands' raw-orientation rule, values are
// N(0,1)·scale from a generator whose output is fixed by the C++ standard (mt19937_64)
// plus our own Box–Muller, because std::normal_distribution differs between standard
// libraries and the same seed must give the same probes everywhere.
#include "fusor/operand_gen.hpp"

#include <cmath>
#include <numbers>
#include <random>

namespace fusor {
namespace {

// SplitMix64 finaliser: decorrelates per-operand seeds derived from one user seed.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Operand `index` gets its own stream, so one operand's size never shifts another's values.
Tensor normal_tensor(Shape shape, std::uint64_t seed, std::uint64_t index, double scale) {
  Tensor t(std::move(shape));
  std::mt19937_64 rng(mix(seed ^ mix(index + 1)));
  const auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1p-53; }; // [0, 1)
  for (size_t i = 0; i < t.data.size(); i += 2) {
    const double u1 = 1.0 - uniform(); // (0, 1]: log stays finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    t.data[i] = static_cast<float>(r * std::cos(theta) * scale);
    if (i + 1 < t.data.size()) t.data[i + 1] = static_cast<float>(r * std::sin(theta) * scale);
  }
  return t;
}

// A logical [rows, cols] matrix in raw orientation: [cols, rows] when stored transposed.
Shape matrix(std::int64_t rows, std::int64_t cols, bool transposed) {
  return transposed ? Shape{cols, rows} : Shape{rows, cols};
}

std::vector<Shape> attention_shapes(const AttentionRegion& r, const ProblemShape& d) {
  const std::int64_t heads = d.heads > 0 ? d.heads : 1;
  const std::int64_t kv_heads = d.kv_heads > 0 ? d.kv_heads : heads;
  Shape q_lead, kv_lead;
  if (d.batch > 1) {
    q_lead = {d.batch, heads};
    kv_lead = {d.batch, kv_heads};
  } else if (d.batch == 1 && heads > 1) {
    q_lead = {heads};
    kv_lead = {kv_heads};
  }
  const auto with_lead = [](Shape lead, const Shape& tail) {
    lead.insert(lead.end(), tail.begin(), tail.end());
    return lead;
  };
  return {with_lead(q_lead, matrix(d.M, d.D, r.q_transposed())),
          with_lead(kv_lead, matrix(d.Nk, d.D, r.k_transposed())), with_lead(kv_lead, Shape{d.Nk, d.Dv})};
}

std::vector<Shape> operand_shapes(const Region& region, const ProblemShape& d) {
  if (const auto* f = std::get_if<FusedRegion>(&region)) {
    std::vector<Shape> s{matrix(d.M, d.K, f->a_layout() == Layout::col_major),
                         matrix(d.K, d.N, f->b_layout() == Layout::col_major)};
    if (f->has_bias()) s.push_back({d.N});
    if (f->residual()) s.push_back({d.M, d.N});
    return s;
  }
  if (const auto* m = std::get_if<MatmulRegion>(&region))
    return {matrix(d.M, d.K, m->transpose_a()), matrix(d.K, d.N, m->transpose_b())};
  if (std::holds_alternative<GatedMatmulRegion>(region)) return {{d.M, d.K}, {d.K, d.N}, {d.K, d.N}};
  if (const auto* a = std::get_if<AttentionRegion>(&region)) return attention_shapes(*a, d);
  if (const auto* n = std::get_if<NormChainRegion>(&region)) {
    // x and residual have the full shape; gamma/beta are per-feature vectors of the last axis.
    const Shape feature{d.output.empty() ? 1 : d.output.back()};
    std::vector<Shape> s{d.output};
    if (n->add_residual()) s.push_back(d.output);
    if (n->weight()) s.push_back(feature);
    if (n->bias()) s.push_back(feature);
    return s;
  }
  // Pointwise DAGs (with or without a reduction): every input has the full shape.
  return std::vector<Shape>(operand_names(region).size(), d.output);
}

} // namespace

std::vector<Tensor> make_operands(const Region& region, const ProblemShape& dims, std::uint64_t seed, double scale) {
  std::vector<Tensor> out;
  std::uint64_t index = 0;
  for (auto& shape : operand_shapes(region, dims)) out.push_back(normal_tensor(std::move(shape), seed, index++, scale));
  return out;
}

} // namespace fusor
