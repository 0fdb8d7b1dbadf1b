// Contractions, row norms, reductions and attention as plain C++ loops. Every formula
// (softmax, layer_norm, rmsnorm, the reductions, tanh for softcap) comes from the op
// table in src/ir/ops.cpp; these loops only walk the data.
#include <algorithm>
#include <cmath>
#include <limits>

#include "fusor/ops.hpp"
#include "graph/kernels.hpp"

namespace fusor::graph_kernels {
namespace {

constexpr std::string_view kNames[] = {"matmul",      "softmax",    "layer_norm", "rmsnorm",  "reduce_sum",
                                       "reduce_mean", "reduce_max", "reduce_min", "attention"};

// ---- matmul: numpy semantics (1-D operands promoted, batch dims broadcast) ----------------
Outs run_matmul(const Node& node, const GraphTensor& a, const GraphTensor& b) {
  FUSOR_TRY(want_type(node, a, ElemType::f32, "A"));
  FUSOR_TRY(want_type(node, b, ElemType::f32, "B"));
  if (a.shape.empty() || b.shape.empty()) return shape(node, "matmul operands must have rank >= 1");
  Shape as = a.shape, bs = b.shape;
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const std::int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K)
    return shape(node, "contraction mismatch: A " + shape_str(a.shape) + " and B " + shape_str(b.shape));
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  FUSOR_TRY_ASSIGN(Broadcast bc, broadcast(node, {a_batch, b_batch}));
  Shape out = bc.out;
  if (!a1) out.push_back(M);
  if (!b1) out.push_back(N);
  GraphTensor y = GraphTensor::zeros(ElemType::f32, out);
  std::vector<float> acc(static_cast<size_t>(N));
  bc.for_each([&](std::int64_t batch, const std::int64_t* off) {
    const float* pa = a.f.data() + off[0] * M * K;
    const float* pb = b.f.data() + off[1] * K * N;
    float* py = y.f.data() + batch * M * N;
    for (std::int64_t m = 0; m < M; ++m) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::int64_t k = 0; k < K; ++k) {
        const float av = pa[m * K + k];
        const float* brow = pb + k * N;
        for (std::int64_t n = 0; n < N; ++n) acc[static_cast<size_t>(n)] += av * brow[n];
      }
      std::copy(acc.begin(), acc.end(), py + m * N);
    }
  });
  return one(std::move(y));
}

// ---- row norms through the table's four steps ------------------------------------------
struct RowStats {
  double centre, factor;
};

// Normalises `n` values at x[0], x[stride], ... into y (same strides) with table row `norm`.
RowStats norm_row(const RowNormInfo& info, double eps, const float* x, float* y, std::int64_t n, std::int64_t stride) {
  double c = 0.0;
  if (info.centre == RowCentre::mean) {
    for (std::int64_t k = 0; k < n; ++k) c += x[k * stride];
    c /= static_cast<double>(n);
  } else if (info.centre == RowCentre::max) {
    c = -std::numeric_limits<double>::infinity();
    for (std::int64_t k = 0; k < n; ++k) c = std::max(c, static_cast<double>(x[k * stride]));
  }
  double s = 0.0;
  for (std::int64_t k = 0; k < n; ++k) s += info.accumulate(x[k * stride] - c);
  const double r = info.factor(s, static_cast<double>(n), eps);
  for (std::int64_t k = 0; k < n; ++k) y[k * stride] = static_cast<float>(info.output(x[k * stride] - c, r));
  return {c, r};
}

Outs run_softmax(const Node& node, const GraphTensor& x) {
  FUSOR_TRY(want_type(node, x, ElemType::f32, "input"));
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  if (rank == 0) return one(GraphTensor::f32({}, {1.0f}));
  FUSOR_TRY_ASSIGN(std::int64_t axis, norm_axis(node, node.attr_int("axis", -1), rank));
  const std::int64_t n = x.shape[static_cast<size_t>(axis)];
  const std::int64_t inner = shape_numel(Shape(x.shape.begin() + axis + 1, x.shape.end()));
  const std::int64_t outer = shape_numel(Shape(x.shape.begin(), x.shape.begin() + axis));
  GraphTensor y = x;
  const RowNormInfo& info = row_norm_info(RowNorm::softmax);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i)
      norm_row(info, 0.0, x.f.data() + o * n * inner + i, y.f.data() + o * n * inner + i, n, inner);
  return one(std::move(y));
}

