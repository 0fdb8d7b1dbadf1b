// Operand validation: the one place that knows which shapes each region kind accepts.
//
// Zero-size dimensions are accepted and give empty (or all-zero) outputs, as numpy and
// PyTorch do: M = 0 or N = 0 gives an empty output, K = 0 a contraction over nothing
// (zeros before the epilogue), Nk = 0 attention rows with no visible key (zeros, SPEC
// §1.3). The one exception is an amax/amin reduction over an empty last axis, which has
// no identity (numpy raises too): E_SHAPE_MISMATCH. Negative dimensions, a data length
// that disagrees with the shape, and element counts past 2^62 are rejected.
#include "fusor/operands.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace fusor {
namespace {

constexpr std::int64_t kMaxNumel = std::int64_t{1} << 62;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string dim(std::int64_t d) { return std::to_string(d); }

// An expected shape written with known sizes as numbers and free ones as letters: "[4, N]".
std::string dims(std::initializer_list<std::string> parts) { return "[" + join(std::vector<std::string>(parts)) + "]"; }

std::string where(const Region& region) { return std::string(region_kind_name(region_kind(region))) + " region"; }

Error shape_error(const Region& region, std::string_view operand, const std::string& expected, const Shape& given,
                  const std::string& why = {}) {
  return make_error(ErrorCode::shape_mismatch, where(region) + ": operand " + std::string(operand) +
                                                   " expected shape " + expected + ", got " + shape_str(given) +
                                                   (why.empty() ? "" : " (" + why + ")"));
}

Status check_count(const Region& region, std::span<const Tensor> operands) {
  const auto names = operand_names(region);
  if (operands.size() == names.size()) return {};
  const std::string got = "; got " + std::to_string(operands.size());
  const auto* fused = std::get_if<FusedRegion>(&region);
  // SPEC §1.1 step 6: a fused region whose bias/residual operand is absent has its own code.
  if (fused && (fused->has_bias() || fused->residual()) && operands.size() < names.size()) {
    const std::vector<std::string> missing(names.begin() + static_cast<std::ptrdiff_t>(operands.size()), names.end());
    return make_error(ErrorCode::fused_epilogue_missing_operand,
                      "fused region needs operands " + join(names) + got + ": " + join(missing) +
                          (missing.size() == 1 ? " is" : " are") + " missing");
  }
  return make_error(ErrorCode::bad_argument, where(region) + " takes " + std::to_string(names.size()) +
                                                 " operand(s) (" + join(names) + ")" + got);
}

// Each tensor on its own: dimensions >= 0, a sane element count, data matching the shape.
Status check_well_formed(const Region& region, std::span<const Tensor> operands) {
  const auto names = operand_names(region);
  for (size_t i = 0; i < operands.size(); ++i) {
    const Tensor& t = operands[i];
    std::int64_t numel = 1;
    for (auto d : t.shape) {
      if (d < 0) return shape_error(region, names[i], "with dimensions >= 0", t.shape);
      if (d != 0 && numel > kMaxNumel / d) return shape_error(region, names[i], "with at most 2^62 elements", t.shape);
      numel *= d;
    }
    if (static_cast<std::int64_t>(t.data.size()) != numel)
      return make_error(ErrorCode::shape_mismatch, where(region) + ": operand " + names[i] + " has shape " +
                                                       shape_str(t.shape) + " (" + std::to_string(numel) +
                                                       " elements) but holds " + std::to_string(t.data.size()) +
                                                       " values");
  }
  return {};
}

// A logical [rows, cols] matrix passed raw: [cols, rows] when the flag says it is stored
// transposed (col_major / transpose_*). Returns {rows, cols}.
struct Dims2 {
  std::int64_t rows, cols;
};
Dims2 logical(const Tensor& t, bool transposed) {
  return transposed ? Dims2{t.shape[1], t.shape[0]} : Dims2{t.shape[0], t.shape[1]};
}

// A[M,K] @ B[K,N] with raw orientation given by the flags; fills M, N, K.
Status check_gemm(const Region& region, const Tensor& a, bool a_t, const Tensor& b, bool b_t, std::string_view bname,
                  ProblemShape& p) {
  const std::string a_note = a_t ? "A stored transposed, raw [K, M]" : "";
  if (a.rank() != 2) return shape_error(region, "A", a_t ? dims({"K", "M"}) : dims({"M", "K"}), a.shape, a_note);
  const auto [m, k] = logical(a, a_t);
  const std::string b_note =
      std::string(bname) + (b_t ? " stored transposed, raw [N, K]; " : " ") + "K = " + dim(k) + " from A";
  const std::string b_expect = b_t ? dims({"N", dim(k)}) : dims({dim(k), "N"});
  if (b.rank() != 2 || logical(b, b_t).rows != k) return shape_error(region, bname, b_expect, b.shape, b_note);
  p.M = m;
  p.K = k;
  p.N = logical(b, b_t).cols;
  p.output = {p.M, p.N};
  return {};
}

Status check_fused(const FusedRegion& r, const Region& region, std::span<const Tensor> ops, ProblemShape& p) {
  FUSOR_TRY(
      check_gemm(region, ops[0], r.a_layout() == Layout::col_major, ops[1], r.b_layout() == Layout::col_major, "B", p));
  size_t next = 2;
  if (r.has_bias()) {
    const Tensor& bias = ops[next++];
    const bool ok = bias.shape == Shape{p.N} || bias.shape == Shape{1, p.N};
    if (!ok) return shape_error(region, "bias", dims({dim(p.N)}) + " or " + dims({"1", dim(p.N)}), bias.shape);
  }
  if (r.residual()) {
    const Tensor& res = ops[next++];
    if (res.shape != p.output) return shape_error(region, "residual", shape_str(p.output), res.shape, "[M, N]");
  }
  return {};
}

Status check_gated(const Region& region, std::span<const Tensor> ops, ProblemShape& p) {
  FUSOR_TRY(check_gemm(region, ops[0], false, ops[1], false, "Wg", p));
  if (ops[2].shape != ops[1].shape)
    return shape_error(region, "Wu", shape_str(ops[1].shape), ops[2].shape, "[K, H], the shape of Wg");
  return {};
}

Status check_attention(const AttentionRegion& r, const Region& region, std::span<const Tensor> ops, ProblemShape& p) {
  const Tensor &q = ops[0], &k = ops[1], &v = ops[2];
  const std::int64_t rank = q.rank();
  if (rank < 2 || rank > 4)
    return shape_error(region, "Q",
                       r.q_transposed() ? "[D, M], [H, D, M] or [B, H, D, M]" : "[M, D], [H, M, D] or [B, H, M, D]",
                       q.shape);
  // Leading (batch, head) dims of each operand, and the per-head matrices.
  const auto lead = static_cast<size_t>(rank - 2);
  const auto tail = [](const Tensor& t, bool transposed) {
    const std::int64_t r0 = t.shape[t.shape.size() - 2], r1 = t.shape.back();
    return transposed ? Dims2{r1, r0} : Dims2{r0, r1};
  };
  p.batch = rank == 4 ? q.shape[0] : 1;
  p.heads = rank >= 3 ? q.shape[lead - 1] : 1;
  const auto [m, d] = tail(q, r.q_transposed());
  // K: same batch, any head count dividing H (GQA).
  const std::string b_dims = rank == 4 ? dim(p.batch) + ", " : "";
  const std::string h_dims = rank >= 3 ? "Hkv, " : "";
  const std::string k_expect = "[" + b_dims + h_dims + (r.k_transposed() ? dim(d) + ", Nk]" : "Nk, " + dim(d) + "]");
  if (k.rank() != rank || (rank == 4 && k.shape[0] != p.batch))
    return shape_error(region, "K", k_expect, k.shape, "rank and batch of Q");
  p.kv_heads = rank >= 3 ? k.shape[lead - 1] : 1;
  if (p.kv_heads < 1 || p.heads % p.kv_heads != 0)
    return shape_error(region, "K", k_expect, k.shape,
                       "KV heads must be >= 1 and divide the " + dim(p.heads) + " query heads");
  const auto [nk, kd] = tail(k, r.k_transposed());
  if (kd != d) return shape_error(region, "K", k_expect, k.shape, "D = " + dim(d) + " from Q");
  // V: exactly K's leading dims and Nk rows.
  Shape v_lead(k.shape.begin(), k.shape.begin() + static_cast<std::ptrdiff_t>(lead));
  if (v.rank() != rank || !std::equal(v_lead.begin(), v_lead.end(), v.shape.begin()) || v.shape[lead] != nk) {
    std::string expect = "[";
    for (auto x : v_lead) expect += dim(x) + ", ";
    return shape_error(region, "V", expect + dim(nk) + ", Dv]", v.shape, "leading dims and Nk of K");
  }
  p.M = m;
  p.Nk = nk;
  p.D = d;
  p.Dv = v.shape[lead + 1];
  p.output = Shape(q.shape.begin(), q.shape.begin() + static_cast<std::ptrdiff_t>(lead));
  p.output.push_back(m);
  p.output.push_back(p.Dv);
  return {};
}

// The numpy broadcast of all inputs, naming the first input that does not fit.
Status check_broadcast(const Region& region, const std::vector<std::string>& names, std::span<const Tensor> ops,
                       Shape& out) {
  out = {};
  for (size_t i = 0; i < ops.size(); ++i) {
    const Shape pair[2] = {out, ops[i].shape};
    auto b = broadcast_shapes(pair);
    if (!b)
      return shape_error(region, "'" + names[i] + "'", "broadcastable with " + shape_str(out), ops[i].shape,
                         "numpy rules: trailing axes equal or 1");
    out = *b;
  }
  return {};
}

Status check_pointwise_reduce(const PointwiseReduceRegion& r, const Region& region, std::span<const Tensor> ops,
                              ProblemShape& p) {
  const auto names = operand_names(region);
  Shape full;
  FUSOR_TRY(check_broadcast(region, names, ops, full));
  if (full.empty())
    return shape_error(region, "'" + names[0] + "'", "of rank >= 1", ops[0].shape,
                       "every input is a scalar, so there is no last axis to reduce");
  p.row_len = full.back();
  p.output = Shape(full.begin(), full.end() - 1); // a rank-1 input reduces to shape [] (one value)
  p.rows = shape_numel(p.output);
  if (p.row_len == 0 && (r.reduce() == ReduceOp::amax || r.reduce() == ReduceOp::amin))
    return shape_error(region, "'" + names[0] + "'", "with a last axis of length >= 1", full,
                       std::string(reduce_info(r.reduce()).name) + " of an empty row has no identity");
  return {};
}

Status check_norm_chain(const NormChainRegion& r, const Region& region, std::span<const Tensor> ops, ProblemShape& p) {
  const Tensor& x = ops[0];
  if (x.rank() < 1) return shape_error(region, "x", "[..., N] (rank >= 1)", x.shape);
  p.row_len = x.shape.back();
  p.rows = shape_numel(Shape(x.shape.begin(), x.shape.end() - 1));
  p.output = x.shape;
  size_t next = 1;
  if (r.add_residual()) {
    const Tensor& res = ops[next++];
    if (res.shape != x.shape) return shape_error(region, "residual", shape_str(x.shape), res.shape, "the shape of x");
  }
  for (auto [flag, name] : {std::pair{r.weight(), "gamma"}, std::pair{r.bias(), "beta"}}) {
    if (!flag) continue;
    const Tensor& t = ops[next++];
    if (t.shape != Shape{p.row_len})
      return shape_error(region, name, dims({dim(p.row_len)}), t.shape, "N, the last axis of x");
  }
  return {};
}

} // namespace

