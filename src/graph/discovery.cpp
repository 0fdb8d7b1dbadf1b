// Discovery passes (SPEC §6). Decision beyond the SPEC: a matmul that is the Q·Kᵀ or P·V
// contraction of a complete attention pattern is reserved for the attention pass, so the
// matmul-chain pass (which runs first) does not split an attention block into GEMMs.
#include "fusor/discovery.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "fusor/ops.hpp"

namespace fusor {
namespace {

bool is_epilogue_unary(const std::string& op) {
  auto o = op_from_name(op);
  return o && op_info(*o).in_epilogue_vocabulary && op_info(*o).arity == 1;
}

bool is_pointwise(const std::string& op) {
  auto o = op_from_name(op);
  return o && op_info(*o).in_pointwise_vocabulary;
}

class Discoverer {
public:
  Discoverer(const Graph& g, const std::map<std::string, ValueType>& types) : g_(g), types_(types) {
    claimed_.assign(g.nodes.size(), false);
    reserved_.assign(g.nodes.size(), false);
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      for (const auto& in : g.nodes[k].inputs)
        if (!in.empty()) consumers_[in].push_back(k);
      for (const auto& out : g.nodes[k].outputs) producer_[out] = k;
    }
    outputs_.insert(g.outputs.begin(), g.outputs.end());
  }

  Discovery run() {
    for (size_t k = 0; k < g_.nodes.size(); ++k)
      if (auto m = match_attention(k)) {
        for (auto n : m->nodes) reserved_[n] = true;
      }
    for (size_t k = 0; k < g_.nodes.size(); ++k) try_gated(k);
    for (size_t k = 0; k < g_.nodes.size(); ++k) try_matmul_chain(k);
    for (size_t k = 0; k < g_.nodes.size(); ++k) try_norm_chain(k);
    for (size_t k = 0; k < g_.nodes.size(); ++k) try_attention(k);
    for (size_t k = g_.nodes.size(); k-- > 0;) try_pointwise(k);
    std::sort(d_.regions.begin(), d_.regions.end(),
              [](const auto& a, const auto& b) { return a.nodes.back() < b.nodes.back(); });
    for (size_t k = 0; k < g_.nodes.size(); ++k)
      if (!claimed_[k]) d_.unfused.push_back({k, why_unfused(k)});
    return std::move(d_);
  }

private:
  const Graph& g_;
  const std::map<std::string, ValueType>& types_;
  std::map<std::string, std::vector<size_t>> consumers_;
  std::map<std::string, size_t> producer_;
  std::set<std::string> outputs_;
  std::vector<bool> claimed_, reserved_;
  Discovery d_;

  const Node& node(size_t k) const { return g_.nodes[k]; }

  const Shape* shape_of(const std::string& v) const {
    auto it = types_.find(v);
    return it == types_.end() ? nullptr : &it->second.shape;
  }
  bool is_f32(const std::string& v) const {
    auto it = types_.find(v);
    return it != types_.end() && it->second.type == ElemType::f32 && shape_numel(it->second.shape) > 0;
  }
  bool single_use(const std::string& v) const {
    auto it = consumers_.find(v);
    return it != consumers_.end() && it->second.size() == 1 && !outputs_.count(v);
  }
  // The node producing `v` if it is free to claim.
  std::optional<size_t> free_producer(const std::string& v) const {
    auto it = producer_.find(v);
    if (it == producer_.end() || claimed_[it->second]) return std::nullopt;
    return it->second;
  }
  std::optional<size_t> sole_consumer(const std::string& v) const {
    if (!single_use(v)) return std::nullopt;
    const size_t c = consumers_.at(v)[0];
    if (claimed_[c]) return std::nullopt;
    return c;
  }
  std::optional<double> scalar_const(const std::string& v) const {
    auto it = g_.constants.find(v);
    if (it == g_.constants.end() || it->second.numel() != 1 || it->second.type != ElemType::f32) return std::nullopt;
    return it->second.f[0];
  }
  bool only_first_output_used(const Node& n) const {
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty() && (consumers_.count(n.outputs[k]) || outputs_.count(n.outputs[k]))) return false;
    return true;
  }
  bool last_axis(const Node& n, const std::string& v) const {
    const Shape* s = shape_of(v);
    if (!s || s->empty()) return false;
    const auto axis = n.attr_int("axis", -1);
    return axis == -1 || axis == static_cast<std::int64_t>(s->size()) - 1;
  }

