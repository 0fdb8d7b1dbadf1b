// .npy reader/writer (NumPy format 1.0/2.0/3.0, C order, little-endian f4/f2/f8/i8).
//
// Errors: a feature fusor does not read (version, dtype, byte order, Fortran order) is
// E_NPY_UNSUPPORTED; a damaged or unreadable file (bad magic, malformed header,
// truncated data, open/read/write failure) is E_IO. Every message names the file.
#include "fusor/npy.hpp"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>

#include "fusor/dtype.hpp"

namespace fusor {
namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// NumPy aligns the data start to 64 bytes and leaves room for the first axis to grow
// (numpy/lib/format.py: ARRAY_ALIGN, GROWTH_AXIS_MAX_DIGITS); we match it byte for byte.
constexpr size_t kAlign = 64;
constexpr size_t kGrowthDigits = 21;

struct DTypeInfo {
  NpyDType dtype;
  std::string_view code; // without the byte-order mark
  size_t itemsize;
};
constexpr DTypeInfo kDTypes[] = {
    {NpyDType::f32, "f4", 4}, {NpyDType::f16, "f2", 2}, {NpyDType::f64, "f8", 8}, {NpyDType::i64, "i8", 8}};

const DTypeInfo& dtype_info(NpyDType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d;
  return kDTypes[0];
}

Error io_error(const std::string& name, const std::string& what) {
  return make_error(ErrorCode::io_error, name + ": " + what);
}
Error unsupported(const std::string& name, const std::string& what) {
  return make_error(ErrorCode::npy_unsupported, name + ": " + what);
}

std::uint64_t load_le(const unsigned char* p, size_t n) {
  std::uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

void store_le(std::string& out, std::uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// ---- header dict: the Python literal subset NumPy writes ---------------------------------
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct Header {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

class HeaderParser {
public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  Expected<Header> parse() {
    Header h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    FUSOR_TRY(expect('{'));
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      FUSOR_TRY_ASSIGN(std::string key, string_literal());
      FUSOR_TRY(expect(':'));
      if (key == "descr") {
        if (seen_descr) return bad("key 'descr' repeated");
        seen_descr = true;
        skip_ws();
        if (peek() == '[') return unsupported(name_, "structured dtypes are not supported (descr is a list)");
        FUSOR_TRY_ASSIGN(h.descr, string_literal());
      } else if (key == "fortran_order") {
        if (seen_order) return bad("key 'fortran_order' repeated");
        seen_order = true;
        FUSOR_TRY_ASSIGN(h.fortran_order, boolean());
      } else if (key == "shape") {
        if (seen_shape) return bad("key 'shape' repeated");
        seen_shape = true;
        FUSOR_TRY_ASSIGN(h.shape, tuple());
      } else {
        return bad("unexpected key '" + key + "' (NumPy headers have exactly descr, fortran_order, shape)");
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') return bad("expected ',' or '}'");
    }
    ++pos_; // '}'
    skip_ws();
    if (pos_ != s_.size()) return bad("unexpected text after '}'");
    if (!seen_descr || !seen_order || !seen_shape)
      return bad(std::string("missing key '") +
                 (!seen_descr   ? "descr"
                  : !seen_order ? "fortran_order"
                                : "shape") +
                 "'");
    return h;
  }

private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  Error bad(const std::string& what) const {
    return io_error(name_, "malformed header at offset " + std::to_string(pos_) + ": " + what);
  }
  Status expect(char c) {
    skip_ws();
    if (peek() != c) return bad(std::string("expected '") + c + "'");
    ++pos_;
    return {};
  }
  Expected<std::string> string_literal() {
    skip_ws();
    const char q = peek();
    if (q != '\'' && q != '"') return bad("expected a quoted string");
    const size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) return bad("unterminated string");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  Expected<bool> boolean() {
    skip_ws();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}})
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    return bad("expected True or False");
  }
  Expected<Shape> tuple() {
    FUSOR_TRY(expect('('));
    Shape shape;
    while (true) {
      skip_ws();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return bad("expected a non-negative integer dimension");
      std::int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const int digit = peek() - '0';
        if (v > (std::numeric_limits<std::int64_t>::max() - digit) / 10) return bad("dimension too large");
        v = v * 10 + digit;
        ++pos_;
      }
      if (peek() == 'L') ++pos_; // Python 2 longs, as old NumPy wrote them
      shape.push_back(v);
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') return bad("expected ',' or ')' in shape");
    }
    ++pos_; // ')'
    return shape;
  }

  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

Expected<DTypeInfo> resolve_descr(const std::string& descr, const std::string& name) {
  std::string_view code = descr;
  char order = '=';
  if (!code.empty() && (code[0] == '<' || code[0] == '>' || code[0] == '=' || code[0] == '|')) {
    order = code[0];
    code.remove_prefix(1);
  }
  const DTypeInfo* info = nullptr;
  for (const auto& d : kDTypes)
    if (d.code == code) info = &d;
  if (info == nullptr)
    return unsupported(name, "dtype '" + descr + "' is not supported (fusor reads <f4, <f2, <f8, <i8)");
  // '=' (native) and '|' (not applicable) both mean host order; fusor hosts are little-endian.
  static_assert(std::endian::native == std::endian::little, "npy.cpp assumes a little-endian host");
  if (order == '>') return unsupported(name, "big-endian dtype '" + descr + "' is not supported");
  return *info;
}

float decode(const unsigned char* p, NpyDType dtype) {
  switch (dtype) {
  case NpyDType::f32: return std::bit_cast<float>(static_cast<std::uint32_t>(load_le(p, 4)));
  case NpyDType::f16: return half_bits_to_float(static_cast<std::uint16_t>(load_le(p, 2)));
  case NpyDType::f64: return static_cast<float>(std::bit_cast<double>(load_le(p, 8)));
  case NpyDType::i64: return static_cast<float>(static_cast<std::int64_t>(load_le(p, 8)));
  }
  return 0.0f;
}