std::optional<Shape> broadcast_shapes(std::span<const Shape> shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      auto& o = out[rank - s.size() + i];
      const auto d = s[i];
      if (d < 0) return std::nullopt;
      if (d == o || d == 1) continue;
      if (o != 1) return std::nullopt;
      o = d;
    }
  return out;
}

Expected<ProblemShape> check_operands(const Region& region, std::span<const Tensor> operands) {
  FUSOR_TRY(check_count(region, operands));
  FUSOR_TRY(check_well_formed(region, operands));
  ProblemShape p;
  Status status;
  if (const auto* r = std::get_if<FusedRegion>(&region))
    status = check_fused(*r, region, operands, p);
  else if (const auto* m = std::get_if<MatmulRegion>(&region))
    status = check_gemm(region, operands[0], m->transpose_a(), operands[1], m->transpose_b(), "B", p);
  else if (const auto* a = std::get_if<AttentionRegion>(&region))
    status = check_attention(*a, region, operands, p);
  else if (std::holds_alternative<GatedMatmulRegion>(region))
    status = check_gated(region, operands, p);
  else if (std::holds_alternative<PointwiseGraphRegion>(region))
    status = check_broadcast(region, operand_names(region), operands, p.output);
  else if (const auto* pr = std::get_if<PointwiseReduceRegion>(&region))
    status = check_pointwise_reduce(*pr, region, operands, p);
  else if (const auto* n = std::get_if<NormChainRegion>(&region))
    status = check_norm_chain(*n, region, operands, p);
  if (!status) return status.error();
  return p;
}

} // namespace fusor
