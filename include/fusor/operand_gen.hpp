// Deterministic operand generation for a region at given dims: used by the default
// example, tests, probes and benchmarks so they all build inputs the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "fusor/operands.hpp"
#include "fusor/region.hpp"
#include "fusor/tensor.hpp"

namespace fusor {

// Operands in the region's operand order and RAW orientation (col_major / transposed
// operands get their physical shape), filled with N(0,1)·scale from `seed`.
// Dims used per kind: fused/matmul/gated: M, N, K; attention: batch, heads, kv_heads,
// M, Nk, D, Dv (batch == 0 → rank-2 operands; batch == 1 and heads > 1 → rank 3;
// batch > 1 → rank 4); pointwise/norm_chain/pointwise_reduce: `output` is the shape of
// every input (for pointwise_reduce it is the input shape, i.e. rows × row_len).
std::vector<Tensor> make_operands(const Region& region, const ProblemShape& dims, std::uint64_t seed,
                                  double scale = 1.0);

} // namespace fusor
