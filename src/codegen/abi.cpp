#include "codegen/abi.hpp"

#include <cstring>
#include <limits>

#include "fusor/region_text.hpp"

namespace fusor::codegen {

std::vector<std::string_view> abi_dim_names(RegionKind kind) {
  switch (kind) {
  case RegionKind::fused:
  case RegionKind::matmul:
  case RegionKind::gated: return {"M", "N", "K"};
  case RegionKind::attention: return {"batch", "heads", "kv_heads", "M", "Nk", "D", "Dv"};
  case RegionKind::pointwise: return {"total"};
  case RegionKind::pointwise_reduce:
  case RegionKind::norm_chain: return {"rows", "row_len"};
  }
  return {};
}

std::vector<std::int64_t> abi_dim_values(RegionKind kind, const ProblemShape& s) {
  switch (kind) {
  case RegionKind::fused:
  case RegionKind::matmul:
  case RegionKind::gated: return {s.M, s.N, s.K};
  case RegionKind::attention: return {std::max<std::int64_t>(s.batch, 1), s.heads, s.kv_heads, s.M, s.Nk, s.D, s.Dv};
  case RegionKind::pointwise: return {shape_numel(s.output)};
  case RegionKind::pointwise_reduce:
  case RegionKind::norm_chain: return {s.rows, s.row_len};
  }
  return {};
}

ProblemShape problem_from_abi_dims(RegionKind kind, std::span<const std::int64_t> v) {
  ProblemShape s;
  switch (kind) {
  case RegionKind::fused:
  case RegionKind::matmul:
  case RegionKind::gated: s.M = v[0], s.N = v[1], s.K = v[2]; break;
  case RegionKind::attention:
    s.batch = v[0], s.heads = v[1], s.kv_heads = v[2], s.M = v[3], s.Nk = v[4], s.D = v[5], s.Dv = v[6];
    if (s.batch == 1 && s.heads == 1) s.batch = 0; // rank-2 operands
    break;
  case RegionKind::pointwise: s.output = {v[0]}; break;
  case RegionKind::pointwise_reduce:
  case RegionKind::norm_chain:
    s.rows = v[0], s.row_len = v[1];
    s.output = {v[0], v[1]};
    break;
  }
  return s;
}

std::vector<std::int64_t> abi_dims(const Region& region, const ProblemShape& shape, std::span<const Tensor> operands) {
  const RegionKind kind = region_kind(region);
  std::vector<std::int64_t> dims = abi_dim_values(kind, shape);
  if (kind != RegionKind::pointwise && kind != RegionKind::pointwise_reduce) return dims;
  // The full (pre-reduction) shape every input broadcasts to.
  std::vector<Shape> shapes;
  for (const auto& t : operands) shapes.push_back(t.shape);
  const Shape full = broadcast_shapes(shapes).value_or(Shape{});
  const auto rank = static_cast<std::int64_t>(full.size());
  dims.push_back(rank);
  dims.insert(dims.end(), full.begin(), full.end());
  for (const auto& t : operands) {
    const auto in_rank = static_cast<std::int64_t>(t.shape.size());
    std::vector<std::int64_t> strides(static_cast<size_t>(rank), 0);
    std::int64_t stride = 1;
    for (std::int64_t d = in_rank - 1; d >= 0; --d) {
      const std::int64_t out_d = d + (rank - in_rank);
      const std::int64_t extent = t.shape[static_cast<size_t>(d)];
      strides[static_cast<size_t>(out_d)] = (extent == 1 && full[static_cast<size_t>(out_d)] != 1) ? 0 : stride;
      stride *= extent;
    }
    dims.insert(dims.end(), strides.begin(), strides.end());
  }
  return dims;
}

namespace {

ByteBuffer pack_operand(const Tensor& t, DType dtype) {
  if (dtype != DType::f16 && dtype != DType::bf16) {
    const auto* first = reinterpret_cast<const char*>(t.data.data());
    return {first, first + t.data.size() * sizeof(float)};
  }
  ByteBuffer bytes(t.data.size() * sizeof(std::uint16_t));
  for (size_t i = 0; i < t.data.size(); ++i) {
    const std::uint16_t bits = dtype == DType::f16 ? float_to_half_bits(t.data[i]) : float_to_bf16_bits(t.data[i]);
    std::memcpy(bytes.data() + i * sizeof bits, &bits, sizeof bits);
  }
  return bytes;
}

// Kernels index with int64; refuse problems whose element counts could overflow it.
Status check_abi_range(const Region& region, const ProblemShape& shape, std::span<const Tensor> operands) {
  constexpr auto limit = static_cast<double>(std::numeric_limits<std::int64_t>::max() / 8);
  double work = static_cast<double>(shape_numel(shape.output));
  for (const auto& t : operands) work = std::max(work, static_cast<double>(t.numel()));
  double product = 1;
  for (auto d : abi_dim_values(region_kind(region), shape))
    product *= static_cast<double>(std::max<std::int64_t>(d, 1));
  if (work > limit || product > limit)
    return make_error(ErrorCode::shape_mismatch, std::string(region_kind_name(region_kind(region))) +
                                                     " region: sizes exceed the kernel ABI's int64 range");
  return {};
}

} // namespace

Expected<PreparedCall> prepare_call(const Region& region, std::span<const Tensor> operands, OperandUse use) {
  PreparedCall call;
  FUSOR_TRY_ASSIGN(call.shape, check_operands(region, operands));
  FUSOR_TRY(check_abi_range(region, call.shape, operands));
  const DType storage = region_storage(region);
  const bool as_is = storage != DType::f16 && storage != DType::bf16;
  if (use == OperandUse::copy || !as_is)
    for (const auto& t : operands) call.operand_bytes.push_back(pack_operand(t, storage));
  call.dims = abi_dims(region, call.shape, operands);
  return call;
}

std::vector<const void*> operand_pointers(const PreparedCall& call, std::span<const Tensor> operands) {
  std::vector<const void*> ptrs;
  if (call.operand_bytes.empty())
    for (const auto& t : operands) ptrs.push_back(t.data.data());
  else
    for (const auto& bytes : call.operand_bytes) ptrs.push_back(bytes.data());
  return ptrs;
}

std::vector<std::int64_t> spec_dims(RegionKind kind, const EmitOptions& options) {
  if (options.spec == SpecPolicy::dynamic || !options.dims) return {};
  std::vector<std::int64_t> dims = abi_dim_values(kind, *options.dims);
  if (options.spec == SpecPolicy::bucket)
    for (auto& d : dims) d = dim_bucket(d);
  return dims;
}

std::string layouts_of(const Region& region) {
  if (const auto* f = std::get_if<FusedRegion>(&region))
    return "a=" + std::string(layout_name(f->a_layout())) + ",b=" + std::string(layout_name(f->b_layout()));
  if (const auto* m = std::get_if<MatmulRegion>(&region))
    return std::string("a=") + (m->transpose_a() ? "col_major" : "row_major") +
           ",b=" + (m->transpose_b() ? "col_major" : "row_major");
  if (const auto* a = std::get_if<AttentionRegion>(&region))
    return std::string("q=") + (a->q_transposed() ? "transposed" : "natural") +
           ",k=" + (a->k_transposed() ? "transposed" : "natural");
  return "row_major";
}

std::string shape_key(RegionKind kind, SpecPolicy policy, const std::optional<ProblemShape>& dims) {
  const auto names = abi_dim_names(kind);
  std::string key(spec_policy_name(policy));
  key += ":";
  std::vector<std::int64_t> values;
  if (dims) values = abi_dim_values(kind, *dims);
  for (size_t i = 0; i < names.size(); ++i) {
    key += (i ? "," : "") + std::string(names[i]);
    if (policy == SpecPolicy::static_dims && dims) key += "=" + std::to_string(values[i]);
    if (policy == SpecPolicy::bucket && dims) key += "<=" + std::to_string(dim_bucket(values[i]));
  }
  return key;
}

KernelSource kernel_source(const Region& region, const EmitOptions& options, std::string source, std::string lang,
                           std::string target, std::string lane, std::string shape_key) {
  KernelSource src;
  src.source = std::move(source);
  src.entry = "fusor_kernel";
  src.lang = std::move(lang);
  src.spec = options.spec;
  src.shape_key = std::move(shape_key);
  src.spec_dims = spec_dims(region_kind(region), options);
  src.layouts = layouts_of(region);
  src.dtype = region_storage(region);
  src.target = std::move(target);
  src.lane = std::move(lane);
  src.region_text = print_region(region);
  return src;
}

} // namespace fusor::codegen
