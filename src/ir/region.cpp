// Validation of region specs, in the order SPEC §1 documents (first failure wins).
#include "fusor/region.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace fusor {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string epilogue_vocabulary() {
  std::vector<std::string> names;
  for (const auto& row : op_table())
    if (row.in_epilogue_vocabulary) names.emplace_back(row.name);
  return join(names);
}

// An op name from the epilogue vocabulary (bias, relu, gelu, ...), or nullopt.
std::optional<Op> epilogue_op(std::string_view name) {
  auto op = op_from_name(name);
  if (op && op_info(*op).in_epilogue_vocabulary) return op;
  return std::nullopt;
}

Status check_eps(double eps, std::string_view kind) {
  if (!std::isfinite(eps) || eps < 0.0)
    return make_error(ErrorCode::region_bad_value,
                      std::string(kind) + " region: eps must be finite and >= 0, got " + std::to_string(eps));
  return {};
}

Expected<DType> region_dtype(const std::string& name, std::string_view kind, bool allow_fp8) {
  auto dtype = dtype_from_name(name);
  const bool fp8 = dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2;
  if (!dtype || (fp8 && !allow_fp8))
    return make_error(ErrorCode::region_bad_dtype,
                      std::string(kind) + " region: storage '" + name + "' is not one of " +
                          (allow_fp8 ? "f32, f16, bf16, fp8_e4m3, fp8_e5m2" : "f32, f16, bf16"));
  return *dtype;
}

} // namespace

std::string_view layout_name(Layout layout) { return layout == Layout::row_major ? "row_major" : "col_major"; }

std::optional<Layout> layout_from_name(std::string_view name) {
  if (name == "row_major") return Layout::row_major;
  if (name == "col_major") return Layout::col_major;
  return std::nullopt;
}

std::string_view region_kind_name(RegionKind kind) {
  switch (kind) {
  case RegionKind::fused: return "fused";
  case RegionKind::matmul: return "matmul";
  case RegionKind::attention: return "attention";
  case RegionKind::gated: return "gated";
  case RegionKind::pointwise: return "pointwise";
  case RegionKind::pointwise_reduce: return "pointwise_reduce";
  case RegionKind::norm_chain: return "norm_chain";
  }
  return "?";
}

// ---- FusedRegion ------------------------------------------------------------------------

Expected<FusedRegion> FusedRegion::make(const FusedSpec& spec) {
  FusedRegion r;
  // 1. layouts
  auto a = layout_from_name(spec.a_layout);
  auto b = layout_from_name(spec.b_layout);
  if (!a || !b)
    return make_error(ErrorCode::region_bad_layout, "fused region: " + std::string(!a ? "a_layout" : "b_layout") +
                                                        " '" + (!a ? spec.a_layout : spec.b_layout) +
                                                        "' is not row_major or col_major");
  r.a_layout_ = *a;
  r.b_layout_ = *b;
  // 2. storage dtype
  auto dtype = dtype_from_name(spec.storage);
  if (!dtype)
    return make_error(ErrorCode::fused_epilogue_bad_dtype,
                      "fused region: storage '" + spec.storage + "' is not one of f32, f16, bf16, fp8_e4m3, fp8_e5m2");
  r.storage_ = *dtype;
  // 3. op names
  for (const auto& [list, field] : {std::pair{&spec.prologue, "prologue"}, std::pair{&spec.epilogue, "epilogue"}})
    for (const auto& name : *list) {
      auto op = epilogue_op(name);
      if (!op)
        return make_error(ErrorCode::fused_epilogue_bad_op, "fused region: " + std::string(field) + " op '" + name +
                                                                "' is not one of " + epilogue_vocabulary());
      (list == &spec.prologue ? r.prologue_ : r.epilogue_).push_back(*op);
    }
  if (spec.reduction != "none") {
    auto norm = row_norm_from_name(spec.reduction);
    if (!norm)
      return make_error(ErrorCode::fused_epilogue_bad_op, "fused region: reduction '" + spec.reduction +
                                                              "' is not one of none, rmsnorm, softmax, layer_norm");
    r.reduction_ = *norm;
  }
  // 4. order
  if (std::count(r.epilogue_.begin(), r.epilogue_.end(), Op::bias) > 1)
    return make_error(ErrorCode::fused_epilogue_bad_order, "fused region: epilogue has more than one bias");
  if (std::count(r.prologue_.begin(), r.prologue_.end(), Op::bias) > 0)
    return make_error(ErrorCode::fused_epilogue_bad_order, "fused region: bias cannot appear in the prologue");
  if (spec.residual && r.reduction_)
    return make_error(ErrorCode::fused_epilogue_bad_order,
                      "fused region: residual together with reduction '" + spec.reduction + "' is not allowed");
  r.residual_ = spec.residual;
  // 5. nothing to do
  if (r.prologue_.empty() && r.epilogue_.empty() && !r.residual_ && !r.reduction_)
    return make_error(ErrorCode::fused_epilogue_bad_op,
                      "fused region: nothing to fuse (no prologue, epilogue, residual or reduction); use matmul");
  // 6. numbers
  FUSOR_TRY(check_eps(spec.eps, "fused"));
  r.eps_ = spec.eps;
  return r;
}