// layer_norm(x, gamma, beta) and rmsnorm(x, gamma): normalise over the axes [axis, rank),
// then scale (and shift) by operands broadcast against those trailing axes.
Outs run_norm(const Node& node, Ins in, RowNorm norm) {
  FUSOR_TRY(arity(node, in, 1, 3));
  const GraphTensor& x = *in[0];
  FUSOR_TRY(want_type(node, x, ElemType::f32, "X"));
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  FUSOR_TRY_ASSIGN(std::int64_t axis, norm_axis(node, node.attr_int("axis", -1), rank));
  const Shape tail(x.shape.begin() + axis, x.shape.end());
  const std::int64_t n = shape_numel(tail), rows = shape_numel(Shape(x.shape.begin(), x.shape.begin() + axis));
  const double eps = node.attr_float("epsilon", 1e-5);
  GraphTensor y = x;
  Shape stat_shape(x.shape.begin(), x.shape.begin() + axis);
  stat_shape.resize(x.shape.size(), 1);
  GraphTensor mean = GraphTensor::zeros(ElemType::f32, stat_shape), inv = mean;
  const RowNormInfo& info = row_norm_info(norm);
  for (std::int64_t r = 0; r < rows; ++r) {
    const RowStats st = norm_row(info, eps, x.f.data() + r * n, y.f.data() + r * n, n, 1);
    mean.f[static_cast<size_t>(r)] = static_cast<float>(st.centre);
    inv.f[static_cast<size_t>(r)] = static_cast<float>(st.factor);
  }
  const OpInfo& mul = op_info(Op::mul);
  const OpInfo& add = op_info(Op::add);
  for (size_t k = 1; k < 3; ++k) {
    const GraphTensor* p = opt(in, k);
    if (!p) continue;
    FUSOR_TRY(want_type(node, *p, ElemType::f32, k == 1 ? "scale" : "bias"));
    FUSOR_TRY_ASSIGN(Broadcast bc, broadcast(node, {tail, p->shape}));
    if (bc.out != tail)
      return shape(node, std::string(k == 1 ? "scale " : "bias ") + shape_str(p->shape) +
                             " does not broadcast to the normalised shape " + shape_str(tail));
    const OpInfo& f = k == 1 ? mul : add;
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = y.f.data() + r * n;
      bc.for_each([&](std::int64_t j, const std::int64_t* off) {
        row[j] = static_cast<float>(f.reference(row[j], p->f[static_cast<size_t>(off[1])]));
      });
    }
  }
  return outs(std::move(y), std::move(mean), std::move(inv));
}

// ---- reductions over any set of axes -----------------------------------------------------
Outs run_reduce(const Node& node, Ins in, ReduceOp op) {
  FUSOR_TRY(arity(node, in, 1, 2));
  const GraphTensor& x = *in[0];
  const auto rank = static_cast<std::int64_t>(x.shape.size());
  std::vector<std::int64_t> axes;
  if (const GraphTensor* a = opt(in, 1)) {
    FUSOR_TRY_ASSIGN(axes, ints_of(node, *a, "axes"));
  } else if (auto attr = node.attr_ints("axes")) {
    axes = *attr;
  }
  const bool keep = node.attr_int("keepdims", 1) != 0;
  if (axes.empty() && node.attr_int("noop_with_empty_axes", 0) != 0) return one(x);
  std::vector<bool> reduced(x.shape.size(), axes.empty());
  for (auto a : axes) {
    FUSOR_TRY_ASSIGN(std::int64_t ax, norm_axis(node, a, rank));
    reduced[static_cast<size_t>(ax)] = true;
  }
  Shape out, kept;
  std::int64_t count = 1;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (reduced[d]) {
      count *= x.shape[d];
      if (keep) out.push_back(1);
    } else {
      out.push_back(x.shape[d]);
    }
    kept.push_back(reduced[d] ? 1 : x.shape[d]);
  }
  const ReduceInfo& info = reduce_info(op);
  // Every input element maps to the output element of its kept coordinates.
  Broadcast map;
  map.out = x.shape;
  auto ks = strides_of(kept);
  for (size_t d = 0; d < kept.size(); ++d)
    if (reduced[d]) ks[d] = 0;
  map.strides.push_back(ks);
  std::vector<double> acc(static_cast<size_t>(shape_numel(kept)), info.init);
  map.for_each([&](std::int64_t k, const std::int64_t* off) {
    auto& a = acc[static_cast<size_t>(off[0])];
    a = info.combine(a, x.at(k));
  });
  GraphTensor y = GraphTensor::zeros(x.type, out);
  for (size_t k = 0; k < acc.size(); ++k) {
    const double v = info.finish(acc[k], static_cast<double>(count));
    if (x.type == ElemType::f32)
      y.f[k] = static_cast<float>(v);
    else
      y.i[k] = static_cast<std::int64_t>(v);
  }
  return one(std::move(y));
}