  void add_region(Region region, std::vector<size_t> nodes, std::vector<std::string> operands,
                  std::vector<Shape> shapes, const std::string& output, std::string ops) {
    std::sort(nodes.begin(), nodes.end());
    for (auto n : nodes) claimed_[n] = true;
    DiscoveredRegion r{std::move(region), std::move(nodes), std::move(operands), std::move(shapes), output,
                       *shape_of(output), std::move(ops)};
    d_.regions.push_back(std::move(r));
  }

  // A[.., K] viewed as [M, K].
  static Shape as_matrix(const Shape& s) { return {shape_numel(s) / std::max<std::int64_t>(s.back(), 1), s.back()}; }

  // ---- gated: mul(act(matmul(A, Wg)), matmul(A, Wu)) ---------------------------------
  void try_gated(size_t k) {
    const Node& mul = node(k);
    if (claimed_[k] || mul.op != "mul" || mul.inputs.size() != 2) return;
    for (int order = 0; order < 2; ++order) {
      const std::string& act_v = mul.inputs[static_cast<size_t>(order)];
      const std::string& up_v = mul.inputs[static_cast<size_t>(1 - order)];
      auto act = free_producer(act_v);
      auto up = free_producer(up_v);
      if (!act || !up || !single_use(act_v) || !single_use(up_v) || !is_epilogue_unary(node(*act).op)) continue;
      const std::string& g_v = node(*act).inputs[0];
      auto gate = free_producer(g_v);
      if (!gate || !single_use(g_v) || node(*gate).op != "matmul" || node(*up).op != "matmul") continue;
      if (reserved_[*gate] || reserved_[*up]) continue;
      const Node &mg = node(*gate), &mu = node(*up);
      if (mg.inputs[0] != mu.inputs[0] || !is_f32(mg.inputs[0]) || !is_f32(mg.inputs[1]) || !is_f32(mu.inputs[1]))
        continue;
      const Shape &a = *shape_of(mg.inputs[0]), &wg = *shape_of(mg.inputs[1]), &wu = *shape_of(mu.inputs[1]);
      if (a.size() < 2 || wg.size() != 2 || wg != wu) continue;
      auto region = GatedMatmulRegion::make({.gate_act = node(*act).op, .storage = "f32"});
      if (!region) continue;
      add_region(*region, {k, *act, *gate, *up}, {mg.inputs[0], mg.inputs[1], mu.inputs[1]}, {as_matrix(a), wg, wu},
                 mul.outputs[0], node(*act).op + "(matmul) * matmul");
      return;
    }
  }

