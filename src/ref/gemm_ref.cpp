// GEMM-rooted kinds: fused (prologue → A@B → epilogue → residual → row reduction),
// bare matmul and the gated SwiGLU-style matmul.
#include "ref/ref_kernels.hpp"

namespace fusor::ref_detail {

std::vector<double> natural(const double* raw, std::int64_t rows, std::int64_t cols, bool transposed) {
  if (!transposed) return std::vector<double>(raw, raw + rows * cols);
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (std::int64_t c = 0; c < cols; ++c)
    for (std::int64_t r = 0; r < rows; ++r) out[r * cols + c] = raw[c * rows + r];
  return out;
}

std::vector<double> gemm(const double* a, const double* b, std::int64_t M, std::int64_t N, std::int64_t K) {
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  // i-k-j keeps the inner loop contiguous in B and C. No zero-skipping: 0 * inf must be NaN.
  for (std::int64_t i = 0; i < M; ++i) {
    double* crow = c.data() + i * N;
    for (std::int64_t k = 0; k < K; ++k) {
      const double aik = a[i * K + k];
      const double* brow = b + k * N;
      for (std::int64_t j = 0; j < N; ++j) crow[j] += aik * brow[j];
    }
  }
  return c;
}

TensorF64 eval_fused(const FusedRegion& region, const ProblemShape& p, Operands ops) {
  std::vector<double> a = natural(ops[0].data.data(), p.M, p.K, region.a_layout() == Layout::col_major);
  for (Op op : region.prologue()) {
    const auto f = op_info(op).reference;
    for (double& x : a) x = f(x, 0.0);
  }
  const std::vector<double> b = natural(ops[1].data.data(), p.K, p.N, region.b_layout() == Layout::col_major);
  TensorF64 out{p.output, gemm(a.data(), b.data(), p.M, p.N, p.K)};

  size_t next = 2;
  const double* bias = region.has_bias() ? ops[next++].data.data() : nullptr; // [N] or [1, N]: same data
  for (Op op : region.epilogue()) {
    const auto f = op_info(op).reference;
    for (std::int64_t m = 0; m < p.M; ++m)
      for (std::int64_t n = 0; n < p.N; ++n) {
        double& x = out.data[m * p.N + n];
        x = f(x, op == Op::bias ? bias[n] : 0.0);
      }
  }
  if (region.residual()) {
    const auto add = op_info(Op::add).reference;
    const std::vector<double>& res = ops[next++].data;
    for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = add(out.data[i], res[i]);
  }
  if (auto norm = region.reduction())
    for (std::int64_t m = 0; m < p.M; ++m) apply_row_norm(*norm, region.eps(), out.data.data() + m * p.N, p.N);
  return out;
}

TensorF64 eval_matmul(const MatmulRegion& region, const ProblemShape& p, Operands ops) {
  // Flip by the flags, never by shape: with M == N == K the shape cannot tell.
  const std::vector<double> a = natural(ops[0].data.data(), p.M, p.K, region.transpose_a());
  const std::vector<double> b = natural(ops[1].data.data(), p.K, p.N, region.transpose_b());
  return TensorF64{p.output, gemm(a.data(), b.data(), p.M, p.N, p.K)};
}

TensorF64 eval_gated(const GatedMatmulRegion& region, const ProblemShape& p, Operands ops) {
  const double* a = ops[0].data.data();
  std::vector<double> gate = gemm(a, ops[1].data.data(), p.M, p.N, p.K);
  const std::vector<double> up = gemm(a, ops[2].data.data(), p.M, p.N, p.K);
  const auto act = op_info(region.gate_act()).reference;
  const auto mul = op_info(Op::mul).reference;
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = mul(act(gate[i], 0.0), up[i]);
  return TensorF64{p.output, std::move(gate)};
}

} // namespace fusor::ref_detail
