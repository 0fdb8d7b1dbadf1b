// Per-lane, per-dtype accuracy budgets (SPEC §4). Lanes that convert on load and compute
// in f32 (x86, CUDA SIMT) see the same storage-rounded inputs as the reference, so their
// budget is the f32 one whatever the storage; tensor-core lanes round intermediates.
#include <array>

#include "fusor/oracle.hpp"

namespace fusor {
namespace {

struct BudgetRow {
  std::string_view lane_prefix; // "" matches every lane
  std::optional<DType> dtype;   // nullopt matches every dtype
  Budget budget;
};

// First matching row wins.
constexpr std::array<BudgetRow, 10> kBudgets{{
    {"x86", std::nullopt, {0.0, 1e-5}},
    {"cuda_simt", std::nullopt, {0.0, 1e-5}},
    {"cuda_mma", DType::f16, {5e-3, 1e-2}},
    {"cuda_mma", DType::bf16, {5e-2, 2e-2}},
    {"", DType::f32, {0.0, 1e-5}},
    {"", DType::f16, {5e-3, 1e-3}},
    {"", DType::bf16, {5e-2, 1e-2}},
    {"", DType::fp8_e4m3, {2e-1, 5e-2}},
    {"", DType::fp8_e5m2, {2e-1, 5e-2}},
    {"", std::nullopt, {0.0, 1e-5}},
}};

} // namespace

Budget lane_budget(std::string_view lane, DType dtype) {
  for (const auto& row : kBudgets)
    if (lane.starts_with(row.lane_prefix) && (!row.dtype || *row.dtype == dtype)) return row.budget;
  return {};
}

} // namespace fusor