  // ---- matmul chains ---------------------------------------------------------------------
  void try_matmul_chain(size_t k) {
    const Node& mm = node(k);
    if (claimed_[k] || reserved_[k] || mm.op != "matmul") return;
    if (!is_f32(mm.inputs[0]) || !is_f32(mm.inputs[1])) return;
    const Shape &a_shape = *shape_of(mm.inputs[0]), &b_shape = *shape_of(mm.inputs[1]);
    if (a_shape.size() < 2 || b_shape.size() != 2) return;
    std::vector<size_t> nodes{k};
    std::string ops = "matmul";
    // Walk back from A over single-use unary ops.
    std::vector<std::string> prologue;
    std::string a = mm.inputs[0];
    while (single_use(a)) {
      auto p = free_producer(a);
      if (!p || !is_epilogue_unary(node(*p).op) || reserved_[*p]) break;
      prologue.insert(prologue.begin(), node(*p).op);
      nodes.push_back(*p);
      a = node(*p).inputs[0];
    }
    for (auto it = prologue.rbegin(); it != prologue.rend(); ++it) ops = *it + "(" + ops + ")";
    // Walk forward over single-use epilogue ops.
    const std::int64_t N = b_shape[1];
    std::string cur = mm.outputs[0], bias, residual, reduction = "none";
    std::vector<std::string> epilogue;
    double eps = 1e-6;
    while (auto c = sole_consumer(cur)) {
      const Node& n = node(*c);
      if (reserved_[*c]) break;
      if (is_epilogue_unary(n.op) && residual.empty()) {
        epilogue.push_back(n.op);
      } else if (n.op == "add" && n.inputs.size() == 2 && residual.empty()) {
        const std::string& o = n.inputs[0] == cur ? n.inputs[1] : n.inputs[0];
        if (o == cur || !is_f32(o)) break;
        const Shape& os = *shape_of(o);
        if (os == Shape{N} || os == Shape{1, N}) {
          if (!bias.empty()) break; // stop before a second bias
          bias = o;
          epilogue.push_back("bias");
        } else if (os == *shape_of(cur)) {
          residual = o;
        } else {
          break;
        }
      } else if ((n.op == "softmax" || n.op == "rmsnorm") && residual.empty() && last_axis(n, cur) &&
                 only_first_output_used(n) && plain_norm(n)) {
        reduction = n.op;
        eps = n.attr_float("epsilon", 1e-5);
      } else {
        break;
      }
      nodes.push_back(*c);
      ops += " + " + (n.op == "add" ? (residual.empty() ? std::string("bias") : std::string("residual")) : n.op);
      cur = n.outputs[0];
      if (reduction != "none") break;
    }
    const Shape& a_raw = *shape_of(a);
    std::vector<std::string> operands{a, mm.inputs[1]};
    std::vector<Shape> shapes{as_matrix(a_raw), b_shape};
    const std::int64_t M = shapes[0][0];
    if (!bias.empty()) {
      operands.push_back(bias);
      shapes.push_back({N});
    }
    if (!residual.empty()) {
      operands.push_back(residual);
      shapes.push_back({M, N});
    }
    if (prologue.empty() && epilogue.empty() && residual.empty() && reduction == "none") {
      auto region = MatmulRegion::make({});
      if (region) add_region(*region, nodes, operands, shapes, cur, "matmul");
      return;
    }
    FusedSpec spec;
    spec.prologue = prologue;
    spec.epilogue = epilogue;
    spec.residual = !residual.empty();
    spec.reduction = reduction;
    spec.eps = eps;
    auto region = FusedRegion::make(spec);
    if (region) add_region(*region, nodes, operands, shapes, cur, ops);
  }

  // A norm node with no affine operands (or an identity one) can be a GEMM's reduction.
  bool plain_norm(const Node& n) const {
    if (n.op == "softmax") return true;
    for (size_t k = 1; k < n.inputs.size(); ++k) {
      if (n.inputs[k].empty()) continue;
      auto it = g_.constants.find(n.inputs[k]);
      if (it == g_.constants.end() || it->second.type != ElemType::f32) return false;
      const float want = k == 1 ? 1.0f : 0.0f;
      for (float v : it->second.f)
        if (v != want) return false;
    }
    return true;
  }

