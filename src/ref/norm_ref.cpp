// Row normalisations (the table's four steps) and the norm-chain region built on them.
#include <limits>

#include "ref/ref_kernels.hpp"

namespace fusor::ref_detail {

void apply_row_norm(RowNorm norm, double eps, double* row, std::int64_t n) {
  if (n == 0) return;
  const RowNormInfo& info = row_norm_info(norm);
  double c = 0.0;
  switch (info.centre) {
  case RowCentre::zero: break;
  case RowCentre::mean:
    for (std::int64_t i = 0; i < n; ++i) c += row[i];
    c /= static_cast<double>(n);
    break;
  case RowCentre::max: {
    // NaN-propagating maximum, so a NaN anywhere makes the whole row NaN.
    const auto max = op_info(Op::maximum).reference;
    c = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < n; ++i) c = max(c, row[i]);
    break;
  }
  }
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += info.accumulate(row[i] - c);
  const double r = info.factor(s, static_cast<double>(n), eps);
  for (std::int64_t i = 0; i < n; ++i) row[i] = info.output(row[i] - c, r);
}

TensorF64 eval_norm_chain(const NormChainRegion& region, const ProblemShape& p, Operands ops) {
  TensorF64 out{p.output, ops[0].data};
  const std::int64_t N = p.row_len;
  size_t next = 1;
  if (region.add_residual()) {
    const auto add = op_info(Op::add).reference;
    const std::vector<double>& res = ops[next++].data;
    for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = add(out.data[i], res[i]);
  }
  const double* gamma = region.weight() ? ops[next++].data.data() : nullptr;
  const double* beta = region.bias() ? ops[next++].data.data() : nullptr;
  const auto mul = op_info(Op::mul).reference;
  const auto add = op_info(Op::add).reference;
  for (std::int64_t row = 0; row < p.rows; ++row) {
    double* x = out.data.data() + row * N;
    apply_row_norm(region.norm(), region.eps(), x, N);
    for (std::int64_t n = 0; n < N; ++n) {
      if (gamma) x[n] = mul(x[n], gamma[n]);
      if (beta) x[n] = add(x[n], beta[n]);
    }
  }
  return out;
}

} // namespace fusor::ref_detail