// ---- attention (ONNX Attention-23/24 semantics) ---------------------------------------------
// Y = softmax(softcap(scale · Q Kᵀ) + bias) V per (batch, head), bias = mask + causal +
// padding; GQA repeats each KV head over q_heads / kv_heads query heads; a row whose bias is
// all -inf outputs zeros. 3-D inputs are [B, S, heads·D].
Expected<GraphTensor> to_4d(const Node& node, const GraphTensor& x, std::int64_t heads, const char* what) {
  if (x.shape.size() == 4) return x;
  if (x.shape.size() != 3) return shape(node, std::string(what) + " must be 3-D or 4-D, got " + shape_str(x.shape));
  if (heads <= 0 || x.shape[2] % heads != 0)
    return shape(node, std::string(what) + " " + shape_str(x.shape) + ": hidden size is not a multiple of " +
                           std::to_string(heads) + " heads (q_num_heads/kv_num_heads)");
  const std::int64_t B = x.shape[0], S = x.shape[1], D = x.shape[2] / heads;
  GraphTensor y = GraphTensor::zeros(ElemType::f32, {B, heads, S, D});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < heads; ++h)
        std::copy_n(x.f.data() + ((b * S + s) * heads + h) * D, D, y.f.data() + ((b * heads + h) * S + s) * D);
  return y;
}

GraphTensor concat_seq(const GraphTensor& past, const GraphTensor& cur) {
  const std::int64_t B = cur.shape[0], H = cur.shape[1], P = past.shape[2], S = cur.shape[2], D = cur.shape[3];
  GraphTensor y = GraphTensor::zeros(ElemType::f32, {B, H, P + S, D});
  for (std::int64_t bh = 0; bh < B * H; ++bh) {
    std::copy_n(past.f.data() + bh * P * D, P * D, y.f.data() + bh * (P + S) * D);
    std::copy_n(cur.f.data() + bh * S * D, S * D, y.f.data() + bh * (P + S) * D + P * D);
  }
  return y;
}

