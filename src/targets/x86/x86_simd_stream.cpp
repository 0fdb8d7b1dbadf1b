// Streaming kinds for the AVX-512 lane: norm chains, pointwise DAGs and pointwise
// reductions as `omp simd` loops over the op table's expressions in the SIMD dialect.
// Norm rows are staged in an L1-resident buffer so memory sees one read of each input and
// one write of the output; reductions keep 16 lane accumulators so NaN-propagating
// combines (amax/amin) vectorise without changing their semantics.
#include "codegen/c_renderer.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86::simd {

using codegen::c99_simd_dialect;

std::string row_norm_simd(RowNorm norm, const std::string& src, const std::string& dst, const std::string& n,
                          const std::string& eps, const std::string& gamma, const std::string& beta,
                          const std::string& in) {
  const auto& d = c99_simd_dialect();
  const RowNormInfo& info = row_norm_info(norm);
  std::string s = in + "{\n" + in + "  float c_ = 0.0f;\n";
  if (info.centre == RowCentre::mean) {
    s += in + "  #pragma omp simd reduction(+:c_)\n";
    s += in + "  for (int64_t j_ = 0; j_ < " + n + "; ++j_) c_ += " + src + "[j_];\n";
    s += in + "  c_ /= (float)" + n + ";\n";
  } else if (info.centre == RowCentre::max) {
    // Per-lane comparisons, as the scalar renderer does: a NaN never becomes the maximum
    // and an all -inf row keeps -inf (an OpenMP max reduction would start at -FLT_MAX).
    s += in + "  float m_[16];\n" + in + "  for (int l_ = 0; l_ < 16; ++l_) m_[l_] = -INFINITY;\n";
    s += in + "  int64_t j_ = 0;\n";
    s += in + "  for (; j_ + 16 <= " + n + "; j_ += 16) {\n";
    s += in + "    #pragma omp simd\n";
    s += in + "    for (int l_ = 0; l_ < 16; ++l_) m_[l_] = " + src + "[j_ + l_] > m_[l_] ? " + src +
         "[j_ + l_] : m_[l_];\n";
    s += in + "  }\n";
    s += in + "  for (; j_ < " + n + "; ++j_) m_[0] = " + src + "[j_] > m_[0] ? " + src + "[j_] : m_[0];\n";
    s += in + "  c_ = -INFINITY;\n";
    s += in + "  for (int l_ = 0; l_ < 16; ++l_) c_ = m_[l_] > c_ ? m_[l_] : c_;\n";
  }
  s += in + "  float s_ = 0.0f;\n";
  s += in + "  #pragma omp simd reduction(+:s_)\n";
  s += in + "  for (int64_t j_ = 0; j_ < " + n + "; ++j_) { const float d_ = " + src +
       "[j_] - c_; s_ += " + codegen::render_row_norm_accumulate(d, norm, "d_") + "; }\n";
  s += in + "  const float r_ = " + codegen::render_row_norm_factor(d, norm, "s_", "(float)" + n, eps) + ";\n";
  s += in + "  #pragma omp simd\n";
  s += in + "  for (int64_t j_ = 0; j_ < " + n + "; ++j_) {\n";
  s += in + "    const float d_ = " + src + "[j_] - c_;\n";
  s += in + "    float v_ = " + codegen::render_row_norm_output(d, norm, "d_", "r_") + ";\n";
  if (!gamma.empty())
    s += in + "    const float g_ = " + gamma + "[j_];\n" + in +
         "    v_ = " + codegen::render_op(d, Op::mul, "v_", "g_") + ";\n";
  if (!beta.empty())
    s += in + "    const float b_ = " + beta + "[j_];\n" + in +
         "    v_ = " + codegen::render_op(d, Op::add, "v_", "b_") + ";\n";
  s += in + "    " + dst + "[j_] = v_;\n" + in + "  }\n" + in + "}\n";
  return s;
}

std::string norm_chain_body(const NormChainRegion& r) {
  const auto& d = c99_simd_dialect();
  std::string s;
  int next = 0;
  s += "  const float* restrict x = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.add_residual()) s += "  const float* restrict res = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.weight()) s += "  const float* restrict gamma = (const float*)operands[" + std::to_string(next++) + "];\n";
  if (r.bias()) s += "  const float* restrict beta = (const float*)operands[" + std::to_string(next++) + "];\n";
  s += "  if (rows == 0 || row_len == 0) return 0;\n";
  s += "  int failed = 0;\n";
  s += "  #pragma omp parallel\n  {\n";
  s += "    float* restrict t = (float*)fusor_alloc(sizeof(float) * (size_t)row_len);\n";
  s += "    if (!t) {\n      #pragma omp atomic write\n      failed = 1;\n    }\n";
  s += "    #pragma omp for schedule(static)\n";
  s += "    for (int64_t row = 0; row < rows; ++row) {\n";
  s += "      if (!t) continue;\n";
  s += "      const float* restrict xr = x + row * row_len;\n";
  if (r.add_residual()) s += "      const float* restrict rr = res + row * row_len;\n";
  s += "      float* restrict o = out + row * row_len;\n";
  s += "      #pragma omp simd\n";
  s += "      for (int64_t j = 0; j < row_len; ++j) {\n        float v = xr[j];\n";
  if (r.add_residual())
    s += "        const float rv = rr[j];\n        v = " + codegen::render_op(d, Op::add, "v", "rv") + ";\n";
  s += "        t[j] = v;\n      }\n";
  s += row_norm_simd(r.norm(), "t", "o", "row_len", codegen::float_literal(r.eps()), r.weight() ? "gamma" : "",
                     r.bias() ? "beta" : "", "      ");
  s += "    }\n    free(t);\n  }\n  return failed ? 2 : 0;\n";
  return s;
}

