// What an emitter produces and a compiler consumes (SPEC §3).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fusor/dtype.hpp"
#include "fusor/operands.hpp"

namespace fusor {

// static: exact dims baked in; bucket: dims rounded up to powers of two, one kernel per
// bucket; dynamic: dims are runtime arguments, one kernel for all shapes.
enum class SpecPolicy { static_dims, bucket, dynamic };
std::string_view spec_policy_name(SpecPolicy policy);
std::optional<SpecPolicy> spec_policy_from_name(std::string_view name);

struct EmitOptions {
  SpecPolicy spec = SpecPolicy::dynamic;
  // Needed by static and bucket policies; ignored by dynamic.
  std::optional<ProblemShape> dims;
  // Lane-specific knobs (e.g. "threads"). An emitter rejects any key it does not know.
  std::map<std::string, std::string> options;
};

struct KernelSource {
  std::string source;
  std::string entry; // symbol to call
  std::string lang;  // "c", "cuda"
  SpecPolicy spec = SpecPolicy::dynamic;
  std::string shape_key; // "dynamic:M,N,K", "bucket:M<=64,N<=128,K<=32", "static:M=8,N=16,K=12"
  // The dims a static kernel is specialised to, or a bucket kernel's upper bounds, in
  // ABI order (codegen::abi_dim_names); empty for dynamic kernels.
  std::vector<std::int64_t> spec_dims;
  // Libraries the artifact links (vendor lanes: {"dnnl"}), and where their headers and
  // shared objects are when the compiler would not find them (a prefix such as conda's or
  // /opt/intel: -I, -L and the run-time path); all part of the cache key.
  std::vector<std::string> link_libs;
  std::vector<std::string> include_dirs;
  std::vector<std::string> library_dirs;
  // Flags the lane adds after the compiler's own (x86_avx2: -mno-avx512f); part of the cache key.
  std::vector<std::string> compile_flags;
  std::string layouts; // e.g. "a=row_major,b=col_major"
  DType dtype = DType::f32;
  std::string target;      // "x86"
  std::string lane;        // tag of the lane that will run it, e.g. "x86_avx512"
  std::string region_text; // canonical region text, for the header comment and cache metadata
};

// The power-of-two bucket of a dimension (1 → 1, 7 → 8, 129 → 256).
std::int64_t dim_bucket(std::int64_t d);

} // namespace fusor