bool FusedRegion::has_bias() const {
  return std::find(epilogue_.begin(), epilogue_.end(), Op::bias) != epilogue_.end();
}

FusedSpec FusedRegion::spec() const {
  FusedSpec s;
  for (Op op : prologue_) s.prologue.emplace_back(op_info(op).name);
  for (Op op : epilogue_) s.epilogue.emplace_back(op_info(op).name);
  s.residual = residual_;
  s.reduction = reduction_ ? std::string(row_norm_info(*reduction_).name) : "none";
  s.eps = eps_;
  s.storage = dtype_name(storage_);
  s.a_layout = layout_name(a_layout_);
  s.b_layout = layout_name(b_layout_);
  return s;
}

// ---- MatmulRegion -----------------------------------------------------------------------

Expected<MatmulRegion> MatmulRegion::make(const MatmulSpec& spec) {
  MatmulRegion r;
  FUSOR_TRY_ASSIGN(r.storage_, region_dtype(spec.storage, "matmul", false));
  r.transpose_a_ = spec.transpose_a;
  r.transpose_b_ = spec.transpose_b;
  return r;
}

MatmulSpec MatmulRegion::spec() const { return {std::string(dtype_name(storage_)), transpose_a_, transpose_b_}; }

// ---- AttentionRegion --------------------------------------------------------------------

Expected<AttentionRegion> AttentionRegion::make(const AttentionSpec& spec) {
  AttentionRegion r;
  FUSOR_TRY_ASSIGN(r.storage_, region_dtype(spec.storage, "attention", true));
  if (!std::isfinite(spec.scale))
    return make_error(ErrorCode::region_bad_value,
                      "attention region: scale must be finite, got " + std::to_string(spec.scale));
  r.scale_ = spec.scale;
  r.causal_ = spec.causal;
  r.q_transposed_ = spec.q_transposed;
  r.k_transposed_ = spec.k_transposed;
  return r;
}

AttentionSpec AttentionRegion::spec() const {
  return {scale_, causal_, q_transposed_, k_transposed_, std::string(dtype_name(storage_))};
}

// ---- GatedMatmulRegion ------------------------------------------------------------------

Expected<GatedMatmulRegion> GatedMatmulRegion::make(const GatedSpec& spec) {
  GatedMatmulRegion r;
  FUSOR_TRY_ASSIGN(r.storage_, region_dtype(spec.storage, "gated", true));
  auto op = epilogue_op(spec.gate_act);
  if (!op || op_info(*op).arity != 1)
    return make_error(ErrorCode::region_bad_op, "gated region: gate_act '" + spec.gate_act +
                                                    "' is not a unary activation (relu, gelu, gelu_erf, silu, "
                                                    "sigmoid, tanh)");
  r.gate_act_ = *op;
  return r;
}

GatedSpec GatedMatmulRegion::spec() const {
  return {std::string(op_info(gate_act_).name), std::string(dtype_name(storage_))};
}

// ---- Pointwise DAGs ---------------------------------------------------------------------

Expected<PointwiseGraph> PointwiseGraph::make(const PointwiseSpec& spec, int min_ops, RegionKind kind) {
  const std::string where = std::string(region_kind_name(kind)) + " region: ";
  auto fail = [&](const std::string& what) { return make_error(ErrorCode::pointwise_bad_graph, where + what); };
  PointwiseGraph g;
  g.spec_ = spec;
  if (spec.inputs.empty()) return fail("needs at least one input");
  if (spec.inputs.size() > static_cast<size_t>(kMaxInputs))
    return fail("has " + std::to_string(spec.inputs.size()) + " inputs, at most " + std::to_string(kMaxInputs));
  if (spec.ops.size() < static_cast<size_t>(min_ops) || spec.ops.size() > static_cast<size_t>(kMaxOps))
    return fail("has " + std::to_string(spec.ops.size()) + " ops, needs " + std::to_string(min_ops) + " to " +
                std::to_string(kMaxOps));
  std::map<std::string, ValueRef, std::less<>> ids;
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    if (!ids.emplace(spec.inputs[i], ValueRef{ValueRef::Kind::input, static_cast<int>(i), 0.0}).second)
      return fail("input '" + spec.inputs[i] + "' is listed twice");
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const auto& o = spec.ops[i];
    auto op = op_from_name(o.op);
    if (!op || !op_info(*op).in_pointwise_vocabulary)
      return make_error(ErrorCode::region_bad_op,
                        where + "op '" + o.op + "' (defining '" + o.out + "') is not a pointwise op");
    const int arity = op_info(*op).arity;
    if (static_cast<int>(o.args.size()) != arity)
      return fail("'" + o.op + "' takes " + std::to_string(arity) + " argument(s), '" + o.out + "' gives it " +
                  std::to_string(o.args.size()));
    PointwiseNode node{*op, {}};
    for (const auto& arg : o.args) {
      if (const double* c = std::get_if<double>(&arg)) {
        node.args.push_back({ValueRef::Kind::constant, 0, *c});
        continue;
      }
      const auto& name = std::get<std::string>(arg);
      auto it = ids.find(name);
      if (it == ids.end()) return fail("'" + o.out + "' uses '" + name + "', which is not defined before it");
      node.args.push_back(it->second);
    }
    if (!ids.emplace(o.out, ValueRef{ValueRef::Kind::node, static_cast<int>(i), 0.0}).second)
      return fail("'" + o.out + "' is defined twice");
    g.nodes_.push_back(std::move(node));
  }
  auto out = ids.find(spec.output);
  if (out == ids.end()) return fail("output '" + spec.output + "' is not defined");
  if (out->second.kind == ValueRef::Kind::input && min_ops > 0)
    return fail("output '" + spec.output + "' is an input, not the result of an op");
  g.output_ = out->second;
  return g;
}

