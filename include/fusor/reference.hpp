// The reference evaluator: ground truth for every check in fusor (SPEC §1–2).
// Inputs are rounded to the region's storage dtype, arithmetic is double, and the
// output is f32 (or double, for the oracle).
#pragma once

#include <span>

#include "fusor/error.hpp"
#include "fusor/region.hpp"
#include "fusor/tensor.hpp"

namespace fusor {

Expected<TensorF64> evaluate_reference_f64(const Region& region, std::span<const Tensor> operands);
Expected<Tensor> evaluate_reference(const Region& region, std::span<const Tensor> operands);

} // namespace fusor