namespace {

std::string pointwise_setup(size_t n_inputs, const std::string& dims_base) {
  std::string s;
  s += "  const int64_t rank = dims[" + dims_base + "];\n";
  s += "  const int64_t* shape = dims + " + dims_base + " + 1;\n";
  s += "  int contiguous = 1, rowwise = rank > 0;\n";
  for (size_t i = 0; i < n_inputs; ++i) {
    const std::string n = std::to_string(i);
    s += "  const float* restrict x" + n + " = (const float*)operands[" + n + "];\n";
    s += "  const int64_t* st" + n + " = shape + rank * " + std::to_string(i + 1) + ";\n";
    s += "  const int mode" + n + " = fusor_bcast_mode(rank, shape, st" + n + ");\n";
    s += "  contiguous = contiguous && mode" + n + " == 0;\n";
    s += "  rowwise = rowwise && (mode" + n + " == 0 || fusor_row_bcast(rank, shape, st" + n + "));\n";
  }
  return s;
}

std::string load_broadcast(int i, const std::string& index) {
  const std::string n = std::to_string(i);
  return "x" + n + "[mode" + n + " == 0 ? " + index + " : (mode" + n + " == 1 ? 0 : fusor_bcast_index(" + index +
         ", rank, shape, st" + n + "))]";
}

std::string load_contiguous(int i, const std::string& index) { return "x" + std::to_string(i) + "[" + index + "]"; }

} // namespace

std::string pointwise_helpers() {
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
         "  return idx;\n}\n"
         "/* Whether an input repeats one contiguous last-axis row (a bias-like [n] operand). */\n"
         "static int fusor_row_bcast(int64_t rank, const int64_t* shape, const int64_t* st) {\n"
         "  if (rank == 0 || st[rank - 1] != 1) return 0;\n"
         "  for (int64_t d = 0; d + 1 < rank; ++d)\n    if (shape[d] != 1 && st[d] != 0) return 0;\n"
         "  return 1;\n}\n\n";
}

std::string pointwise_body(const PointwiseGraphRegion& r) {
  const auto& d = c99_simd_dialect();
  std::string s = pointwise_setup(r.graph().input_names().size(), "1");
  // Unit-stride inputs: one vector loop; broadcast inputs: the index arithmetic per element.
  s += "  if (contiguous) {\n";
  s += "    #pragma omp parallel for simd schedule(static)\n";
  s += "    for (int64_t i = 0; i < total; ++i) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_contiguous(in, "i"); }, "v", "      ");
  s += "      out[i] = v;\n    }\n    return 0;\n  }\n";
  // Inputs that are contiguous or repeat the last-axis row: rows of unit-stride vector loops.
  s += "  if (rowwise) {\n";
  s += "    const int64_t inner = shape[rank - 1], outer = inner > 0 ? total / inner : 0;\n";
  s += "    #pragma omp parallel for schedule(static)\n";
  s += "    for (int64_t o = 0; o < outer; ++o) {\n";
  for (size_t i = 0; i < r.graph().input_names().size(); ++i) {
    const std::string n = std::to_string(i);
    s += "      const float* restrict r" + n + " = x" + n + " + (mode" + n + " == 0 ? o * inner : 0);\n";
  }
  s += "      float* restrict orow = out + o * inner;\n";
  s += "      #pragma omp simd\n";
  s += "      for (int64_t j = 0; j < inner; ++j) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return "r" + std::to_string(in) + "[j]"; }, "v", "        ");
  s += "        orow[j] = v;\n      }\n    }\n    return 0;\n  }\n";
  s += "  #pragma omp parallel for schedule(static)\n";
  s += "  for (int64_t i = 0; i < total; ++i) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_broadcast(in, "i"); }, "v", "    ");
  s += "    out[i] = v;\n  }\n  return 0;\n";
  return s;
}

std::string pointwise_reduce_body(const PointwiseReduceRegion& r) {
  const auto& d = c99_simd_dialect();
  std::string s = pointwise_setup(r.graph().input_names().size(), "2");
  s += "  (void)rowwise;\n";
  const std::string init = codegen::render_reduce_init(d, r.reduce());
  s += "  #pragma omp parallel for schedule(static)\n";
  s += "  for (int64_t row = 0; row < rows; ++row) {\n";
  s += "    const int64_t base = row * row_len;\n";
  s += "    float a_[16];\n    for (int l = 0; l < 16; ++l) a_[l] = " + init + ";\n";
  s += "    int64_t j = 0;\n";
  s += "    if (contiguous)\n      for (; j + 16 <= row_len; j += 16) {\n";
  s += "        #pragma omp simd\n        for (int l = 0; l < 16; ++l) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_contiguous(in, "base + j + l"); }, "v", "          ");
  s += "          a_[l] = " + codegen::render_reduce_combine(d, r.reduce(), "a_[l]", "v") + ";\n        }\n      }\n";
  s += "    for (; j < row_len; ++j) {\n";
  s += codegen::render_dag(
      d, r.graph(), [](int in) { return load_broadcast(in, "base + j"); }, "v", "      ");
  s += "      a_[0] = " + codegen::render_reduce_combine(d, r.reduce(), "a_[0]", "v") + ";\n    }\n";
  s += "    float acc = a_[0];\n";
  s +=
      "    for (int l = 1; l < 16; ++l) acc = " + codegen::render_reduce_combine(d, r.reduce(), "acc", "a_[l]") + ";\n";
  s += "    out[row] = " + codegen::render_reduce_finish(d, r.reduce(), "acc", "(float)row_len") + ";\n";
  s += "  }\n  return 0;\n";
  return s;
}

} // namespace fusor::x86::simd
