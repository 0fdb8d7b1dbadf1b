// Attention: O = softmax(scale · Q Kᵀ + causal mask) V per (batch, query head), with
// grouped-query heads (query head h reads KV head h / (H / Hkv)).
#include <algorithm>

#include "ref/ref_kernels.hpp"

namespace fusor::ref_detail {

TensorF64 eval_attention(const AttentionRegion& region, const ProblemShape& p, Operands ops) {
  const std::int64_t M = p.M, Nk = p.Nk, D = p.D, Dv = p.Dv, H = p.heads, Hkv = p.kv_heads;
  const std::int64_t group = H / Hkv;
  TensorF64 out{p.output, std::vector<double>(static_cast<size_t>(shape_numel(p.output)), 0.0)};
  std::vector<double> q_row(static_cast<size_t>(D)), scores(static_cast<size_t>(Nk));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t kvh = b * Hkv + h / group;
      const double* q = ops[0].data.data() + (b * H + h) * M * D;
      // K in natural [Nk, D] order so each score is a contiguous dot product.
      const std::vector<double> k = natural(ops[1].data.data() + kvh * Nk * D, Nk, D, region.k_transposed());
      const double* v = ops[2].data.data() + kvh * Nk * Dv;
      double* o = out.data.data() + (b * H + h) * M * Dv;
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t d = 0; d < D; ++d) q_row[d] = region.q_transposed() ? q[d * M + m] : q[m * D + d];
        // Top-left causal alignment: query m sees keys 0..m, a prefix of the row.
        const std::int64_t visible = region.causal() ? std::min(m + 1, Nk) : Nk;
        for (std::int64_t n = 0; n < visible; ++n) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < D; ++d) dot += q_row[d] * k[n * D + d];
          scores[n] = region.scale() * dot;
        }
        apply_row_norm(RowNorm::softmax, 0.0, scores.data(), visible);
        // A row with no visible key (Nk == 0) stays all zeros, as SPEC §1.3 asks.
        double* orow = o + m * Dv;
        for (std::int64_t n = 0; n < visible; ++n)
          for (std::int64_t j = 0; j < Dv; ++j) orow[j] += scores[n] * v[n * Dv + j];
      }
    }
  return out;
}

} // namespace fusor::ref_detail