// f32 → i64 truncates toward zero like numpy's astype; NaN becomes 0 and ±inf/out of
// range saturate, where a plain cast would be undefined behaviour.
std::int64_t to_i64(float x) {
  if (std::isnan(x)) return 0;
  constexpr double lim = 9223372036854775808.0; // 2^63
  const double t = std::trunc(static_cast<double>(x));
  if (t >= lim) return std::numeric_limits<std::int64_t>::max();
  if (t < -lim) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(t);
}

void encode(std::string& out, float x, NpyDType dtype) {
  switch (dtype) {
  case NpyDType::f32: store_le(out, std::bit_cast<std::uint32_t>(x), 4); return;
  case NpyDType::f16: store_le(out, float_to_half_bits(x), 2); return;
  case NpyDType::f64: store_le(out, std::bit_cast<std::uint64_t>(static_cast<double>(x)), 8); return;
  case NpyDType::i64: store_le(out, static_cast<std::uint64_t>(to_i64(x)), 8); return;
  }
}

std::string shape_repr(const Shape& shape) { // Python's repr of a tuple
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

} // namespace

Expected<Tensor> parse_npy(std::span<const unsigned char> bytes, const std::string& name) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return io_error(name, "not a .npy file (bad magic; expected \\x93NUMPY)");
  const int major = bytes[6], minor = bytes[7];
  if (!((major == 1 || major == 2 || major == 3) && minor == 0))
    return unsupported(name, "format version " + std::to_string(major) + "." + std::to_string(minor) +
                                 " is not supported (fusor reads 1.0, 2.0, 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) return io_error(name, "truncated header length");
  const size_t header_len = load_le(bytes.data() + 8, len_bytes);
  const size_t header_start = 8 + len_bytes;
  if (bytes.size() - header_start < header_len)
    return io_error(name, "truncated header: " + std::to_string(header_len) + " bytes declared, " +
                              std::to_string(bytes.size() - header_start) + " present");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + header_start, header_len);

  HeaderParser parser(text, name);
  FUSOR_TRY_ASSIGN(Header header, parser.parse());
  FUSOR_TRY_ASSIGN(DTypeInfo info, resolve_descr(header.descr, name));
  if (header.fortran_order && header.shape.size() > 1)
    return unsupported(name, "Fortran-order arrays are not supported (save with np.ascontiguousarray)");

  // Size in bytes without overflow: a hostile header must not trigger a huge allocation.
  const size_t available = bytes.size() - header_start - header_len;
  std::uint64_t numel = 1;
  for (auto d : header.shape) {
    if (d != 0 && numel > available / static_cast<std::uint64_t>(d)) {
      numel = std::numeric_limits<std::uint64_t>::max();
      break;
    }
    numel *= static_cast<std::uint64_t>(d);
  }
  const bool too_big = numel > available / info.itemsize;
  const std::uint64_t need = too_big ? 0 : numel * info.itemsize;
  if (too_big || need > available)
    return io_error(name, "truncated data: shape " + shape_str(header.shape) + " of " + header.descr +
                              " needs more than " + std::to_string(available) + " bytes present");
  if (need < available)
    return io_error(name, std::to_string(available - need) + " unexpected bytes after the data of shape " +
                              shape_str(header.shape));

  Tensor t(header.shape);
  const unsigned char* p = bytes.data() + header_start + header_len;
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = decode(p + i * info.itemsize, info.dtype);
  return t;
}

Expected<Tensor> read_npy(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return io_error(name, "is a directory, not a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(name, std::string("cannot open: ") + std::strerror(errno));
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return io_error(name, "read failed");
  return parse_npy(bytes, name);
}

std::string serialize_npy(const Tensor& tensor, NpyDType dtype) {
  const DTypeInfo& info = dtype_info(dtype);
  std::string dict = "{'descr': '<" + std::string(info.code) +
                     "', 'fortran_order': False, 'shape': " + shape_repr(tensor.shape) + ", }";
  if (!tensor.shape.empty()) dict.append(kGrowthDigits - std::to_string(tensor.shape[0]).size(), ' ');
  // Version 1.0 unless the header length overflows its 16-bit field, as NumPy decides.
  auto padded = [&](size_t prefix) {
    // Like NumPy, an already aligned header still gets a full 64 bytes of padding.
    const size_t pad = kAlign - (prefix + dict.size() + 1) % kAlign;
    return dict + std::string(pad, ' ') + "\n";
  };
  std::string header = padded(10);
  const bool v2 = header.size() > 0xffff;
  if (v2) header = padded(12);

  std::string out(reinterpret_cast<const char*>(kMagic), sizeof kMagic);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  store_le(out, header.size(), v2 ? 4 : 2);
  out += header;
  out.reserve(out.size() + tensor.data.size() * info.itemsize);
  for (float x : tensor.data) encode(out, x, dtype);
  return out;
}

Status write_npy(const std::filesystem::path& path, const Tensor& tensor, NpyDType dtype) {
  const std::string name = path.string();
  if (tensor.numel() != shape_numel(tensor.shape))
    return make_error(ErrorCode::internal, name + ": tensor of shape " + shape_str(tensor.shape) + " holds " +
                                               std::to_string(tensor.numel()) + " values");
  const std::string bytes = serialize_npy(tensor, dtype);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(name, std::string("cannot open for writing: ") + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return io_error(name, "write failed");
  return {};
}

} // namespace fusor
