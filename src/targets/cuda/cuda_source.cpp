#include "targets/cuda/cuda_source.hpp"

#include "codegen/abi.hpp"
#include "codegen/c_renderer.hpp"
#include "fusor/region_text.hpp"

namespace fusor::cuda {
namespace {

// NVRTC has no libc headers: the kernel names its own fixed-width types and constants.
constexpr std::string_view kPrelude = R"(typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
)";

// Butterfly reductions: every lane ends with the same value. The max keeps the first
// operand unless the other is larger, as the serial renderer's centre step does.
constexpr std::string_view kReductions = R"(static __device__ __forceinline__ float fusor_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ float fusor_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}
static __device__ __forceinline__ float fusor_block_sum(float v, float* sh) {
  v = fusor_warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (int)(threadIdx.x & 31) < (int)((blockDim.x + 31) >> 5) ? sh[threadIdx.x & 31] : 0.0f;
  return fusor_warp_sum(v);
}
static __device__ __forceinline__ float fusor_block_max(float v, float* sh) {
  v = fusor_warp_max(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (int)(threadIdx.x & 31) < (int)((blockDim.x + 31) >> 5) ? sh[threadIdx.x & 31] : -INFINITY;
  return fusor_warp_max(v);
}
)";

} // namespace

Error unsupported(RegionKind kind, std::string_view lane, const std::string& reason) {
  return make_error(ErrorCode::emit_unsupported, "region " + std::string(region_kind_name(kind)) +
                                                     ", target cuda, lane " + std::string(lane) + ": " + reason);
}

std::string kernel_header(const Region& region, std::string_view lane, const std::string& shape_key,
                          const LaunchSpec& launch) {
  std::string s = "/* fusor kernel | region: " + print_region(region) + " | lane: " + std::string(lane) +
                  " | spec: " + shape_key + " */\n";
  s += launch_line(launch) + "\n";
  s += kPrelude;
  s += codegen::render_storage_helpers(codegen::cuda_dialect());
  s += kReductions;
  return s + "\n";
}

Expected<std::string> entry_open(const Region& region, const EmitOptions& options, int threads, std::string_view lane) {
  const RegionKind kind = region_kind(region);
  std::string s = std::string(codegen::cuda_dialect().kernel_prefix) + " void __launch_bounds__(" +
                  std::to_string(threads) +
                  ") fusor_kernel(const void* const* __restrict__ operands, float* __restrict__ out, "
                  "const int64_t* __restrict__ dims, int* __restrict__ status) {\n";
  const auto names = codegen::abi_dim_names(kind);
  std::vector<std::int64_t> values;
  if (options.spec != SpecPolicy::dynamic) {
    if (!options.dims)
      return unsupported(kind, lane, "spec " + std::string(spec_policy_name(options.spec)) + " needs dims (--dims)");
    values = codegen::abi_dim_values(kind, *options.dims);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name(names[i]), arg = "dims[" + std::to_string(i) + "]";
    if (options.spec == SpecPolicy::static_dims) {
      // Baked in so NVRTC specialises loops; a call with other dims is refused (status 1).
      s += "  const int64_t " + name + " = " + std::to_string(values[i]) + "LL;\n";
      s += "  if (" + arg + " != " + name + ") { *status = 1; return; }\n";
    } else {
      s += "  const int64_t " + name + " = " + arg + ";\n";
      if (options.spec == SpecPolicy::bucket)
        s += "  if (" + name + " > " + std::to_string(dim_bucket(values[i])) + "LL) { *status = 1; return; }\n";
    }
  }
  return s;
}

std::string storage_type(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16 ? "uint16_t" : "float"; }

std::string load_expr(DType dtype, const std::string& ptr, const std::string& idx) {
  switch (dtype) {
  case DType::f16: return "fusor_f16(" + ptr + "[" + idx + "])";
  case DType::bf16: return "fusor_bf16(" + ptr + "[" + idx + "])";
  default: return ptr + "[" + idx + "]";
  }
}

KernelSource make_source(const Region& region, const EmitOptions& options, std::string source, std::string lane,
                         const std::string& shape_key) {
  return codegen::kernel_source(region, options, std::move(source), "cuda", "cuda", std::move(lane), shape_key);
}

} // namespace fusor::cuda