Outs run_attention(const Node& node, Ins in) {
  FUSOR_TRY(arity(node, in, 3, 7));
  for (size_t k = 0; k < 6; ++k)
    if (const GraphTensor* t = opt(in, k); t && !(k == 3 && t->type == ElemType::boolean))
      FUSOR_TRY(want_type(node, *t, ElemType::f32, "Q/K/V/mask/past"));
  const bool three_d = in[0]->shape.size() == 3;
  const std::int64_t qh_attr = node.attr_int("q_num_heads", 0), kvh_attr = node.attr_int("kv_num_heads", 0);
  FUSOR_TRY_ASSIGN(GraphTensor Q, to_4d(node, *in[0], qh_attr, "Q"));
  FUSOR_TRY_ASSIGN(GraphTensor K, to_4d(node, *in[1], kvh_attr, "K"));
  FUSOR_TRY_ASSIGN(GraphTensor V, to_4d(node, *in[2], kvh_attr, "V"));
  const GraphTensor *mask = opt(in, 3), *past_k = opt(in, 4), *past_v = opt(in, 5), *nonpad = opt(in, 6);
  if ((past_k == nullptr) != (past_v == nullptr)) return bad(node, "past_key and past_value must come together");
  if (past_k) {
    if (past_k->shape.size() != 4 || past_k->shape[0] != K.shape[0] || past_k->shape[1] != K.shape[1] ||
        past_k->shape[3] != K.shape[3] || past_v->shape.size() != 4 || past_v->shape[2] != past_k->shape[2])
      return shape(node, "past_key " + shape_str(past_k->shape) + " / past_value " + shape_str(past_v->shape) +
                             " do not match K " + shape_str(K.shape));
    K = concat_seq(*past_k, K);
    V = concat_seq(*past_v, V);
  }
  const std::int64_t B = Q.shape[0], Hq = Q.shape[1], S = Q.shape[2], D = Q.shape[3];
  const std::int64_t Hkv = K.shape[1], T = K.shape[2], Dv = V.shape[3];
  if (K.shape[0] != B || V.shape[0] != B || K.shape[3] != D || V.shape[1] != Hkv || V.shape[2] != T)
    return shape(node, "Q " + shape_str(Q.shape) + ", K " + shape_str(K.shape) + ", V " + shape_str(V.shape) +
                           " do not fit [B, H, S, D] / [B, Hkv, T, D] / [B, Hkv, T, Dv]");
  if (Hkv < 1 || Hq % Hkv != 0)
    return shape(node, std::to_string(Hkv) + " KV heads do not divide " + std::to_string(Hq) + " query heads");
  const double scale = node.attr_float("scale", 1.0 / std::sqrt(static_cast<double>(D)));
  const double softcap = node.attr_float("softcap", 0.0);
  const bool causal = node.attr_int("is_causal", 0) != 0;
  const std::int64_t mode = node.attr_int("qk_matmul_output_mode", 0);
  const double ninf = -std::numeric_limits<double>::infinity();

  // The additive bias [B, Hq, S, T]: mask (padded to T on the right), causal, padding.
  std::vector<double> bias(static_cast<size_t>(B * Hq * S * T), 0.0);
  if (mask) {
    // Right-align the mask to [B, Hq, S, mt]; columns past mt are masked (ONNX pads them).
    const Shape& ms = mask->shape;
    if (ms.empty() || ms.size() > 4) return shape(node, "attn_mask must have rank 1..4, got " + shape_str(ms));
    Shape m4(4 - ms.size(), 1);
    m4.insert(m4.end(), ms.begin(), ms.end());
    const std::int64_t mt = m4[3];
    const std::int64_t want[3] = {B, Hq, S};
    for (int d = 0; d < 3; ++d)
      if (m4[static_cast<size_t>(d)] != 1 && m4[static_cast<size_t>(d)] != want[d])
        return shape(node, "attn_mask " + shape_str(ms) + " does not broadcast to " + shape_str({B, Hq, S, T}));
    if (mt > T) return shape(node, "attn_mask " + shape_str(ms) + " is longer than the " + std::to_string(T) + " keys");
    const auto st = strides_of(m4);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < Hq; ++h)
        for (std::int64_t s = 0; s < S; ++s) {
          const std::int64_t base =
              (m4[0] == 1 ? 0 : b) * st[0] + (m4[1] == 1 ? 0 : h) * st[1] + (m4[2] == 1 ? 0 : s) * st[2];
          double* row = bias.data() + ((b * Hq + h) * S + s) * T;
          for (std::int64_t t = 0; t < T; ++t) {
            if (t >= mt) {
              row[t] = ninf;
              continue;
            }
            const double v = mask->at(base + t);
            row[t] = mask->type == ElemType::boolean ? (v != 0 ? 0.0 : ninf) : v;
          }
        }
  }
  std::vector<std::int64_t> offsets(static_cast<size_t>(B), past_k ? past_k->shape[2] : 0);
  if (nonpad) {
    if (nonpad->type == ElemType::f32 || nonpad->numel() != B)
      return shape(node, "nonpad_kv_seqlen must be i64 [" + std::to_string(B) + "]");
    for (std::int64_t b = 0; b < B; ++b) offsets[static_cast<size_t>(b)] = nonpad->i[static_cast<size_t>(b)] - S;
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t t = 0; t < T; ++t) {
          double& v = bias[static_cast<size_t>(((b * Hq + h) * S + s) * T + t)];
          if (causal && t > s + offsets[static_cast<size_t>(b)]) v += ninf;
          if (nonpad && t >= nonpad->i[static_cast<size_t>(b)]) v += ninf;
        }

  GraphTensor Y = GraphTensor::zeros(ElemType::f32, {B, Hq, S, Dv});
  GraphTensor QK = GraphTensor::zeros(ElemType::f32, {B, Hq, S, T});
  const RowNormInfo& softmax = row_norm_info(RowNorm::softmax);
  const OpInfo& tanh_op = op_info(Op::tanh);
  std::vector<float> logits(static_cast<size_t>(T)), probs(static_cast<size_t>(T));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t kvh = h / (Hq / Hkv);
      const float* q = Q.f.data() + (b * Hq + h) * S * D;
      const float* k = K.f.data() + (b * Hkv + kvh) * T * D;
      const float* v = V.f.data() + (b * Hkv + kvh) * T * Dv;
      for (std::int64_t s = 0; s < S; ++s) {
        const double* brow = bias.data() + ((b * Hq + h) * S + s) * T;
        float* qk_out = QK.f.data() + ((b * Hq + h) * S + s) * T;
        bool all_masked = true;
        for (std::int64_t t = 0; t < T; ++t) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[s * D + d]) * k[t * D + d];
          double x = dot * scale;
          if (softcap > 0) x = softcap * tanh_op.reference(x / softcap, 0.0);
          if (mode == 0 || mode == 1) qk_out[t] = static_cast<float>(x);
          x += brow[t];
          if (mode == 2) qk_out[t] = static_cast<float>(x);
          logits[static_cast<size_t>(t)] = static_cast<float>(x);
          all_masked = all_masked && brow[t] == ninf;
        }
        float* y = Y.f.data() + ((b * Hq + h) * S + s) * Dv;
        if (all_masked || T == 0) {
          if (mode == 3) std::fill_n(qk_out, T, 0.0f);
          continue; // a row with no visible key outputs zeros
        }
        norm_row(softmax, 0.0, logits.data(), probs.data(), T, 1);
        if (mode == 3) std::copy(probs.begin(), probs.end(), qk_out);
        for (std::int64_t t = 0; t < T; ++t) {
          const double p = probs[static_cast<size_t>(t)];
          for (std::int64_t d = 0; d < Dv; ++d) y[d] = static_cast<float>(y[d] + p * v[t * Dv + d]);
        }
      }
    }
  if (three_d) { // back to [B, S, Hq·Dv]
    GraphTensor y3 = GraphTensor::zeros(ElemType::f32, {B, S, Hq * Dv});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < Hq; ++h)
        for (std::int64_t s = 0; s < S; ++s)
          std::copy_n(Y.f.data() + ((b * Hq + h) * S + s) * Dv, Dv, y3.f.data() + ((b * S + s) * Hq + h) * Dv);
    Y = std::move(y3);
  }
  return outs(std::move(Y), std::move(K), std::move(V), std::move(QK));
}

} // namespace

