// A minimal protobuf wire-format writer for building ONNX models inside tests (no libonnx
// needed to write them): fields, ValueInfoProto and AttributeProto pieces.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace fusor::testing::onnx_writer {

inline std::string varint(std::uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  return out + static_cast<char>(v);
}
inline std::string field_varint(int field, std::uint64_t v) {
  return varint(static_cast<std::uint64_t>(field) << 3) + varint(v);
}
inline std::string field_bytes(int field, const std::string& s) {
  return varint((static_cast<std::uint64_t>(field) << 3) | 2) + varint(s.size()) + s;
}
inline std::string field_float(int field, float f) {
  std::string out = varint((static_cast<std::uint64_t>(field) << 3) | 5);
  out.append(reinterpret_cast<const char*>(&f), 4);
  return out;
}

// ValueInfoProto{name, type{tensor_type{elem_type, shape{dim{dim_value}...}}}}
inline std::string value_info(const std::string& name, int elem_type, std::initializer_list<int> dims) {
  std::string shape;
  for (int d : dims) shape += field_bytes(1, field_varint(1, static_cast<std::uint64_t>(d)));
  const std::string tensor = field_varint(1, static_cast<std::uint64_t>(elem_type)) + field_bytes(2, shape);
  return field_bytes(1, name) + field_bytes(2, field_bytes(1, tensor));
}

// AttributeProto FLOAT{name, f, type=FLOAT}
inline std::string float_attr(const std::string& name, float v) {
  return field_bytes(5, field_bytes(1, name) + field_float(2, v) + field_varint(20, 1));
}

} // namespace fusor::testing::onnx_writer
