#include "fusor/kernel.hpp"

namespace fusor {

std::string_view spec_policy_name(SpecPolicy policy) {
  switch (policy) {
  case SpecPolicy::static_dims: return "static";
  case SpecPolicy::bucket: return "bucket";
  case SpecPolicy::dynamic: return "dynamic";
  }
  return "?";
}

std::optional<SpecPolicy> spec_policy_from_name(std::string_view name) {
  if (name == "static") return SpecPolicy::static_dims;
  if (name == "bucket") return SpecPolicy::bucket;
  if (name == "dynamic") return SpecPolicy::dynamic;
  return std::nullopt;
}

std::int64_t dim_bucket(std::int64_t d) {
  std::int64_t b = 1;
  while (b < d) b <<= 1;
  return b;
}

} // namespace fusor
