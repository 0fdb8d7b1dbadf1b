#include "fusor/error.hpp"

namespace fusor {

std::string_view code_name(ErrorCode code) {
  switch (code) {
  case ErrorCode::region_bad_layout: return "E_REGION_BAD_LAYOUT";
  case ErrorCode::fused_epilogue_bad_dtype: return "E_FUSED_EPILOGUE_BAD_DTYPE";
  case ErrorCode::fused_epilogue_bad_op: return "E_FUSED_EPILOGUE_BAD_OP";
  case ErrorCode::fused_epilogue_bad_order: return "E_FUSED_EPILOGUE_BAD_ORDER";
  case ErrorCode::fused_epilogue_missing_operand: return "E_FUSED_EPILOGUE_MISSING_OPERAND";
  case ErrorCode::shape_mismatch: return "E_SHAPE_MISMATCH";
  case ErrorCode::parse: return "E_PARSE";
  case ErrorCode::emit_unsupported: return "E_EMIT_UNSUPPORTED";
  case ErrorCode::compile_failed: return "E_COMPILE_FAILED";
  case ErrorCode::runner_unavailable: return "E_RUNNER_UNAVAILABLE";
  case ErrorCode::arbiter_forced_unknown: return "E_ARBITER_FORCED_UNKNOWN";
  case ErrorCode::cache_corrupt: return "E_CACHE_CORRUPT";
  case ErrorCode::onnx_unsupported_op: return "E_ONNX_UNSUPPORTED_OP";
  case ErrorCode::region_bad_dtype: return "E_REGION_BAD_DTYPE";
  case ErrorCode::region_bad_op: return "E_REGION_BAD_OP";
  case ErrorCode::region_bad_value: return "E_REGION_BAD_VALUE";
  case ErrorCode::pointwise_bad_graph: return "E_POINTWISE_BAD_GRAPH";
  case ErrorCode::io_error: return "E_IO";
  case ErrorCode::npy_unsupported: return "E_NPY_UNSUPPORTED";
  case ErrorCode::bad_argument: return "E_BAD_ARGUMENT";
  case ErrorCode::cache_unsafe: return "E_CACHE_UNSAFE";
  case ErrorCode::internal: return "E_INTERNAL";
  case ErrorCode::oracle_rejected: return "E_ORACLE_REJECTED";
  case ErrorCode::graph_invalid: return "E_GRAPH_INVALID";
  case ErrorCode::onnx_unsupported_dtype: return "E_ONNX_UNSUPPORTED_DTYPE";
  case ErrorCode::onnx_unavailable: return "E_ONNX_UNAVAILABLE";
  }
  return "E_INTERNAL";
}

std::string Error::str() const {
  std::string out(code_name(code));
  // E_PARSE messages already start with " at LINE:COL: ..." so they read as SPEC asks.
  out += code == ErrorCode::parse ? "" : ": ";
  out += message;
  return out;
}

} // namespace fusor
