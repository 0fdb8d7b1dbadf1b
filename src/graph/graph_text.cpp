// The op-graph text form (include/fusor/graph.hpp): a line-oriented printer and parser.
// One statement per line keeps errors local: every E_PARSE names LINE:COL.
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "fusor/graph.hpp"

namespace fusor {
namespace {

bool plain_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

bool is_plain_name(std::string_view s) {
  if (s.empty() || s == "_" || s == "inf" || s == "nan") return false;
  if (s[0] >= '0' && s[0] <= '9') return false;
  for (char c : s)
    if (!plain_char(c)) return false;
  return true;
}

std::string quote(std::string_view s) {
  if (is_plain_name(s)) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

template <class T> std::string num(T v) {
  if (std::isnan(static_cast<double>(v))) return "nan";
  if (std::isinf(static_cast<double>(v))) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A float attribute must read back as a float: "1" would come back as an int.
std::string float_attr(double v) {
  std::string s = num(v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string dims_str(const Shape& shape) {
  std::string out = "[";
  for (size_t k = 0; k < shape.size(); ++k) out += (k ? ", " : "") + std::to_string(shape[k]);
  return out + "]";
}

std::string attr_str(const Attr& a) {
  if (const auto* i = std::get_if<std::int64_t>(&a)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&a)) return float_attr(*d);
  if (const auto* s = std::get_if<std::string>(&a)) return "\"" + *s + "\"";
  std::string out = "[";
  if (const auto* v = std::get_if<std::vector<std::int64_t>>(&a))
    for (size_t k = 0; k < v->size(); ++k) out += (k ? ", " : "") + std::to_string((*v)[k]);
  if (const auto* v = std::get_if<std::vector<double>>(&a))
    for (size_t k = 0; k < v->size(); ++k) out += (k ? ", " : "") + float_attr((*v)[k]);
  return out + "]";
}

// ---- Tokens ------------------------------------------------------------------------------
enum class Tok { name, number, string, punct, end };
struct Token {
  Tok kind = Tok::end;
  std::string text;
  int col = 1;
};

class Line {
public:
  Line(std::string_view text, int line) : text_(text), line_(line) {}

  Expected<std::vector<Token>> tokens() {
    std::vector<Token> out;
    size_t p = 0;
    while (true) {
      while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\r')) ++p;
      Token t;
      t.col = static_cast<int>(p) + 1;
      if (p >= text_.size() || text_[p] == '#') {
        out.push_back(t);
        return out;
      }
      const char c = text_[p];
      const bool sign_num = (c == '-' || c == '+') && p + 1 < text_.size() &&
                            ((text_[p + 1] >= '0' && text_[p + 1] <= '9') || text_[p + 1] == '.' ||
                             text_.substr(p + 1, 3) == "inf" || text_.substr(p + 1, 3) == "nan");
      if (c == '"') {
        t.kind = Tok::string;
        ++p;
        while (p < text_.size() && text_[p] != '"') {
          if (text_[p] == '\\' && p + 1 < text_.size()) ++p;
          t.text += text_[p++];
        }
        if (p >= text_.size()) return err(t.col, "an unterminated string");
        ++p;
      } else if (sign_num || (c >= '0' && c <= '9')) {
        t.kind = Tok::number;
        size_t q = p + 1;
        while (q < text_.size() && (plain_char(text_[q]) || ((text_[q] == '-' || text_[q] == '+') &&
                                                             (text_[q - 1] == 'e' || text_[q - 1] == 'E'))))
          ++q;
        t.text = std::string(text_.substr(p, q - p));
        p = q;
      } else if (plain_char(c)) {
        t.kind = Tok::name;
        size_t q = p;
        while (q < text_.size() && plain_char(text_[q])) ++q;
        t.text = std::string(text_.substr(p, q - p));
        p = q;
      } else if (std::string_view("=,()[]:;").find(c) != std::string_view::npos) {
        t.kind = Tok::punct;
        t.text = std::string(1, c);
        ++p;
      } else {
        return err(t.col, std::string("an unexpected character '") + c + "'");
      }
      out.push_back(std::move(t));
    }
  }

  Error err(int col, const std::string& what) const {
    return make_error(ErrorCode::parse, " at " + std::to_string(line_) + ":" + std::to_string(col) + ": " + what);
  }
  Error expected(const Token& t, const std::string& what) const {
    const std::string found = t.kind == Tok::end ? "end of line" : "'" + t.text + "'";
    return err(t.col, "expected " + what + ", found " + found);
  }

private:
  std::string_view text_;
  int line_;
};

struct Cursor {
  std::vector<Token> toks;
  size_t k = 0;
  const Token& peek() const { return toks[k]; }
  const Token& take() { return toks[k < toks.size() - 1 ? k++ : k]; }
  bool punct(const char* p) const { return peek().kind == Tok::punct && peek().text == p; }
};

Expected<double> parse_double(const Line& line, const Token& t) {
  std::string s = t.text;
  bool neg = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    s = s.substr(1);
  }
  if (s == "inf") return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return line.expected(t, "a number");
  return neg ? -v : v;
}

bool looks_float(const std::string& s) { return s.find_first_of(".eEn") != std::string::npos; }

Expected<std::int64_t> parse_int(const Line& line, const Token& t) {
  if (t.kind != Tok::number || looks_float(t.text)) return line.expected(t, "an integer");
  std::int64_t v = 0;
  const char* b = t.text.data() + (t.text[0] == '+' ? 1 : 0);
  auto r = std::from_chars(b, t.text.data() + t.text.size(), v);
  if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size()) return line.expected(t, "an integer");
  return v;
}

Expected<std::string> parse_name(const Line& line, Cursor& c, const char* what) {
  const Token& t = c.take();
  if (t.kind != Tok::name && t.kind != Tok::string) return line.expected(t, what);
  return t.text;
}

Status expect_punct(const Line& line, Cursor& c, const char* p) {
  if (!c.punct(p)) return line.expected(c.peek(), std::string("'") + p + "'");
  c.take();
  return {};
}

// TYPE[d0, d1, ...]
Status parse_type_shape(const Line& line, Cursor& c, ElemType& type, Shape& shape) {
  const Token& t = c.take();
  auto ty = t.kind == Tok::name ? elem_type_from_name(t.text) : std::nullopt;
  if (!ty) return line.expected(t, "a dtype (f32, i64, bool)");
  type = *ty;
  FUSOR_TRY(expect_punct(line, c, "["));
  shape.clear();
  while (!c.punct("]")) {
    if (!shape.empty()) FUSOR_TRY(expect_punct(line, c, ","));
    FUSOR_TRY_ASSIGN(std::int64_t d, parse_int(line, c.take()));
    if (d < -1) return line.err(c.toks[c.k - 1].col, "a dimension must be >= 0 (or -1 for free)");
    shape.push_back(d);
  }
  c.take();
  return {};
}

Expected<Attr> parse_attr_value(const Line& line, Cursor& c) {
  const Token& t = c.peek();
  if (t.kind == Tok::string) return Attr(c.take().text);
  if (t.kind == Tok::number || (t.kind == Tok::name && (t.text == "inf" || t.text == "nan"))) {
    c.take();
    if (t.kind == Tok::number && !looks_float(t.text)) {
      FUSOR_TRY_ASSIGN(std::int64_t v, parse_int(line, t));
      return Attr(v);
    }
    FUSOR_TRY_ASSIGN(double d, parse_double(line, t));
    return Attr(d);
  }
  if (!c.punct("[")) return line.expected(t, "an attribute value");
  c.take();
  std::vector<Token> items;
  while (!c.punct("]")) {
    if (!items.empty()) FUSOR_TRY(expect_punct(line, c, ","));
    const Token& item = c.take();
    if (item.kind != Tok::number && !(item.kind == Tok::name && (item.text == "inf" || item.text == "nan")))
      return line.expected(item, "a number");
    items.push_back(item);
  }
  c.take();
  bool any_float = false;
  for (const auto& item : items) any_float = any_float || item.kind == Tok::name || looks_float(item.text);
  if (!any_float) {
    std::vector<std::int64_t> v;
    for (const auto& item : items) {
      FUSOR_TRY_ASSIGN(std::int64_t x, parse_int(line, item));
      v.push_back(x);
    }
    return Attr(std::move(v));
  }
  std::vector<double> v;
  for (const auto& item : items) {
    FUSOR_TRY_ASSIGN(double x, parse_double(line, item));
    v.push_back(x);
  }
  return Attr(std::move(v));
}

Status parse_const(const Line& line, Cursor& c, Graph& g) {
  FUSOR_TRY_ASSIGN(std::string name, parse_name(line, c, "a constant name"));
  FUSOR_TRY(expect_punct(line, c, ":"));
  GraphTensor t;
  FUSOR_TRY(parse_type_shape(line, c, t.type, t.shape));
  for (auto d : t.shape)
    if (d < 0) return line.err(c.peek().col, "constant '" + name + "' needs a fully known shape");
  FUSOR_TRY(expect_punct(line, c, "="));
  const std::int64_t n = shape_numel(t.shape);
  std::vector<double> values;
  if (c.peek().kind == Tok::name && c.peek().text == "normal") {
    c.take();
    FUSOR_TRY(expect_punct(line, c, "("));
    std::int64_t seed = 0;
    double scale = 1.0;
    while (!c.punct(")")) {
      if (c.peek().kind == Tok::punct && c.peek().text == ",") c.take();
      FUSOR_TRY_ASSIGN(std::string key, parse_name(line, c, "seed or scale"));
      FUSOR_TRY(expect_punct(line, c, "="));
      if (key == "seed") {
        FUSOR_TRY_ASSIGN(seed, parse_int(line, c.take()));
      } else if (key == "scale") {
        FUSOR_TRY_ASSIGN(scale, parse_double(line, c.take()));
      } else {
        return line.expected(c.toks[c.k - 2], "seed or scale");
      }
    }
    c.take();
    if (t.type != ElemType::f32) return line.err(c.peek().col, "normal(...) fills f32 constants only");
    t.f = normal_values(n, static_cast<std::uint64_t>(seed), scale);
  } else if (c.punct("[")) {
    FUSOR_TRY_ASSIGN(Attr a, parse_attr_value(line, c));
    if (const auto* vi = std::get_if<std::vector<std::int64_t>>(&a))
      for (auto x : *vi) values.push_back(static_cast<double>(x));
    if (const auto* vd = std::get_if<std::vector<double>>(&a)) values = *vd;
    if (static_cast<std::int64_t>(values.size()) != n)
      return line.err(c.peek().col, "constant '" + name + "' of shape " + shape_str(t.shape) + " needs " +
                                        std::to_string(n) + " values, got " + std::to_string(values.size()));
  } else {
    FUSOR_TRY_ASSIGN(double v, parse_double(line, c.take()));
    values.assign(static_cast<size_t>(n), v);
  }
  if (t.f.empty()) {
    for (double v : values) {
      if (t.type == ElemType::f32)
        t.f.push_back(static_cast<float>(v));
      else
        t.i.push_back(static_cast<std::int64_t>(v));
    }
  }
  if (!g.constants.emplace(name, std::move(t)).second) return line.err(1, "constant '" + name + "' is defined twice");
  return {};
}

Status parse_node(const Line& line, Cursor& c, Graph& g) {
  Node node;
  while (true) {
    FUSOR_TRY_ASSIGN(std::string out, parse_name(line, c, "an output name"));
    node.outputs.push_back(out);
    if (!c.punct(",")) break;
    c.take();
  }
  FUSOR_TRY(expect_punct(line, c, "="));
  FUSOR_TRY_ASSIGN(node.op, parse_name(line, c, "an op name"));
  FUSOR_TRY(expect_punct(line, c, "("));
  while (!c.punct(")") && !c.punct(";")) {
    if (!node.inputs.empty()) FUSOR_TRY(expect_punct(line, c, ","));
    FUSOR_TRY_ASSIGN(std::string in, parse_name(line, c, "an input name or _"));
    node.inputs.push_back(in == "_" && c.toks[c.k - 1].kind == Tok::name ? "" : in);
  }
  if (c.punct(";")) {
    c.take();
    while (!c.punct(")")) {
      if (!node.attrs.empty()) FUSOR_TRY(expect_punct(line, c, ","));
      FUSOR_TRY_ASSIGN(std::string key, parse_name(line, c, "an attribute name"));
      FUSOR_TRY(expect_punct(line, c, "="));
      FUSOR_TRY_ASSIGN(Attr v, parse_attr_value(line, c));
      node.attrs[key] = std::move(v);
    }
  }
  FUSOR_TRY(expect_punct(line, c, ")"));
  g.nodes.push_back(std::move(node));
  return {};
}

} // namespace

// A text graph carries its weights in one line: normal(seed=, scale=).
FloatBuffer normal_values(std::int64_t n, std::uint64_t seed, double scale) {
  std::uint64_t state = seed;
  auto next = [&] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  FloatBuffer out(static_cast<size_t>(n));
  for (auto& v : out) {
    const double u1 = std::max(next(), 1e-300), u2 = next();
    v = static_cast<float>(scale * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return out;
}

std::string print_graph(const Graph& g, const PrintOptions& options) {
  std::ostringstream os;
  os << "graph " << quote(g.name) << "\n";
  for (const auto& in : g.inputs)
    os << "input " << quote(in.name) << ": " << elem_type_name(in.type) << dims_str(in.shape) << "\n";
  for (const auto& [name, t] : g.constants) {
    os << "const " << quote(name) << ": " << elem_type_name(t.type) << dims_str(t.shape) << " = ";
    const std::int64_t n = t.numel();
    if (n > options.max_inline) {
      os << "elided(" << n << ")\n";
      continue;
    }
    os << "[";
    for (std::int64_t k = 0; k < n; ++k)
      os << (k ? ", " : "")
         << (t.type == ElemType::f32 ? num(t.f[static_cast<size_t>(k)]) : std::to_string(t.i[static_cast<size_t>(k)]));
    os << "]\n";
  }
  for (const auto& node : g.nodes) {
    for (size_t k = 0; k < node.outputs.size(); ++k) os << (k ? ", " : "") << quote(node.outputs[k]);
    os << " = " << node.op << "(";
    for (size_t k = 0; k < node.inputs.size(); ++k)
      os << (k ? ", " : "") << (node.inputs[k].empty() ? "_" : quote(node.inputs[k]));
    if (!node.attrs.empty()) {
      os << "; ";
      bool first = true;
      for (const auto& [key, v] : node.attrs) {
        os << (first ? "" : ", ") << key << "=" << attr_str(v);
        first = false;
      }
    }
    os << ")\n";
  }
  os << "output ";
  for (size_t k = 0; k < g.outputs.size(); ++k) os << (k ? ", " : "") << quote(g.outputs[k]);
  os << "\n";
  return os.str();
}

Expected<Graph> parse_graph(std::string_view text) {
  Graph g;
  bool named = false, has_output = false;
  int line_no = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ++line_no;
    Line line(text.substr(start, end - start), line_no);
    start = end + 1;
    FUSOR_TRY_ASSIGN(std::vector<Token> toks, line.tokens());
    Cursor c{std::move(toks)};
    if (c.peek().kind == Tok::end) continue;
    const Token head = c.peek();
    const bool keyword = head.kind == Tok::name && c.toks.size() > 1 &&
                         !(c.toks[1].kind == Tok::punct && (c.toks[1].text == "=" || c.toks[1].text == ","));
    if (keyword && head.text == "graph") {
      c.take();
      if (named) return line.err(head.col, "a second 'graph' line");
      FUSOR_TRY_ASSIGN(g.name, parse_name(line, c, "a graph name"));
      named = true;
    } else if (keyword && head.text == "input") {
      c.take();
      GraphInput in;
      FUSOR_TRY_ASSIGN(in.name, parse_name(line, c, "an input name"));
      FUSOR_TRY(expect_punct(line, c, ":"));
      FUSOR_TRY(parse_type_shape(line, c, in.type, in.shape));
      g.inputs.push_back(std::move(in));
    } else if (keyword && head.text == "const") {
      c.take();
      FUSOR_TRY(parse_const(line, c, g));
    } else if (keyword && head.text == "output") {
      c.take();
      while (true) {
        FUSOR_TRY_ASSIGN(std::string out, parse_name(line, c, "an output name"));
        g.outputs.push_back(out);
        if (!c.punct(",")) break;
        c.take();
      }
      has_output = true;
    } else {
      FUSOR_TRY(parse_node(line, c, g));
    }
    if (c.peek().kind != Tok::end) return line.expected(c.peek(), "end of line");
  }
  if (!has_output)
    return make_error(ErrorCode::parse, " at " + std::to_string(line_no) + ":1: expected an 'output' line");
  if (Status s = validate_graph(g); !s) return s.error();
  return g;
}

Expected<Graph> load_graph_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot read graph file " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_graph(ss.str());
}

} // namespace fusor
