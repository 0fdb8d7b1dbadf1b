#include "cli_common.hpp"

#include <iostream>
#include <iterator>

#include "fusor/npy.hpp"
#include "fusor/region_text.hpp"

namespace fusor::cli {

int fail(std::string_view context, const Error& error, const Region* region) {
  std::cerr << context << ": " << error.str() << "\n";
  const bool about_operands = error.code == ErrorCode::fused_epilogue_missing_operand ||
                              error.code == ErrorCode::shape_mismatch || error.code == ErrorCode::bad_argument;
  if (region != nullptr && about_operands)
    std::cerr << "note: this " << region_kind_name(region_kind(*region)) << " region takes --in "
              << operand_list(*region) << " (in this order; see --help)\n";
  return kExitUserError;
}

Expected<std::vector<Region>> load_regions(const std::string& file) {
  if (file != "-") return load_region_file(file);
  const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  return parse_regions(text);
}

Expected<Region> load_region(const std::string& file, int index) {
  FUSOR_TRY_ASSIGN(const std::vector<Region> regions, load_regions(file));
  const auto count = static_cast<int>(regions.size());
  if (index == 0 && count != 1)
    return make_error(ErrorCode::bad_argument, "the file holds " + std::to_string(count) +
                                                   " regions; choose one with --region N (1.." + std::to_string(count) +
                                                   ")");
  if (index < 0 || index > count)
    return make_error(ErrorCode::bad_argument, "--region " + std::to_string(index) +
                                                   " is out of range: the file holds " + std::to_string(count) +
                                                   " region(s)");
  return regions[static_cast<size_t>(index == 0 ? 0 : index - 1)];
}

Expected<std::vector<Tensor>> load_operands(std::span<const std::string> paths) {
  std::vector<Tensor> out;
  out.reserve(paths.size());
  for (const auto& path : paths) {
    FUSOR_TRY_ASSIGN(Tensor t, read_npy(path));
    out.push_back(std::move(t));
  }
  return out;
}

std::string operand_list(const Region& region) {
  std::string out;
  for (const auto& name : operand_names(region)) out += (out.empty() ? "" : " ") + name;
  return out.empty() ? "(none)" : out;
}

std::string operand_order_help() {
  return "Operands (--in), in this order; each is a row-major .npy array (f32, f16, f64 or i64):\n"
         "  fused             A[M,K] B[K,N] [bias[N]] [residual[M,N]]   (bias/residual when the region has them;\n"
         "                    a col_major A or B is passed as its physical array: A[K,M], B[N,K])\n"
         "  matmul            A[M,K] B[K,N]   (transpose_a: A as [K,M]; transpose_b: B as [N,K])\n"
         "  attention         Q[..,M,D] K[..,Nk,D] V[..,Nk,Dv]   (leading [H] or [B,H] axes; q/k_transposed:\n"
         "                    the last two axes of Q/K swapped)\n"
         "  gated             A[M,K] Wg[K,H] Wu[K,H]\n"
         "  pointwise         the region's `inputs`, in the order listed (numpy broadcasting)\n"
         "  pointwise_reduce  the region's `inputs`, in the order listed; the last axis is reduced\n"
         "  norm_chain        x[..,N] [residual[..,N]] [gamma[N]] [beta[N]]   (as add_residual/weight/bias say)\n"
         "The output is written as an f32 .npy file.\n";
}

std::string compact_shape(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

} // namespace fusor::cli