  // ---- norm chains: [add(x, r)] → norm → [mul gamma] → [add beta] -------------------------
  void try_norm_chain(size_t k) {
    const Node& nn = node(k);
    if (claimed_[k] || reserved_[k]) return;
    if (nn.op != "layer_norm" && nn.op != "rmsnorm" && nn.op != "softmax") return;
    const std::string& x = nn.inputs[0];
    if (!is_f32(x) || !last_axis(nn, x) || !only_first_output_used(nn)) return;
    const Shape& xs = *shape_of(x);
    const Shape row{xs.back()};
    std::vector<size_t> nodes{k};
    std::vector<std::string> operands{x};
    std::vector<Shape> shapes{xs};
    NormChainSpec spec;
    spec.norm = nn.op;
    spec.eps = nn.attr_float("epsilon", 1e-5);
    std::string ops = nn.op;
    if (auto p = free_producer(x); p && single_use(x) && node(*p).op == "add" && !reserved_[*p]) {
      const Node& add = node(*p);
      if (is_f32(add.inputs[0]) && is_f32(add.inputs[1]) && *shape_of(add.inputs[0]) == xs &&
          *shape_of(add.inputs[1]) == xs) {
        spec.add_residual = true;
        operands = {add.inputs[0], add.inputs[1]};
        shapes = {xs, xs};
        nodes.push_back(*p);
        ops = "add + " + ops;
      }
    }
    std::string gamma = nn.inputs.size() > 1 ? nn.inputs[1] : "";
    std::string beta = nn.inputs.size() > 2 ? nn.inputs[2] : "";
    auto vec_ok = [&](const std::string& v) { return is_f32(v) && *shape_of(v) == row; };
    if ((!gamma.empty() && !vec_ok(gamma)) || (!beta.empty() && !vec_ok(beta))) return;
    std::string cur = nn.outputs[0];
    for (const char* want : {"mul", "add"}) {
      std::string& slot = std::string(want) == "mul" ? gamma : beta;
      if (!slot.empty() || (std::string(want) == "add" && nn.op == "softmax" && gamma.empty())) continue;
      auto c = sole_consumer(cur);
      if (!c || reserved_[*c] || node(*c).op != want) break;
      const Node& n = node(*c);
      const std::string& o = n.inputs[0] == cur ? n.inputs[1] : n.inputs[0];
      if (!vec_ok(o)) break;
      slot = o;
      nodes.push_back(*c);
      ops += std::string(" + ") + (std::string(want) == "mul" ? "mul gamma" : "add beta");
      cur = n.outputs[0];
    }
    if (!gamma.empty()) {
      spec.weight = true;
      operands.push_back(gamma);
      shapes.push_back(row);
      if (ops.find("gamma") == std::string::npos) ops += " (gamma)";
    }
    if (!beta.empty()) {
      spec.bias = true;
      operands.push_back(beta);
      shapes.push_back(row);
      if (ops.find("beta") == std::string::npos) ops += " (beta)";
    }
    if (!spec.add_residual && !spec.weight && !spec.bias) return; // nothing beyond the bare norm
    auto region = NormChainRegion::make(spec);
    if (region) add_region(*region, nodes, operands, shapes, cur, ops);
  }

  // ---- attention: matmul(Q, Kᵀ) → [scale by a scalar constant] → softmax → matmul(P, V) ----
  struct AttentionMatch {
    std::vector<size_t> nodes;
    std::string q, k, v, out;
    bool k_transposed;
    double scale;
    bool causal = false;
  };