std::vector<std::string_view> nn_op_names() { return {std::begin(kNames), std::end(kNames)}; }

bool is_nn_op(std::string_view op) { return std::find(std::begin(kNames), std::end(kNames), op) != std::end(kNames); }

Outs run_nn_op(const Node& node, Ins in) {
  const std::string& op = node.op;
  if (op == "matmul") {
    FUSOR_TRY(arity(node, in, 2, 2));
    return run_matmul(node, *in[0], *in[1]);
  }
  if (op == "softmax") {
    FUSOR_TRY(arity(node, in, 1, 1));
    return run_softmax(node, *in[0]);
  }
  if (op == "layer_norm") return run_norm(node, in, RowNorm::layer_norm);
  if (op == "rmsnorm") return run_norm(node, in, RowNorm::rmsnorm);
  if (op == "attention") return run_attention(node, in);
  const std::pair<std::string_view, ReduceOp> reduces[] = {{"reduce_sum", ReduceOp::sum},
                                                           {"reduce_mean", ReduceOp::mean},
                                                           {"reduce_max", ReduceOp::amax},
                                                           {"reduce_min", ReduceOp::amin}};
  for (auto [name, r] : reduces)
    if (op == name) return run_reduce(node, in, r);
  return bad(node, "unknown op");
}

} // namespace fusor::graph_kernels
