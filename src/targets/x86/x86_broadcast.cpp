#include "targets/x86/x86_broadcast.hpp"

namespace fusor::x86 {

std::string broadcast_helpers() {
  return "/* 0: contiguous, 1: one element for all, 2: general strides */\n"
         "static int fusor_bcast_mode(int64_t rank, const int64_t* shape, const int64_t* st) {\n"
         "  int contiguous = 1, scalar = 1;\n  int64_t stride = 1;\n"
         "  for (int64_t d = rank - 1; d >= 0; --d) {\n"
         "    if (shape[d] != 1 && st[d] != stride) contiguous = 0;\n"
         "    if (shape[d] != 1 && st[d] != 0) scalar = 0;\n    stride *= shape[d];\n  }\n"
         "  return contiguous ? 0 : (scalar ? 1 : 2);\n}\n"
         "static inline int64_t fusor_bcast_index(int64_t i, int64_t rank, const int64_t* shape, const int64_t* st) {\n"
         "  int64_t idx = 0;\n"
         "  for (int64_t d = rank - 1; d >= 0; --d) { idx += (i % shape[d]) * st[d]; i /= shape[d]; }\n"
         "  return idx;\n}\n";
}

std::string broadcast_input(size_t i) {
  const std::string n = std::to_string(i);
  return "  const float* restrict x" + n + " = (const float*)operands[" + n + "];\n" + "  const int64_t* st" + n +
         " = shape + rank * " + std::to_string(i + 1) + ";\n" + "  const int mode" + n +
         " = fusor_bcast_mode(rank, shape, st" + n + ");\n";
}

std::string pointwise_setup(size_t n_inputs, const std::string& dims_base, bool rowwise) {
  std::string s;
  s += "  const int64_t rank = dims[" + dims_base + "];\n";
  s += "  const int64_t* shape = dims + " + dims_base + " + 1;\n";
  s += rowwise ? "  int contiguous = 1, rowwise = rank > 0;\n" : "  int contiguous = 1;\n";
  for (size_t i = 0; i < n_inputs; ++i) {
    const std::string n = std::to_string(i);
    s += broadcast_input(i);
    s += "  contiguous = contiguous && mode" + n + " == 0;\n";
    if (rowwise) s += "  rowwise = rowwise && (mode" + n + " == 0 || fusor_row_bcast(rank, shape, st" + n + "));\n";
  }
  return s;
}

std::string load_broadcast(int i, const std::string& index) {
  const std::string n = std::to_string(i);
  return "x" + n + "[mode" + n + " == 0 ? " + index + " : (mode" + n + " == 1 ? 0 : fusor_bcast_index(" + index +
         ", rank, shape, st" + n + "))]";
}

} // namespace fusor::x86