  std::optional<AttentionMatch> match_attention(size_t pv) const {
    const Node& n = node(pv);
    if (claimed_[pv]) return std::nullopt;
    if (n.op == "attention") {
      // The ONNX op itself, when it needs nothing the region lacks.
      for (size_t k = 3; k < n.inputs.size(); ++k)
        if (!n.inputs[k].empty()) return std::nullopt;
      if (n.attr_float("softcap", 0.0) != 0.0 || n.attr_int("qk_matmul_output_mode", 0) != 0 ||
          !only_first_output_used(n))
        return std::nullopt;
      for (size_t k = 0; k < 3; ++k)
        if (!is_f32(n.inputs[k]) || shape_of(n.inputs[k])->size() != 4) return std::nullopt;
      const double d = static_cast<double>(shape_of(n.inputs[0])->back());
      return AttentionMatch{{pv},
                            n.inputs[0],
                            n.inputs[1],
                            n.inputs[2],
                            n.outputs[0],
                            false,
                            n.attr_float("scale", 1.0 / std::sqrt(d)),
                            n.attr_int("is_causal", 0) != 0};
    }
    if (n.op != "matmul") return std::nullopt;
    AttentionMatch m;
    m.nodes.push_back(pv);
    m.v = n.inputs[1];
    m.out = n.outputs[0];
    const std::string& p = n.inputs[0];
    auto sm = free_producer(p);
    if (!sm || !single_use(p) || node(*sm).op != "softmax" || !last_axis(node(*sm), p)) return std::nullopt;
    m.nodes.push_back(*sm);
    std::string s = node(*sm).inputs[0];
    m.scale = 1.0;
    if (auto sc = free_producer(s); sc && single_use(s) && (node(*sc).op == "mul" || node(*sc).op == "div")) {
      const Node& sn = node(*sc);
      auto c1 = scalar_const(sn.inputs[1]);
      auto c0 = sn.op == "mul" ? scalar_const(sn.inputs[0]) : std::nullopt;
      if (c1 || c0) {
        m.scale = sn.op == "div" ? 1.0 / *c1 : (c1 ? *c1 : *c0);
        s = c1 ? sn.inputs[0] : sn.inputs[1];
        m.nodes.push_back(*sc);
      }
    }
    auto qk = free_producer(s);
    if (!qk || !single_use(s) || node(*qk).op != "matmul") return std::nullopt;
    m.nodes.push_back(*qk);
    m.q = node(*qk).inputs[0];
    const std::string& kt = node(*qk).inputs[1];
    m.k = kt;
    m.k_transposed = true;
    if (auto tr = free_producer(kt); tr && single_use(kt) && node(*tr).op == "transpose") {
      const Shape* ks = shape_of(node(*tr).inputs[0]);
      auto perm = node(*tr).attr_ints("perm");
      if (ks && perm && perm->size() == ks->size() && ks->size() >= 2) {
        std::vector<std::int64_t> want;
        for (size_t d = 0; d + 2 < ks->size(); ++d) want.push_back(static_cast<std::int64_t>(d));
        want.push_back(static_cast<std::int64_t>(ks->size()) - 1);
        want.push_back(static_cast<std::int64_t>(ks->size()) - 2);
        if (*perm == want) {
          m.k = node(*tr).inputs[0];
          m.k_transposed = false;
          m.nodes.push_back(*tr);
        }
      }
    }
    for (const auto* v : {&m.q, &m.k, &m.v})
      if (!is_f32(*v)) return std::nullopt;
    const Shape &q = *shape_of(m.q), &k = *shape_of(m.k), &v = *shape_of(m.v);
    if (q.size() < 2 || q.size() > 4 || k.size() != q.size() || v.size() != q.size()) return std::nullopt;
    const size_t r = q.size();
    const std::int64_t kd = m.k_transposed ? k[r - 2] : k[r - 1], nk = m.k_transposed ? k[r - 1] : k[r - 2];
    if (kd != q[r - 1] || v[r - 2] != nk) return std::nullopt;
    // Leading dims: equal batch; heads equal or K/V shared (1), which numpy and GQA read alike.
    for (size_t d = 0; d + 2 < r; ++d) {
      const bool head_axis = d + 3 == r;
      if (k[d] != v[d]) return std::nullopt;
      if (k[d] != q[d] && !(head_axis && k[d] == 1)) return std::nullopt;
    }
    return m;
  }

