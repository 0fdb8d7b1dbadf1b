// Operand validation shared by the reference evaluator and every runner: one place
// knows what shapes a region accepts, so lanes never disagree about it.
#pragma once

#include <span>

#include "fusor/error.hpp"
#include "fusor/region.hpp"
#include "fusor/tensor.hpp"

namespace fusor {

// The problem a set of operands describes. Fields irrelevant to a kind stay 0.
struct ProblemShape {
  Shape output;
  // GEMM-rooted kinds (fused, matmul, gated): logical A[M,K] @ B[K,N] (gated: N = H).
  std::int64_t M = 0, N = 0, K = 0;
  // attention: `batch` independent groups of `heads` query heads sharing `kv_heads`
  // KV heads (GQA: heads % kv_heads == 0); per head Q[M,D], K[Nk,D], V[Nk,Dv].
  std::int64_t batch = 0, heads = 0, kv_heads = 0, Nk = 0, D = 0, Dv = 0;
  // row-wise kinds (norm_chain, pointwise_reduce): `rows` rows of length `row_len`.
  std::int64_t rows = 0, row_len = 0;
};

// Checks operand count and every shape; first failure wins:
//  * too few operands for a region needing bias/residual → E_FUSED_EPILOGUE_MISSING_OPERAND
//  * other count problems → E_BAD_ARGUMENT naming the expected operand list
//  * rank/shape/contraction/broadcast problems → E_SHAPE_MISMATCH naming the operand,
//    the expected shape and the shape given.
// Raw operand orientation follows the region's flags (transpose_*, *_layout,
// q/k_transposed): a transposed or col_major operand is passed as its physical
// row-major array, e.g. col_major A[M,K] arrives with shape [K, M].
Expected<ProblemShape> check_operands(const Region& region, std::span<const Tensor> operands);

// numpy broadcasting along trailing axes; nullopt when the shapes are incompatible.
std::optional<Shape> broadcast_shapes(std::span<const Shape> shapes);

} // namespace fusor
