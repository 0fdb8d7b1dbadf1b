// ONNX models → op graphs (Debian's libonnx + protobuf). Optional at build time: without
// libonnx every call returns E_ONNX_UNAVAILABLE.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/graph.hpp"

namespace fusor {

// True when this fusor was built with libonnx.
bool onnx_import_available();

struct OnnxImportOptions {
  // An op outside fusor's set that the reference evaluator's table has (Cos, Elu, Clip,
  // ReduceL2, LogSoftmax...: reference_onnx_op_types()) becomes a "ref.<op type>" node the
  // native executor evaluates in double, never fused; without it that op is an error.
  bool allow_reference = false;
};

// Imports the model's main graph. An op fusor has no kernel for is E_ONNX_UNSUPPORTED_OP
// naming the op type and the node (and, for an op of the reference evaluator's table,
// saying that --allow-reference would run it); a dtype fusor does not compute in (f16,
// f64, int8...) is E_ONNX_UNSUPPORTED_DTYPE naming it. Constant subgraphs are folded, and
// with fully known input shapes the shape computations (Shape, Size, ...) fold too (see
// fold_graph).
Expected<Graph> import_onnx_file(const std::filesystem::path& path, const OnnxImportOptions& options = {});
Expected<Graph> import_onnx_bytes(std::span<const unsigned char> bytes, const std::string& what,
                                  const OnnxImportOptions& options = {});

// The ONNX op types OnnxImportOptions::allow_reference imports, sorted ("Acos", ...).
std::vector<std::string> reference_onnx_op_types();

// A serialized TensorProto (the input_N.pb / output_N.pb files of ONNX node tests).
struct NamedTensor {
  std::string name;
  GraphTensor tensor;
};
Expected<NamedTensor> read_onnx_tensor_file(const std::filesystem::path& path);

// The ONNX dtype name for messages ("float16", "int8"...), from its TensorProto enum value.
std::string onnx_dtype_name(int onnx_dtype);

} // namespace fusor
