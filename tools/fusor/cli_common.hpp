// Helpers shared by every fusor subcommand: exit codes, error printing, loading regions
// and .npy operands, the operand-order help text.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/region.hpp"
#include "fusor/tensor.hpp"

namespace fusor::cli {

// Exit codes (docs/decisions.md). 1 is kept for "the oracle rejected a kernel", so that
// scripts can tell a wrong kernel from a wrong command line.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRejected = 1;
inline constexpr int kExitUserError = 2;

// Prints "<context>: E_CODE: message" to stderr (plus an operand-order note when the
// error is about operands and `region` is known); returns kExitUserError.
int fail(std::string_view context, const Error& error, const Region* region = nullptr);

// Every region block of FILE ("-" reads standard input).
Expected<std::vector<Region>> load_regions(const std::string& file);

// Block `index` of FILE (1-based; 0 = the file's only block, an error if it has several).
// Callers print errors with FILE as the context.
Expected<Region> load_region(const std::string& file, int index);

// Reads each .npy path (any supported dtype, converted to f32), in order.
Expected<std::vector<Tensor>> load_operands(std::span<const std::string> paths);

// "A B bias residual": the operands `region` takes, in --in order.
std::string operand_list(const Region& region);

// The per-kind operand order, for --help footers.
std::string operand_order_help();

// "[8,16]": shapes in tables and one-line summaries.
std::string compact_shape(const Shape& shape);

// Wall time of `fn()` in milliseconds.
template <class F> double time_ms(F&& fn) {
  const auto start = std::chrono::steady_clock::now();
  std::forward<F>(fn)();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

} // namespace fusor::cli
