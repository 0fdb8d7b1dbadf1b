#include "codegen/c_renderer.hpp"

#include <charconv>
#include <cmath>

namespace fusor::codegen {
namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size()))
    text.replace(pos, from.size(), to);
}

// Substitute `$name` placeholders, then the dialect's function renames.
std::string instantiate(const CDialect& dialect, std::string_view pattern,
                        std::initializer_list<std::pair<std::string_view, std::string_view>> args) {
  std::string out(pattern);
  for (const auto& [from, to] : dialect.renames) replace_all(out, std::string(from) + "(", std::string(to) + "(");
  for (const auto& [name, value] : args) replace_all(out, name, value);
  return out;
}

} // namespace

const CDialect& c99_dialect() {
  static const CDialect dialect{"c99", "restrict", "static inline", "", {}};
  return dialect;
}

std::string float_literal(double value) {
  if (std::isnan(value)) return "NAN";
  if (std::isinf(value)) return value > 0 ? "INFINITY" : "(-INFINITY)";
  const auto f = static_cast<float>(value);
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f); // shortest form that reads back as the same float
  std::string text(buf, res.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return "(" + text + "f)";
}

std::string render_op(const CDialect& dialect, Op op, std::string_view a, std::string_view b) {
  return instantiate(dialect, op_info(op).c_expr, {{"$0", a}, {"$1", b}});
}

std::string render_unary_chain(const CDialect& dialect, std::span<const Op> ops, std::string_view var,
                               std::string_view bias, std::string_view indent) {
  std::string out;
  for (Op op : ops) out += std::string(indent) + std::string(var) + " = " + render_op(dialect, op, var, bias) + ";\n";
  return out;
}

std::string render_row_norm(const CDialect& dialect, RowNorm norm, std::string_view row, std::string_view n,
                            std::string_view eps, std::string_view indent) {
  const RowNormInfo& info = row_norm_info(norm);
  const std::string in(indent), r(row), nn(n);
  std::string out = in + "{\n";
  out += in + "  float c_ = 0.0f;\n";
  if (info.centre == RowCentre::mean) {
    out += in + "  for (int64_t j_ = 0; j_ < " + nn + "; ++j_) c_ += " + r + "[j_];\n";
    out += in + "  c_ /= (float)" + nn + ";\n";
  } else if (info.centre == RowCentre::max) {
    out += in + "  c_ = -INFINITY;\n";
    out += in + "  for (int64_t j_ = 0; j_ < " + nn + "; ++j_) c_ = " + r + "[j_] > c_ ? " + r + "[j_] : c_;\n";
  }
  out += in + "  float s_ = 0.0f;\n";
  out += in + "  for (int64_t j_ = 0; j_ < " + nn + "; ++j_) { float d_ = " + r +
         "[j_] - c_; s_ += " + instantiate(dialect, info.c_accumulate, {{"$d", "d_"}}) + "; }\n";
  out += in + "  const float r_ = " +
         instantiate(dialect, info.c_factor, {{"$s", "s_"}, {"$n", "(float)" + nn}, {"$eps", eps}}) + ";\n";
  out += in + "  for (int64_t j_ = 0; j_ < " + nn + "; ++j_) { float d_ = " + r + "[j_] - c_; " + r +
         "[j_] = " + instantiate(dialect, info.c_output, {{"$d", "d_"}, {"$r", "r_"}}) + "; }\n";
  out += in + "}\n";
  return out;
}

std::string render_row_norm_accumulate(const CDialect& dialect, RowNorm norm, std::string_view d) {
  return instantiate(dialect, row_norm_info(norm).c_accumulate, {{"$d", d}});
}

std::string render_row_norm_factor(const CDialect& dialect, RowNorm norm, std::string_view s, std::string_view n,
                                   std::string_view eps) {
  return instantiate(dialect, row_norm_info(norm).c_factor, {{"$s", s}, {"$n", n}, {"$eps", eps}});
}

std::string render_reduce_init(const CDialect& dialect, ReduceOp op) {
  return instantiate(dialect, reduce_info(op).c_init, {});
}

std::string render_reduce_combine(const CDialect& dialect, ReduceOp op, std::string_view acc, std::string_view x) {
  return instantiate(dialect, reduce_info(op).c_combine, {{"$a", acc}, {"$x", x}});
}

std::string render_reduce_finish(const CDialect& dialect, ReduceOp op, std::string_view acc, std::string_view n) {
  return instantiate(dialect, reduce_info(op).c_finish, {{"$a", acc}, {"$n", n}});
}

std::string render_dag(const CDialect& dialect, const PointwiseGraph& graph,
                       const std::function<std::string(int)>& load_input, std::string_view out_var,
                       std::string_view indent) {
  const std::string in(indent);
  std::string out;
  for (size_t i = 0; i < graph.input_names().size(); ++i)
    out += in + "const float in" + std::to_string(i) + "_ = " + load_input(static_cast<int>(i)) + ";\n";
  auto ref = [](const ValueRef& v) -> std::string {
    switch (v.kind) {
    case ValueRef::Kind::input: return "in" + std::to_string(v.index) + "_";
    case ValueRef::Kind::node: return "t" + std::to_string(v.index) + "_";
    case ValueRef::Kind::constant: return float_literal(v.constant);
    }
    return {};
  };
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const auto& node = graph.nodes()[i];
    // Constants become named temporaries too: the op table may repeat an operand.
    std::string args[2];
    for (size_t a = 0; a < node.args.size(); ++a) {
      args[a] = ref(node.args[a]);
      if (node.args[a].kind == ValueRef::Kind::constant) {
        const std::string name = "k" + std::to_string(i) + "_" + std::to_string(a) + "_";
        out += in + "const float " + name + " = " + args[a] + ";\n";
        args[a] = name;
      }
    }
    out += in + "const float t" + std::to_string(i) + "_ = " + render_op(dialect, node.op, args[0], args[1]) + ";\n";
  }
  out += in + "const float " + std::string(out_var) + " = " + ref(graph.output()) + ";\n";
  return out;
}

std::string render_storage_helpers(const CDialect& dialect) {
  const std::string p(dialect.helper_prefix);
  return p + " float fusor_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }\n" + p +
         " float fusor_bf16(uint16_t h) { return fusor_bits_to_float((uint32_t)h << 16); }\n" + p +
         " float fusor_f16(uint16_t h) {\n"
         "  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;\n"
         "  if (exp == 0) { float v = (float)mant * 5.9604644775390625e-08f; return sign ? -v : v; }\n"
         "  if (exp == 31) return fusor_bits_to_float(sign | 0x7f800000u | (mant << 13));\n"
         "  return fusor_bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));\n"
         "}\n";
}

} // namespace fusor::codegen