  void try_attention(size_t k) {
    auto m = match_attention(k);
    if (!m) return;
    AttentionSpec spec;
    spec.scale = m->scale;
    spec.causal = m->causal;
    spec.k_transposed = m->k_transposed;
    auto region = AttentionRegion::make(spec);
    if (!region) return;
    std::string ops = node(k).op == "attention" ? "attention op" : "matmul(Q, K^T)";
    if (node(k).op != "attention") {
      if (std::find_if(m->nodes.begin(), m->nodes.end(),
                       [&](size_t n) { return node(n).op == "mul" || node(n).op == "div"; }) != m->nodes.end())
        ops += " * scale";
      ops += " + softmax + matmul(P, V)";
    }
    add_region(*region, m->nodes, {m->q, m->k, m->v}, {*shape_of(m->q), *shape_of(m->k), *shape_of(m->v)}, m->out, ops);
  }

  // ---- pointwise DAGs (and a last-axis reduction after one) ---------------------------------
  void try_pointwise(size_t root) {
    if (claimed_[root] || reserved_[root] || !is_pointwise(node(root).op) || !is_f32(node(root).outputs[0])) return;
    std::vector<size_t> comp{root};
    std::set<size_t> in_comp{root};
    for (bool grew = true; grew && comp.size() < static_cast<size_t>(PointwiseGraph::kMaxOps);) {
      grew = false;
      for (size_t i = 0; i < comp.size() && comp.size() < static_cast<size_t>(PointwiseGraph::kMaxOps); ++i) {
        for (const auto& in : node(comp[i]).inputs) {
          auto p = free_producer(in);
          if (!p || in_comp.count(*p) || reserved_[*p] || !is_pointwise(node(*p).op) || !is_f32(in) ||
              outputs_.count(in))
            continue;
          bool all_inside = true;
          for (auto c : consumers_.at(in)) all_inside = all_inside && in_comp.count(c);
          if (!all_inside) continue;
          comp.push_back(*p);
          in_comp.insert(*p);
          grew = true;
        }
      }
    }
    std::sort(comp.begin(), comp.end());
    const std::string out = node(root).outputs[0];
    // A reduction over the last axis right after the DAG joins it.
    std::optional<size_t> reduce;
    if (auto c = sole_consumer(out); c && !reserved_[*c]) {
      const Node& r = node(*c);
      const auto rank = static_cast<std::int64_t>(shape_of(out)->size());
      auto axes = r.inputs.size() > 1 && !r.inputs[1].empty()
                      ? (g_.constants.count(r.inputs[1]) ? std::optional(g_.constants.at(r.inputs[1]).i) : std::nullopt)
                      : r.attr_ints("axes");
      const bool last = axes && axes->size() == 1 && ((*axes)[0] == -1 || (*axes)[0] == rank - 1) && rank >= 1;
      if (last && (r.op == "reduce_sum" || r.op == "reduce_mean" || r.op == "reduce_max" || r.op == "reduce_min"))
        reduce = *c;
    }
    if (comp.size() < 2 && !reduce) return;
    PointwiseSpec spec;
    std::vector<std::string> operands;
    std::vector<Shape> shapes;
    std::map<std::string, std::string> ids; // graph value → DAG id
    auto id_of = [&](const std::string& v) -> PointwiseArgSpec {
      if (auto c = scalar_const(v)) return *c;
      if (auto it = ids.find(v); it != ids.end()) return it->second;
      const std::string id = "in" + std::to_string(operands.size());
      ids[v] = id;
      operands.push_back(v);
      shapes.push_back(*shape_of(v));
      spec.inputs.push_back(id);
      return id;
    };
    std::set<std::string> produced;
    for (auto n : comp) produced.insert(node(n).outputs[0]);
    for (auto n : comp) {
      const Node& nd = node(n);
      PointwiseOpSpec op;
      op.op = nd.op;
      for (const auto& in : nd.inputs) op.args.push_back(produced.count(in) ? PointwiseArgSpec(ids.at(in)) : id_of(in));
      op.out = "v" + std::to_string(n);
      ids[nd.outputs[0]] = op.out;
      spec.ops.push_back(std::move(op));
    }
    spec.output = ids.at(out);
    if (spec.inputs.empty() || spec.inputs.size() > static_cast<size_t>(PointwiseGraph::kMaxInputs)) return;
    std::string ops;
    for (auto n : comp) ops += (ops.empty() ? "" : " + ") + node(n).op;
    if (reduce) {
      static const std::map<std::string, std::string> names = {
          {"reduce_sum", "sum"}, {"reduce_mean", "mean"}, {"reduce_max", "amax"}, {"reduce_min", "amin"}};
      // The region's inputs must broadcast to the DAG output's shape.
      auto region = PointwiseReduceRegion::make({spec, names.at(node(*reduce).op)});
      if (!region) return;
      comp.push_back(*reduce);
      add_region(*region, comp, operands, shapes, node(*reduce).outputs[0], ops + " -> " + node(*reduce).op);
      return;
    }
    auto region = PointwiseGraphRegion::make(spec);
    if (region) add_region(*region, comp, operands, shapes, out, ops);
  }

