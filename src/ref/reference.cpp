// The reference evaluator's front door: validate, round to storage, dispatch by kind.
#include "fusor/reference.hpp"

#include "fusor/dtype.hpp"
#include "fusor/operands.hpp"
#include "ref/ref_kernels.hpp"

namespace fusor {

Expected<TensorF64> evaluate_reference_f64(const Region& region, std::span<const Tensor> operands) {
  FUSOR_TRY_ASSIGN(const ProblemShape problem, check_operands(region, operands));
  // Every lane sees operands as stored in the region's dtype, so the ground truth does too.
  const DType storage = region_storage(region);
  std::vector<TensorF64> rounded;
  rounded.reserve(operands.size());
  for (const Tensor& t : operands) {
    TensorF64& r = rounded.emplace_back(TensorF64{t.shape, std::vector<double>(t.data.size())});
    for (size_t i = 0; i < t.data.size(); ++i) r.data[i] = round_to_storage(static_cast<double>(t.data[i]), storage);
  }
  const ref_detail::Operands ops(rounded);
  struct Visitor {
    const ProblemShape& p;
    ref_detail::Operands ops;
    TensorF64 operator()(const FusedRegion& r) const { return ref_detail::eval_fused(r, p, ops); }
    TensorF64 operator()(const MatmulRegion& r) const { return ref_detail::eval_matmul(r, p, ops); }
    TensorF64 operator()(const AttentionRegion& r) const { return ref_detail::eval_attention(r, p, ops); }
    TensorF64 operator()(const GatedMatmulRegion& r) const { return ref_detail::eval_gated(r, p, ops); }
    TensorF64 operator()(const PointwiseGraphRegion& r) const { return ref_detail::eval_pointwise(r, p, ops); }
    TensorF64 operator()(const PointwiseReduceRegion& r) const { return ref_detail::eval_pointwise_reduce(r, p, ops); }
    TensorF64 operator()(const NormChainRegion& r) const { return ref_detail::eval_norm_chain(r, p, ops); }
  };
  return std::visit(Visitor{problem, ops}, region);
}

Expected<Tensor> evaluate_reference(const Region& region, std::span<const Tensor> operands) {
  FUSOR_TRY_ASSIGN(const TensorF64 out, evaluate_reference_f64(region, operands));
  Tensor result(out.shape, std::vector<float>(out.data.size()));
  for (size_t i = 0; i < out.data.size(); ++i) result.data[i] = static_cast<float>(out.data[i]);
  return result;
}

} // namespace fusor
