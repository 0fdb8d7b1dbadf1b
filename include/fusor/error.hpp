// Errors are values: a stable code (SPEC §7) plus a message naming the thing.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace fusor {

enum class ErrorCode {
  region_bad_layout,              // E_REGION_BAD_LAYOUT
  fused_epilogue_bad_dtype,       // E_FUSED_EPILOGUE_BAD_DTYPE
  fused_epilogue_bad_op,          // E_FUSED_EPILOGUE_BAD_OP
  fused_epilogue_bad_order,       // E_FUSED_EPILOGUE_BAD_ORDER
  fused_epilogue_missing_operand, // E_FUSED_EPILOGUE_MISSING_OPERAND
  shape_mismatch,                 // E_SHAPE_MISMATCH
  parse,                          // E_PARSE
  emit_unsupported,               // E_EMIT_UNSUPPORTED
  compile_failed,                 // E_COMPILE_FAILED
  runner_unavailable,             // E_RUNNER_UNAVAILABLE
  arbiter_forced_unknown,         // E_ARBITER_FORCED_UNKNOWN
  cache_corrupt,                  // E_CACHE_CORRUPT
  onnx_unsupported_op,            // E_ONNX_UNSUPPORTED_OP
  // Codes added by fusor beyond SPEC §7 (never reused for another meaning):
  region_bad_dtype,       // E_REGION_BAD_DTYPE: a non-fused region names an unknown/unsupported storage dtype
  region_bad_op,          // E_REGION_BAD_OP: a non-fused region names an unknown op or one outside its vocabulary
  region_bad_value,       // E_REGION_BAD_VALUE: a numeric field out of range (eps <= 0, non-finite scale)
  pointwise_bad_graph,    // E_POINTWISE_BAD_GRAPH: undefined id, redefinition, limits, dangling output
  io_error,               // E_IO: a file cannot be read or written
  npy_unsupported,        // E_NPY_UNSUPPORTED: a .npy dtype/order/version fusor does not read
  bad_argument,           // E_BAD_ARGUMENT: a caller passed an invalid option or operand count
  cache_unsafe,           // E_CACHE_UNSAFE: cache directory writable by other users
  internal,               // E_INTERNAL: a broken invariant inside fusor (a bug)
  oracle_rejected,        // E_ORACLE_REJECTED: a kernel failed verification (report in the message)
  graph_invalid,          // E_GRAPH_INVALID: an op graph/model is malformed (undefined value, bad attribute)
  onnx_unsupported_dtype, // E_ONNX_UNSUPPORTED_DTYPE: a model or tensor uses a dtype fusor does not compute in
  onnx_unavailable,       // E_ONNX_UNAVAILABLE: this fusor was built without libonnx/protobuf
};

// The stable string, e.g. "E_SHAPE_MISMATCH".
std::string_view code_name(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;

  // "E_CODE: message" — the form printed by the CLI and matched by tests.
  [[nodiscard]] std::string str() const;
};

inline Error make_error(ErrorCode code, std::string message) { return Error{code, std::move(message)}; }

// A value or an Error. Small on purpose: C++20 has no std::expected.
template <class T> class [[nodiscard]] Expected {
public:
  Expected(T val) : v_(std::move(val)) {}         // NOLINT(google-explicit-constructor)
  Expected(Error error) : v_(std::move(error)) {} // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const Error& error() const { return std::get<1>(v_); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

private:
  std::variant<T, Error> v_;
};

// Success or an Error.
class [[nodiscard]] Status {
public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {} // NOLINT(google-explicit-constructor)
  [[nodiscard]] bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

private:
  Error error_{ErrorCode::internal, {}};
  bool ok_ = true;
};

} // namespace fusor

// Propagate an error from an Expected/Status expression; binds the value otherwise.
#define FUSOR_CONCAT_INNER(a, b) a##b
#define FUSOR_CONCAT(a, b) FUSOR_CONCAT_INNER(a, b)
#define FUSOR_TRY_ASSIGN(decl, expr) FUSOR_TRY_ASSIGN_IMPL(FUSOR_CONCAT(fusor_try_, __LINE__), decl, expr)
#define FUSOR_TRY_ASSIGN_IMPL(tmp, decl, expr)                                                                         \
  auto tmp = (expr);                                                                                                   \
  if (!tmp.ok()) return tmp.error();                                                                                   \
  decl = std::move(tmp).value()
#define FUSOR_TRY(expr)                                                                                                \
  do {                                                                                                                 \
    auto fusor_try_status_ = (expr);                                                                                   \
    if (!fusor_try_status_.ok()) return fusor_try_status_.error();                                                     \
  } while (0)