  std::string why_unfused(size_t k) const {
    const Node& n = node(k);
    // No pass matches a "ref." op (none is in the op table): it always lands here.
    if (is_reference_op(n.op)) return "reference evaluator (--allow-reference)";
    if (!n.outputs.empty() && !is_f32(n.outputs[0]))
      return "computes " +
             std::string(types_.count(n.outputs[0]) ? elem_type_name(types_.at(n.outputs[0]).type) : "?") +
             " values (shapes, indices, masks) or an empty tensor: runs natively";
    if (n.op == "matmul") {
      const Shape* b = shape_of(n.inputs[1]);
      if (b && b->size() != 2)
        return "batched matmul (B has rank " + std::to_string(b->size()) + "): GEMM regions take a [K, N] weight";
      return "matmul whose A is not a matrix";
    }
    if (n.op == "layer_norm" || n.op == "rmsnorm" || n.op == "softmax")
      return last_axis(n, n.inputs[0]) ? "bare norm with nothing to fuse, or its gamma/beta are not [N] vectors"
                                       : "normalises over more than the last axis";
    if (n.op == "attention")
      return "attention with a mask, past KV, softcap, 3-D heads or extra outputs: the attention region has none of "
             "these";
    if (is_pointwise(n.op)) {
      const auto& out = n.outputs[0];
      if (!single_use(out) && consumers_.count(out) && consumers_.at(out).size() > 1)
        return "lone pointwise op whose result has " + std::to_string(consumers_.at(out).size()) + " consumers";
      return "lone pointwise op (a pointwise region needs 2-32 ops with one exit)";
    }
    if (n.op.rfind("reduce_", 0) == 0)
      return "reduction not over the last axis alone, or with no pointwise op before it";
    return "no region kind covers '" + n.op + "': runs natively";
  }
};

} // namespace

Discovery discover_regions(const Graph& graph, const std::map<std::string, ValueType>& types) {
  return Discoverer(graph, types).run();
}

std::string format_discovery(const Graph& g, const Discovery& d) {
  std::ostringstream os;
  os << "regions (" << d.regions.size() << "):\n";
  for (size_t k = 0; k < d.regions.size(); ++k) {
    const auto& r = d.regions[k];
    os << "  #" << k + 1 << " " << region_kind_name(region_kind(r.region)) << ": " << r.ops << "  (" << r.nodes.size()
       << " op" << (r.nodes.size() == 1 ? "" : "s") << "; operands";
    for (size_t i = 0; i < r.operands.size(); ++i) os << " " << r.operands[i] << shape_str(r.operand_shapes[i]);
    os << " -> " << r.output << shape_str(r.output_shape) << ")\n";
  }
  os << "unfused ops (" << d.unfused.size() << "):\n";
  for (const auto& u : d.unfused) os << "  " << g.nodes[u.node].label() << ": " << u.reason << "\n";
  return os.str();
}

} // namespace fusor