Expected<PointwiseGraphRegion> PointwiseGraphRegion::make(const PointwiseSpec& spec) {
  FUSOR_TRY_ASSIGN(auto graph, PointwiseGraph::make(spec, 2, RegionKind::pointwise));
  return PointwiseGraphRegion(std::move(graph));
}

Expected<PointwiseReduceRegion> PointwiseReduceRegion::make(const PointwiseReduceSpec& spec) {
  FUSOR_TRY_ASSIGN(auto graph, PointwiseGraph::make(spec.graph, 0, RegionKind::pointwise_reduce));
  auto reduce = reduce_from_name(spec.reduce);
  if (!reduce)
    return make_error(ErrorCode::region_bad_op,
                      "pointwise_reduce region: reduce '" + spec.reduce + "' is not one of sum, mean, amax, amin");
  return PointwiseReduceRegion(std::move(graph), *reduce);
}

PointwiseReduceSpec PointwiseReduceRegion::spec() const {
  return {graph_.spec(), std::string(reduce_info(reduce_).name)};
}

// ---- NormChainRegion --------------------------------------------------------------------

Expected<NormChainRegion> NormChainRegion::make(const NormChainSpec& spec) {
  NormChainRegion r;
  auto norm = row_norm_from_name(spec.norm);
  if (!norm)
    return make_error(ErrorCode::region_bad_op,
                      "norm_chain region: norm '" + spec.norm + "' is not one of rmsnorm, layer_norm, softmax");
  FUSOR_TRY(check_eps(spec.eps, "norm_chain"));
  r.norm_ = *norm;
  r.add_residual_ = spec.add_residual;
  r.weight_ = spec.weight;
  r.bias_ = spec.bias;
  r.eps_ = spec.eps;
  return r;
}

NormChainSpec NormChainRegion::spec() const {
  return {std::string(row_norm_info(norm_).name), add_residual_, weight_, bias_, eps_};
}

// ---- Any region -------------------------------------------------------------------------

RegionKind region_kind(const Region& region) { return static_cast<RegionKind>(region.index()); }

std::vector<std::string> operand_names(const Region& region) {
  struct Visitor {
    std::vector<std::string> operator()(const FusedRegion& r) const {
      std::vector<std::string> names{"A", "B"};
      if (r.has_bias()) names.emplace_back("bias");
      if (r.residual()) names.emplace_back("residual");
      return names;
    }
    std::vector<std::string> operator()(const MatmulRegion&) const { return {"A", "B"}; }
    std::vector<std::string> operator()(const AttentionRegion&) const { return {"Q", "K", "V"}; }
    std::vector<std::string> operator()(const GatedMatmulRegion&) const { return {"A", "Wg", "Wu"}; }
    std::vector<std::string> operator()(const PointwiseGraphRegion& r) const { return r.graph().input_names(); }
    std::vector<std::string> operator()(const PointwiseReduceRegion& r) const { return r.graph().input_names(); }
    std::vector<std::string> operator()(const NormChainRegion& r) const {
      std::vector<std::string> names{"x"};
      if (r.add_residual()) names.emplace_back("residual");
      if (r.weight()) names.emplace_back("gamma");
      if (r.bias()) names.emplace_back("beta");
      return names;
    }
  };
  return std::visit(Visitor{}, region);
}

DType region_storage(const Region& region) {
  return std::visit(
      [](const auto& r) -> DType {
        if constexpr (requires { r.storage(); })
          return r.storage();
        else
          return DType::f32;
      },
      region);
}

} // namespace fusor
