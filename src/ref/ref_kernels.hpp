// Internal seams of the reference evaluator: one function per region kind plus the
// loops several kinds share. Operands reach these already checked (check_operands) and
// rounded to the storage dtype, in their raw orientation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fusor/operands.hpp"
#include "fusor/region.hpp"
#include "fusor/tensor.hpp"

namespace fusor::ref_detail {

using Operands = std::span<const TensorF64>;

TensorF64 eval_fused(const FusedRegion& region, const ProblemShape& p, Operands ops);
TensorF64 eval_matmul(const MatmulRegion& region, const ProblemShape& p, Operands ops);
TensorF64 eval_gated(const GatedMatmulRegion& region, const ProblemShape& p, Operands ops);
TensorF64 eval_attention(const AttentionRegion& region, const ProblemShape& p, Operands ops);
TensorF64 eval_pointwise(const PointwiseGraphRegion& region, const ProblemShape& p, Operands ops);
TensorF64 eval_pointwise_reduce(const PointwiseReduceRegion& region, const ProblemShape& p, Operands ops);
TensorF64 eval_norm_chain(const NormChainRegion& region, const ProblemShape& p, Operands ops);

// The natural row-major [rows, cols] copy of `raw`, which is stored as [cols, rows] when
// `transposed`.
std::vector<double> natural(const double* raw, std::int64_t rows, std::int64_t cols, bool transposed);

// C[M,N] = A[M,K] @ B[K,N] on natural row-major arrays, accumulated in double.
std::vector<double> gemm(const double* a, const double* b, std::int64_t M, std::int64_t N, std::int64_t K);

// Replaces row[0, n) by `norm` of it, using the table's four steps (centre, accumulate,
// factor, output); shared by fused reductions, norm chains and attention's softmax.
void apply_row_norm(RowNorm norm, double eps, double* row, std::int64_t n);

} // namespace fusor::ref_detail
