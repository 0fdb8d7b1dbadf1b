// The region text form: a flat tokenizer, a loop-only parser (no recursion, so no input
// can exhaust the stack) and the canonical one-line printer.
//
// Decisions (the brief left them open):
// * Numbers are read with std::from_chars. A literal that overflows to ±inf or underflows
//   to 0 when written as digits (1e400, 1e-400) is E_PARSE: silently changing a value the
//   user wrote is worse than asking for `inf` or `0`. `inf`, `-inf`, `nan` spell those.
// * Names (DAG ids, inputs, list items) may be written quoted, "a b", with the escapes
//   \" \\ \n \t \xHH. The printer quotes any name that is not a plain identifier or that would
//   read back as something else (a reserved field, inf/nan, true/false), so printing and
//   parsing round-trip for every region, including ones built from importer names.
// * Empty text (only comments) is E_PARSE "expected a region block": a region file with
//   no region is a user mistake. Lists and call arguments take no trailing comma.
#include "fusor/region_text.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <system_error>

namespace fusor {
namespace {

struct Pos {
  int line = 1;
  int col = 1;
};

std::string pos_str(Pos p) { return std::to_string(p.line) + ":" + std::to_string(p.col); }

enum class Tok { ident, number, string, punct, end, bad };

struct Token {
  Tok kind = Tok::end;
  std::string_view text; // the source spelling
  std::string value;     // decoded contents of a string; what is wrong with a bad token
  Pos pos;
};

// Explicit ranges: <cctype> is locale dependent and UB on negative chars.
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_alpha(c) || is_digit(c); }

bool is_plain_ident(std::string_view s) {
  return !s.empty() && is_alpha(s[0]) && std::all_of(s.begin(), s.end(), is_ident_char);
}

std::string hex_byte(unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string{kHex[c >> 4], kHex[c & 15]};
}

// Keeps error messages short whatever the input holds.
std::string clip(std::string_view s) {
  constexpr size_t kMax = 40;
  return s.size() <= kMax ? std::string(s) : std::string(s.substr(0, kMax - 3)) + "...";
}

// sign? (digits ('.' digits*)? | '.' digits) (('e'|'E') sign? digits)?, or sign inf|nan.
// Bare inf/nan lex as identifiers; numeric fields accept them by name.
bool valid_number(std::string_view t) {
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  if (i > 0 && (t.substr(i) == "inf" || t.substr(i) == "nan")) return true;
  size_t digits = 0;
  while (i < t.size() && is_digit(t[i])) ++i, ++digits;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && is_digit(t[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < t.size() && is_digit(t[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == t.size();
}

class Lexer {
public:
  explicit Lexer(std::string_view src) : s_(src) {}

  Token next() {
    skip_space_and_comments();
    Token t;
    t.pos = pos_;
    const size_t start = i_;
    if (i_ >= s_.size()) return t;
    const char c = s_[i_];
    if (is_alpha(c)) {
      while (i_ < s_.size() && is_ident_char(s_[i_])) advance();
      t.kind = Tok::ident;
    } else if (is_digit(c) || c == '.' || c == '+' || c == '-') {
      lex_number(t);
    } else if (c == '"') {
      lex_string(t);
    } else if (std::string_view("{}[]()=;,").find(c) != std::string_view::npos) {
      advance();
      t.kind = Tok::punct;
    } else {
      advance();
      t.kind = Tok::bad;
      const auto u = static_cast<unsigned char>(c);
      t.value = (u >= 0x20 && u < 0x7f) ? "unexpected character '" + std::string(1, c) + "'"
                                        : "unexpected byte 0x" + hex_byte(u);
    }
    t.text = s_.substr(start, i_ - start);
    return t;
  }

private:
  void advance() {
    if (s_[i_] == '\n') {
      ++pos_.line;
      pos_.col = 1;
    } else {
      ++pos_.col;
    }
    ++i_;
  }

  void skip_space_and_comments() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
        advance();
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') advance();
      } else {
        return;
      }
    }
  }

  // Takes the whole run a number could be part of, then validates it, so `1x` or `1e`
  // is one malformed token rather than a number followed by surprises.
  void lex_number(Token& t) {
    const size_t start = i_;
    advance();
    while (i_ < s_.size()) {
      const char c = s_[i_];
      const char prev = s_[i_ - 1];
      if (is_ident_char(c) || c == '.' || ((c == '+' || c == '-') && (prev == 'e' || prev == 'E')))
        advance();
      else
        break;
    }
    const std::string_view text = s_.substr(start, i_ - start);
    if (valid_number(text)) {
      t.kind = Tok::number;
    } else {
      t.kind = Tok::bad;
      t.value = "malformed number '" + clip(text) + "'";
    }
  }

  void lex_string(Token& t) {
    advance(); // the opening quote
    t.kind = Tok::bad;
    while (true) {
      if (i_ >= s_.size() || s_[i_] == '\n') {
        t.value = "unterminated string";
        return;
      }
      const char c = s_[i_];
      const auto u = static_cast<unsigned char>(c);
      if (c == '"') {
        advance();
        t.kind = Tok::string;
        return;
      }
      if (u < 0x20 || u == 0x7f) {
        t.value = "control byte 0x" + hex_byte(u) + " in a string (write \\xHH)";
        return;
      }
      if (c != '\\') {
        t.value += c;
        advance();
        continue;
      }
      advance();
      if (i_ >= s_.size()) continue; // reported as unterminated on the next turn
      const char e = s_[i_];
      advance();
      switch (e) {
      case '"': t.value += '"'; break;
      case '\\': t.value += '\\'; break;
      case 'n': t.value += '\n'; break;
      case 't': t.value += '\t'; break;
      case 'x': {
        auto nibble = [](char h) -> int {
          if (is_digit(h)) return h - '0';
          if (h >= 'a' && h <= 'f') return h - 'a' + 10;
          if (h >= 'A' && h <= 'F') return h - 'A' + 10;
          return -1;
        };
        const int hi = i_ < s_.size() ? nibble(s_[i_]) : -1;
        const int lo = i_ + 1 < s_.size() ? nibble(s_[i_ + 1]) : -1;
        if (hi < 0 || lo < 0) {
          t.value = "bad escape in a string (\\x needs two hex digits)";
          return;
        }
        advance();
        advance();
        t.value += static_cast<char>(hi * 16 + lo);
        break;
      }
      default: t.value = "unknown escape '\\" + std::string(1, e) + "' in a string"; return;
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  Pos pos_;
};

std::string describe(const Token& t) {
  switch (t.kind) {
  case Tok::end: return "end of input";
  case Tok::bad: return t.value;
  case Tok::number: return "number " + clip(t.text);
  case Tok::string: return "string " + clip(t.text);
  case Tok::ident:
  case Tok::punct: return "'" + clip(t.text) + "'";
  }
  return "?";
}

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (auto n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

constexpr std::array<RegionKind, 7> kKinds{RegionKind::fused,     RegionKind::matmul,    RegionKind::attention,
                                           RegionKind::gated,     RegionKind::pointwise, RegionKind::pointwise_reduce,
                                           RegionKind::norm_chain};

// Field names per kind, in canonical print order.
constexpr std::array<std::string_view, 8> kFusedFields{"prologue", "epilogue", "residual", "reduction",
                                                       "eps",      "storage",  "a_layout", "b_layout"};
constexpr std::array<std::string_view, 3> kMatmulFields{"storage", "transpose_a", "transpose_b"};
constexpr std::array<std::string_view, 5> kAttentionFields{"scale", "causal", "q_transposed", "k_transposed",
                                                           "storage"};
constexpr std::array<std::string_view, 2> kGatedFields{"gate_act", "storage"};
constexpr std::array<std::string_view, 3> kPointwiseFields{"inputs", "output", "reduce"};
constexpr std::array<std::string_view, 5> kNormChainFields{"norm", "add_residual", "weight", "bias", "eps"};

// The fixed fields of one block: which exist, and where each was first set.
struct FieldSet {
  std::string_view kind;
  std::span<const std::string_view> names;
  std::array<std::optional<Pos>, 8> seen{};
};

class Parser {
public:
  explicit Parser(std::string_view text) {
    Lexer lexer(text);
    do toks_.push_back(lexer.next());
    while (toks_.back().kind != Tok::end && toks_.back().kind != Tok::bad);
  }

  Expected<std::vector<Region>> all() {
    std::vector<Region> out;
    if (peek().kind == Tok::end) return expected("a region block", peek());
    while (peek().kind != Tok::end) {
      FUSOR_TRY_ASSIGN(Region region, block());
      out.push_back(std::move(region));
    }
    return out;
  }

  // parse_region: one block, then nothing.
  Expected<Region> one() {
    if (peek().kind == Tok::end) return expected("a region block", peek());
    FUSOR_TRY_ASSIGN(Region region, block());
    if (peek().kind != Tok::end) return expected("end of input (exactly one region block)", peek());
    return region;
  }

private:
  // The last token (end or bad) repeats forever, so looking ahead never runs off.
  const Token& peek(size_t k = 0) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  const Token& take() {
    const Token& t = peek();
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  static bool is_punct(const Token& t, char c) { return t.kind == Tok::punct && t.text[0] == c; }

  static Error expected(std::string_view what, const Token& found) {
    return make_error(ErrorCode::parse,
                      " at " + pos_str(found.pos) + ": expected " + std::string(what) + ", found " + describe(found));
  }

  Status expect(char c) {
    if (!is_punct(peek(), c)) return expected(std::string("'") + c + "'", peek());
    take();
    return {};
  }

  Expected<Region> block() {
    const Token& keyword = peek();
    std::optional<RegionKind> kind;
    for (RegionKind k : kKinds)
      if (keyword.kind == Tok::ident && keyword.text == region_kind_name(k)) kind = k;
    if (!kind)
      return expected("a region kind (fused, matmul, attention, gated, pointwise, pointwise_reduce, norm_chain)",
                      keyword);
    const Pos start = take().pos;
    FUSOR_TRY(expect('{'));
    switch (*kind) {
    case RegionKind::fused: return fused(start);
    case RegionKind::matmul: return matmul(start);
    case RegionKind::attention: return attention(start);
    case RegionKind::gated: return gated(start);
    case RegionKind::pointwise: return pointwise(start, false);
    case RegionKind::pointwise_reduce: return pointwise(start, true);
    case RegionKind::norm_chain: return norm_chain(start);
    }
    return make_error(ErrorCode::internal, "region text: unhandled region kind");
  }

  // `key = value` fields separated by ';' (a trailing one allowed) up to the closing '}'.
  // `field(key)` consumes the '=' and the value.
  template <class F> Status fields(F&& field) {
    while (true) {
      if (is_punct(peek(), '}')) {
        take();
        return {};
      }
      if (peek().kind != Tok::ident && peek().kind != Tok::string) return expected("a field name or '}'", peek());
      FUSOR_TRY(field(take()));
      if (is_punct(peek(), ';')) {
        take();
      } else if (!is_punct(peek(), '}')) {
        return expected("';' or '}'", peek());
      }
    }
  }

  static Error unknown_field(const FieldSet& set, const Token& key, std::string_view extra = {}) {
    return expected("a field of " + std::string(set.kind) + " (" + join(set.names) + ")" + std::string(extra), key);
  }

  // The index of `key` among the set's fields; unknown or repeated names are E_PARSE.
  static Expected<size_t> field_index(FieldSet& set, const Token& key) {
    for (size_t i = 0; i < set.names.size(); ++i) {
      if (key.kind != Tok::ident || key.text != set.names[i]) continue;
      if (set.seen[i])
        return make_error(ErrorCode::parse, " at " + pos_str(key.pos) + ": expected each field once, found '" +
                                                std::string(key.text) + "' again (first set at " +
                                                pos_str(*set.seen[i]) + ")");
      set.seen[i] = key.pos;
      return i;
    }
    return unknown_field(set, key);
  }

  Expected<bool> boolean() {
    const Token& t = peek();
    if (t.kind != Tok::ident || (t.text != "true" && t.text != "false")) return expected("true or false", t);
    take();
    return t.text == "true";
  }

  Expected<double> number() {
    const Token& t = peek();
    if (t.kind == Tok::ident && (t.text == "inf" || t.text == "nan")) {
      take();
      return t.text == "inf" ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    }
    if (t.kind != Tok::number) return expected("a number", t);
    std::string_view s = t.text;
    if (s[0] == '+') s.remove_prefix(1); // from_chars takes '-' but not '+'
    double v = 0.0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range)
      return expected("a number a double can hold (write inf or 0 rather than overflow or underflow)", t);
    if (ec != std::errc{} || end != s.data() + s.size()) return expected("a number", t);
    take();
    return v;
  }

  Expected<std::string> name() {
    const Token& t = peek();
    if (t.kind == Tok::ident) return std::string(take().text);
    if (t.kind == Tok::string) return take().value;
    return expected("a name", t);
  }

  Expected<std::vector<std::string>> list() {
    FUSOR_TRY(expect('['));
    std::vector<std::string> items;
    if (is_punct(peek(), ']')) {
      take();
      return items;
    }
    while (true) {
      if (peek().kind != Tok::ident && peek().kind != Tok::string)
        return expected(items.empty() ? "a name or ']'" : "a name", peek());
      FUSOR_TRY_ASSIGN(std::string item, name());
      items.push_back(std::move(item));
      if (is_punct(peek(), ']')) {
        take();
        return items;
      }
      if (!is_punct(peek(), ',')) return expected("',' or ']'", peek());
      take();
    }
  }

  // `op(arg, ...)` with args value names or numbers; bare inf/nan are numbers.
  Expected<PointwiseOpSpec> call(std::string out) {
    PointwiseOpSpec op{std::move(out), std::string(take().text), {}};
    FUSOR_TRY(expect('('));
    if (is_punct(peek(), ')')) {
      take();
      return op;
    }
    while (true) {
      const Token& t = peek();
      if (t.kind == Tok::number || (t.kind == Tok::ident && (t.text == "inf" || t.text == "nan"))) {
        FUSOR_TRY_ASSIGN(double v, number());
        op.args.emplace_back(v);
      } else if (t.kind == Tok::ident || t.kind == Tok::string) {
        FUSOR_TRY_ASSIGN(std::string id, name());
        op.args.emplace_back(std::move(id));
      } else {
        return expected(op.args.empty() ? "a value name, a number or ')'" : "a value name or a number", t);
      }
      if (is_punct(peek(), ')')) {
        take();
        return op;
      }
      if (!is_punct(peek(), ',')) return expected("',' or ')'", peek());
      take();
    }
  }

  template <class T> static Status assign(T& dst, Expected<T> v) {
    if (!v) return v.error();
    dst = std::move(*v);
    return {};
  }

  // Semantic errors keep the region's code; the block position tells the user where.
  template <class R> static Expected<Region> built(Pos start, Expected<R> r) {
    if (!r) return make_error(r.error().code, "at " + pos_str(start) + ": " + r.error().message);
    return Region(std::move(*r));
  }

  Expected<Region> fused(Pos start) {
    FusedSpec s;
    FieldSet set{"fused", kFusedFields};
    auto field = [&](const Token& key) -> Status {
      FUSOR_TRY_ASSIGN(size_t i, field_index(set, key));
      FUSOR_TRY(expect('='));
      switch (i) {
      case 0: return assign(s.prologue, list());
      case 1: return assign(s.epilogue, list());
      case 2: return assign(s.residual, boolean());
      case 3: return assign(s.reduction, name());
      case 4: return assign(s.eps, number());
      case 5: return assign(s.storage, name());
      case 6: return assign(s.a_layout, name());
      default: return assign(s.b_layout, name());
      }
    };
    FUSOR_TRY(fields(field));
    return built(start, FusedRegion::make(s));
  }

  Expected<Region> matmul(Pos start) {
    MatmulSpec s;
    FieldSet set{"matmul", kMatmulFields};
    auto field = [&](const Token& key) -> Status {
      FUSOR_TRY_ASSIGN(size_t i, field_index(set, key));
      FUSOR_TRY(expect('='));
      switch (i) {
      case 0: return assign(s.storage, name());
      case 1: return assign(s.transpose_a, boolean());
      default: return assign(s.transpose_b, boolean());
      }
    };
    FUSOR_TRY(fields(field));
    return built(start, MatmulRegion::make(s));
  }

  Expected<Region> attention(Pos start) {
    AttentionSpec s;
    FieldSet set{"attention", kAttentionFields};
    auto field = [&](const Token& key) -> Status {
      FUSOR_TRY_ASSIGN(size_t i, field_index(set, key));
      FUSOR_TRY(expect('='));
      switch (i) {
      case 0: return assign(s.scale, number());
      case 1: return assign(s.causal, boolean());
      case 2: return assign(s.q_transposed, boolean());
      case 3: return assign(s.k_transposed, boolean());
      default: return assign(s.storage, name());
      }
    };
    FUSOR_TRY(fields(field));
    return built(start, AttentionRegion::make(s));
  }

  Expected<Region> gated(Pos start) {
    GatedSpec s;
    FieldSet set{"gated", kGatedFields};
    auto field = [&](const Token& key) -> Status {
      FUSOR_TRY_ASSIGN(size_t i, field_index(set, key));
      FUSOR_TRY(expect('='));
      return i == 0 ? assign(s.gate_act, name()) : assign(s.storage, name());
    };
    FUSOR_TRY(fields(field));
    return built(start, GatedMatmulRegion::make(s));
  }

  Expected<Region> norm_chain(Pos start) {
    NormChainSpec s;
    FieldSet set{"norm_chain", kNormChainFields};
    auto field = [&](const Token& key) -> Status {
      FUSOR_TRY_ASSIGN(size_t i, field_index(set, key));
      FUSOR_TRY(expect('='));
      switch (i) {
      case 0: return assign(s.norm, name());
      case 1: return assign(s.add_residual, boolean());
      case 2: return assign(s.weight, boolean());
      case 3: return assign(s.bias, boolean());
      default: return assign(s.eps, number());
      }
    };
    FUSOR_TRY(fields(field));
    return built(start, NormChainRegion::make(s));
  }

  // pointwise and pointwise_reduce: reserved fields plus `NAME = op(args)` statements.
  // `reduce` stays reserved in a plain pointwise block, so it is never a DAG name there.
  Expected<Region> pointwise(Pos start, bool with_reduce) {
    PointwiseReduceSpec s;
    FieldSet set{with_reduce ? "pointwise_reduce" : "pointwise",
                 std::span(kPointwiseFields).first(with_reduce ? 3 : 2)};
    auto field = [&](const Token& key) -> Status {
      const bool reserved = key.kind == Tok::ident && std::find(kPointwiseFields.begin(), kPointwiseFields.end(),
                                                                key.text) != kPointwiseFields.end();
      if (reserved && std::find(set.names.begin(), set.names.end(), key.text) != set.names.end()) {
        FUSOR_TRY_ASSIGN(size_t i, field_index(set, key));
        FUSOR_TRY(expect('='));
        switch (i) {
        case 0: return assign(s.graph.inputs, list());
        case 1: return assign(s.graph.output, name());
        default: return assign(s.reduce, name());
        }
      }
      FUSOR_TRY(expect('='));
      if (!reserved && peek().kind == Tok::ident && is_punct(peek(1), '(')) {
        FUSOR_TRY_ASSIGN(PointwiseOpSpec op, call(key.kind == Tok::string ? key.value : std::string(key.text)));
        s.graph.ops.push_back(std::move(op));
        return {};
      }
      return unknown_field(set, key, " or a definition NAME = op(args)");
    };
    FUSOR_TRY(fields(field));
    if (with_reduce) return built(start, PointwiseReduceRegion::make(s));
    return built(start, PointwiseGraphRegion::make(s.graph));
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
};

// ---- printer ----------------------------------------------------------------------------

// Shortest form that reads back to the same double (to_chars without a precision).
std::string print_number(double v) {
  std::array<char, 64> buf{};
  const auto result = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), result.ptr);
}

std::string print_name(std::string_view s) {
  static constexpr std::array<std::string_view, 7> kNeedQuotes{"inputs", "output", "reduce", "inf",
                                                               "nan",    "true",   "false"};
  if (is_plain_ident(s) && std::find(kNeedQuotes.begin(), kNeedQuotes.end(), s) == kNeedQuotes.end())
    return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else if (u < 0x20 || u == 0x7f)
      out += "\\x" + hex_byte(u);
    else
      out += c;
  }
  return out + "\"";
}

std::string print_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + print_name(items[i]);
  return out + "]";
}

std::string print_bool(bool b) { return b ? "true" : "false"; }

std::string print_arg(const PointwiseArgSpec& arg) {
  if (const double* c = std::get_if<double>(&arg)) return print_number(*c);
  return print_name(std::get<std::string>(arg));
}

using Fields = std::vector<std::pair<std::string, std::string>>;

void add_graph(Fields& f, const PointwiseSpec& g) {
  f.emplace_back("inputs", print_list(g.inputs));
  for (const auto& op : g.ops) {
    std::string call = op.op + "(";
    for (size_t i = 0; i < op.args.size(); ++i) call += (i ? ", " : "") + print_arg(op.args[i]);
    f.emplace_back(print_name(op.out), call + ")");
  }
  f.emplace_back("output", print_name(g.output));
}

} // namespace

Expected<std::vector<Region>> parse_regions(std::string_view text) { return Parser(text).all(); }

Expected<Region> parse_region(std::string_view text) { return Parser(text).one(); }

Expected<std::vector<Region>> load_region_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_error(ErrorCode::io_error, "cannot read region file '" + path.string() + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot open region file '" + path.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::io_error, "cannot read region file '" + path.string() + "'");
  return parse_regions(text.str());
}

std::string print_region(const Region& region) {
  Fields f;
  std::visit(
      [&](const auto& r) {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, FusedRegion>) {
          const FusedSpec s = r.spec();
          f = {{"prologue", print_list(s.prologue)}, {"epilogue", print_list(s.epilogue)},
               {"residual", print_bool(s.residual)}, {"reduction", print_name(s.reduction)},
               {"eps", print_number(s.eps)},         {"storage", print_name(s.storage)},
               {"a_layout", print_name(s.a_layout)}, {"b_layout", print_name(s.b_layout)}};
        } else if constexpr (std::is_same_v<R, MatmulRegion>) {
          const MatmulSpec s = r.spec();
          f = {{"storage", print_name(s.storage)},
               {"transpose_a", print_bool(s.transpose_a)},
               {"transpose_b", print_bool(s.transpose_b)}};
        } else if constexpr (std::is_same_v<R, AttentionRegion>) {
          const AttentionSpec s = r.spec();
          f = {{"scale", print_number(s.scale)},
               {"causal", print_bool(s.causal)},
               {"q_transposed", print_bool(s.q_transposed)},
               {"k_transposed", print_bool(s.k_transposed)},
               {"storage", print_name(s.storage)}};
        } else if constexpr (std::is_same_v<R, GatedMatmulRegion>) {
          const GatedSpec s = r.spec();
          f = {{"gate_act", print_name(s.gate_act)}, {"storage", print_name(s.storage)}};
        } else if constexpr (std::is_same_v<R, PointwiseGraphRegion>) {
          add_graph(f, r.spec());
        } else if constexpr (std::is_same_v<R, PointwiseReduceRegion>) {
          const PointwiseReduceSpec s = r.spec();
          add_graph(f, s.graph);
          f.emplace_back("reduce", print_name(s.reduce));
        } else {
          static_assert(std::is_same_v<R, NormChainRegion>);
          const NormChainSpec s = r.spec();
          f = {{"norm", print_name(s.norm)},
               {"add_residual", print_bool(s.add_residual)},
               {"weight", print_bool(s.weight)},
               {"bias", print_bool(s.bias)},
               {"eps", print_number(s.eps)}};
        }
      },
      region);
  std::string out(region_kind_name(region_kind(region)));
  out += " { ";
  for (size_t i = 0; i < f.size(); ++i) out += (i ? "; " : "") + f[i].first + " = " + f[i].second;
  return out + " }";
}

} // namespace fusor
