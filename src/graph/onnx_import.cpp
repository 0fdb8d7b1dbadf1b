// ONNX ModelProto → op graph. Each ONNX op maps to one graph op, or to a short chain of
// them (Gemm, variadic Max/Min/Sum, Swish, HardSigmoid, HardSwish); with allow_reference an
// op of the reference evaluator's table becomes a "ref.<op type>" node; then constant and
// shape computations fold (fold_graph).
#include "fusor/onnx_import.hpp"

#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "fusor/graph_exec.hpp"
#include "graph/kernels.hpp"

#if FUSOR_HAVE_ONNX
#include <onnx/onnx_pb.h>
#endif

namespace fusor {

std::string onnx_dtype_name(int t) {
  static const char* names[] = {"undefined", "float32", "uint8",     "int8",       "uint16",  "int16",
                                "int32",     "int64",   "string",    "bool",       "float16", "float64",
                                "uint32",    "uint64",  "complex64", "complex128", "bfloat16"};
  if (t >= 0 && t < static_cast<int>(std::size(names))) return names[t];
  switch (t) {
  case 17: return "float8e4m3fn";
  case 18: return "float8e4m3fnuz";
  case 19: return "float8e5m2";
  case 20: return "float8e5m2fnuz";
  case 21: return "uint4";
  case 22: return "int4";
  case 23: return "float4e2m1";
  default: return "dtype " + std::to_string(t);
  }
}

std::vector<std::string> reference_onnx_op_types() {
  std::vector<std::string> types;
  for (auto name : graph_kernels::reference_op_names()) types.emplace_back(name.substr(kReferenceOpPrefix.size()));
  return types;
}

#if !FUSOR_HAVE_ONNX

namespace {
Error unavailable() {
  return make_error(ErrorCode::onnx_unavailable,
                    "this fusor was built without libonnx/protobuf (install libonnx-dev libprotobuf-dev and "
                    "reconfigure); ONNX models cannot be read");
}
} // namespace

bool onnx_import_available() { return false; }
Expected<Graph> import_onnx_file(const std::filesystem::path&, const OnnxImportOptions&) { return unavailable(); }
Expected<Graph> import_onnx_bytes(std::span<const unsigned char>, const std::string&, const OnnxImportOptions&) {
  return unavailable();
}
Expected<NamedTensor> read_onnx_tensor_file(const std::filesystem::path&) { return unavailable(); }

#else

namespace {

Expected<std::string> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Expected<ElemType> elem_type(int t, const std::string& what) {
  switch (t) {
  case onnx::TensorProto_DataType_FLOAT: return ElemType::f32;
  case onnx::TensorProto_DataType_INT64: return ElemType::i64;
  case onnx::TensorProto_DataType_BOOL: return ElemType::boolean;
  default:
    return make_error(ErrorCode::onnx_unsupported_dtype,
                      what + " is " + onnx_dtype_name(t) +
                          "; fusor computes in float32 (with int64/bool for shapes and masks)");
  }
}

template <class T> T read_le(const std::string& raw, size_t k) {
  T v;
  std::memcpy(&v, raw.data() + k * sizeof(T), sizeof(T));
  return v;
}

Expected<GraphTensor> convert_tensor(const onnx::TensorProto& t, const std::string& what) {
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL)
    return make_error(ErrorCode::graph_invalid,
                      what + " keeps its data in an external file, which fusor does not read");
  Shape shape(t.dims().begin(), t.dims().end());
  for (auto d : shape)
    if (d < 0) return make_error(ErrorCode::graph_invalid, what + " has a negative dimension");
  const auto n = static_cast<size_t>(shape_numel(shape));
  const bool raw = t.has_raw_data();
  const std::string& bytes = t.raw_data();
  auto count_error = [&](size_t have) {
    return make_error(ErrorCode::graph_invalid, what + " of shape " + shape_str(shape) + " holds " +
                                                    std::to_string(have) + " values, expected " + std::to_string(n));
  };
  switch (t.data_type()) {
  case onnx::TensorProto_DataType_FLOAT: {
    FloatBuffer v(n);
    const size_t have = raw ? bytes.size() / 4 : static_cast<size_t>(t.float_data_size());
    if (have != n) return count_error(have);
    for (size_t k = 0; k < n; ++k) v[k] = raw ? read_le<float>(bytes, k) : t.float_data(static_cast<int>(k));
    return GraphTensor::f32(shape, std::move(v));
  }
  case onnx::TensorProto_DataType_INT64:
  case onnx::TensorProto_DataType_INT32: {
    const bool i32 = t.data_type() == onnx::TensorProto_DataType_INT32;
    std::vector<std::int64_t> v(n);
    const size_t have =
        raw ? bytes.size() / (i32 ? 4 : 8) : static_cast<size_t>(i32 ? t.int32_data_size() : t.int64_data_size());
    if (have != n) return count_error(have);
    for (size_t k = 0; k < n; ++k) {
      const int ki = static_cast<int>(k);
      v[k] = raw ? (i32 ? read_le<std::int32_t>(bytes, k) : read_le<std::int64_t>(bytes, k))
                 : (i32 ? t.int32_data(ki) : t.int64_data(ki));
    }
    return GraphTensor::i64(shape, std::move(v));
  }
  case onnx::TensorProto_DataType_BOOL: {
    std::vector<std::int64_t> v(n);
    const size_t have = raw ? bytes.size() : static_cast<size_t>(t.int32_data_size());
    if (have != n) return count_error(have);
    for (size_t k = 0; k < n; ++k) v[k] = (raw ? bytes[k] : t.int32_data(static_cast<int>(k))) != 0;
    return GraphTensor::boolean(shape, std::move(v));
  }
  default: {
    FUSOR_TRY_ASSIGN(ElemType unused, elem_type(t.data_type(), what));
    (void)unused;
    return make_error(ErrorCode::internal, "unreachable dtype");
  }
  }
}

class Importer {
public:
  Importer(const onnx::ModelProto& model, const OnnxImportOptions& options) : model_(model), options_(options) {
    for (const auto& op : model.opset_import())
      if (op.domain().empty() || op.domain() == "ai.onnx") opset_ = static_cast<int>(op.version());
  }

  Expected<Graph> run() {
    const onnx::GraphProto& gp = model_.graph();
    g_.name = gp.name().empty() ? "model" : gp.name();
    for (const auto& init : gp.initializer()) {
      FUSOR_TRY_ASSIGN(GraphTensor t, convert_tensor(init, "initializer '" + init.name() + "'"));
      g_.constants[init.name()] = std::move(t);
    }
    for (const auto& in : gp.input()) {
      if (g_.constants.count(in.name())) continue; // an initializer listed as an input (IR < 4)
      GraphInput gi;
      gi.name = in.name();
      const auto& tt = in.type().tensor_type();
      FUSOR_TRY_ASSIGN(gi.type, elem_type(tt.elem_type(), "graph input '" + in.name() + "'"));
      for (const auto& d : tt.shape().dim()) gi.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
      g_.inputs.push_back(std::move(gi));
    }
    for (const auto& out : gp.output()) {
      FUSOR_TRY_ASSIGN(ElemType unused,
                       elem_type(out.type().tensor_type().elem_type(), "graph output '" + out.name() + "'"));
      (void)unused;
      g_.outputs.push_back(out.name());
    }
    for (int k = 0; k < gp.node_size(); ++k) FUSOR_TRY(import_node(gp.node(k), k));
    FUSOR_TRY(validate_graph(g_));
    FUSOR_TRY(fold_graph(g_));
    return std::move(g_);
  }

private:
  const onnx::ModelProto& model_;
  OnnxImportOptions options_;
  int opset_ = 1;
  Graph g_;
  int temp_ = 0;

  static std::string label(const onnx::NodeProto& n, int k) {
    return "node '" + (n.name().empty() ? "#" + std::to_string(k) : n.name()) + "' (" + n.op_type() + ")";
  }

  std::string temp(const std::string& base) { return base + ".fz" + std::to_string(temp_++); }

  std::string scalar(float v) {
    const std::string name = temp("const");
    g_.constants[name] = GraphTensor::f32({}, {v});
    return name;
  }

  Node make(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
            const onnx::NodeProto& src) {
    Node n;
    n.op = op;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    n.name = src.name();
    return n;
  }

  // A chain of binary `op` over the node's inputs (variadic Max/Min/Sum).
  void chain(const std::string& op, const onnx::NodeProto& n) {
    std::string acc = n.input(0);
    if (n.input_size() == 1) {
      g_.nodes.push_back(make("identity", {acc}, {n.output(0)}, n));
      return;
    }
    for (int k = 1; k < n.input_size(); ++k) {
      const std::string out = k + 1 == n.input_size() ? n.output(0) : temp(n.output(0));
      g_.nodes.push_back(make(op, {acc, n.input(k)}, {out}, n));
      acc = out;
    }
  }

  Status copy_attrs(const onnx::NodeProto& n, Node& node, int k) {
    for (const auto& a : n.attribute()) {
      switch (a.type()) {
      case onnx::AttributeProto_AttributeType_INT: node.attrs[a.name()] = static_cast<std::int64_t>(a.i()); break;
      case onnx::AttributeProto_AttributeType_FLOAT: node.attrs[a.name()] = static_cast<double>(a.f()); break;
      case onnx::AttributeProto_AttributeType_STRING: node.attrs[a.name()] = a.s(); break;
      case onnx::AttributeProto_AttributeType_INTS:
        node.attrs[a.name()] = std::vector<std::int64_t>(a.ints().begin(), a.ints().end());
        break;
      case onnx::AttributeProto_AttributeType_FLOATS:
        node.attrs[a.name()] = std::vector<double>(a.floats().begin(), a.floats().end());
        break;
      case onnx::AttributeProto_AttributeType_TENSOR: break; // read by the op's own mapping
      default:
        return make_error(ErrorCode::onnx_unsupported_op,
                          label(n, k) + ": attribute '" + a.name() + "' of a kind fusor does not read (graph/sparse)");
      }
    }
    return {};
  }

  Status import_constant(const onnx::NodeProto& n, int k) {
    for (const auto& a : n.attribute()) {
      GraphTensor t;
      if (a.name() == "value") {
        FUSOR_TRY_ASSIGN(t, convert_tensor(a.t(), label(n, k)));
      } else if (a.name() == "value_float") {
        t = GraphTensor::f32({}, {a.f()});
      } else if (a.name() == "value_floats") {
        t = GraphTensor::f32({a.floats_size()}, FloatBuffer(a.floats().begin(), a.floats().end()));
      } else if (a.name() == "value_int") {
        t = GraphTensor::i64({}, {a.i()});
      } else if (a.name() == "value_ints") {
        t = GraphTensor::i64({a.ints_size()}, std::vector<std::int64_t>(a.ints().begin(), a.ints().end()));
      } else {
        return make_error(ErrorCode::onnx_unsupported_op, label(n, k) + ": Constant attribute '" + a.name() + "'");
      }
      g_.constants[n.output(0)] = std::move(t);
      return {};
    }
    return make_error(ErrorCode::graph_invalid, label(n, k) + ": Constant without a value");
  }

  Status import_node(const onnx::NodeProto& n, int k) {
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      return make_error(ErrorCode::onnx_unsupported_op,
                        label(n, k) + ": op '" + n.op_type() + "' of domain '" + n.domain() + "' is not supported");
    const std::string& t = n.op_type();
    if (n.output_size() == 0) return make_error(ErrorCode::graph_invalid, label(n, k) + " has no output");
    if (t == "Constant") return import_constant(n, k);
    std::vector<std::string> ins(n.input().begin(), n.input().end());
    std::vector<std::string> outs(n.output().begin(), n.output().end());
    Node node = make("", ins, outs, n);
    FUSOR_TRY(copy_attrs(n, node, k));

    static const std::map<std::string, std::string> direct = {
        {"Add", "add"},
        {"Sub", "sub"},
        {"Mul", "mul"},
        {"Div", "div"},
        {"Relu", "relu"},
        {"Sigmoid", "sigmoid"},
        {"Tanh", "tanh"},
        {"Erf", "erf"},
        {"Exp", "exp"},
        {"Log", "log"},
        {"Sqrt", "sqrt"},
        {"Reciprocal", "reciprocal"},
        {"Neg", "neg"},
        {"Abs", "abs"},
        {"Sign", "sign"},
        {"Softplus", "softplus"},
        {"Pow", "pow"},
        {"Mod", "mod"},
        {"MatMul", "matmul"},
        {"Softmax", "softmax"},
        {"LayerNormalization", "layer_norm"},
        {"RMSNormalization", "rmsnorm"},
        {"Attention", "attention"},
        {"ReduceSum", "reduce_sum"},
        {"ReduceMean", "reduce_mean"},
        {"ReduceMax", "reduce_max"},
        {"ReduceMin", "reduce_min"},
        {"Shape", "shape"},
        {"Size", "size"},
        {"Reshape", "reshape"},
        {"Flatten", "flatten"},
        {"Transpose", "transpose"},
        {"Unsqueeze", "unsqueeze"},
        {"Squeeze", "squeeze"},
        {"Concat", "concat"},
        {"Gather", "gather"},
        {"Expand", "expand"},
        {"Slice", "slice"},
        {"Range", "range"},
        {"Pad", "pad"},
        {"Identity", "identity"},
        {"Where", "where"},
        {"Equal", "equal"},
        {"Less", "less"},
        {"LessOrEqual", "less_equal"},
        {"Greater", "greater"},
        {"GreaterOrEqual", "greater_equal"},
        {"And", "and"},
        {"Or", "or"},
        {"Xor", "xor"},
        {"Not", "not"},
        {"CastLike", "cast_like"},
        {"Dropout", "identity"},
    };
    if (auto it = direct.find(t); it != direct.end()) {
      node.op = it->second;
      if (t == "Softmax" && opset_ < 13)
        return make_error(ErrorCode::onnx_unsupported_op,
                          label(n, k) + ": Softmax before opset 13 (2-D coercion semantics) is not supported");
      if (t == "Dropout") node.outputs.resize(1);
      if (t == "Slice" && opset_ < 10)
        return make_error(ErrorCode::onnx_unsupported_op, label(n, k) + ": Slice before opset 10 is not supported");
      g_.nodes.push_back(std::move(node));
      return {};
    }
    if (t == "Gelu") {
      const std::string approx = node.attr_string("approximate", "none");
      if (approx != "none" && approx != "tanh")
        return make_error(ErrorCode::graph_invalid, label(n, k) + ": approximate must be \"none\" or \"tanh\"");
      g_.nodes.push_back(make(approx == "tanh" ? "gelu" : "gelu_erf", ins, outs, n));
      return {};
    }
    if (t == "Max" || t == "Min" || t == "Sum") {
      chain(t == "Max" ? "maximum" : t == "Min" ? "minimum" : "add", n);
      return {};
    }
    if (t == "Cast") {
      FUSOR_TRY_ASSIGN(ElemType to, elem_type(static_cast<int>(node.attr_int("to", 0)), label(n, k) + " target"));
      node.op = "cast";
      node.attrs = {{"to", std::string(elem_type_name(to))}};
      g_.nodes.push_back(std::move(node));
      return {};
    }
    if (t == "ConstantOfShape") {
      node.op = "constant_of_shape";
      node.attrs.clear();
      GraphTensor v = GraphTensor::f32({1}, {0.0f});
      for (const auto& a : n.attribute()) {
        if (a.name() != "value") continue;
        FUSOR_TRY_ASSIGN(v, convert_tensor(a.t(), label(n, k) + " value"));
      }
      node.attrs["dtype"] = std::string(elem_type_name(v.type));
      node.attrs["value"] = v.numel() > 0 ? v.at(0) : 0.0;
      g_.nodes.push_back(std::move(node));
      return {};
    }
    if (t == "Gemm") return import_gemm(n, node);
    if (t == "Swish" || t == "HardSigmoid" || t == "HardSwish") return import_gate(n, node);
    const bool in_reference = graph_kernels::is_reference_table_op(std::string(kReferenceOpPrefix) + t);
    if (in_reference && options_.allow_reference) return import_reference(n, std::move(node));
    return make_error(ErrorCode::onnx_unsupported_op,
                      label(n, k) + ": op '" + t + "' is not supported by the ONNX importer" +
                          (in_reference ? " (rerun with --allow-reference to evaluate it on the reference evaluator)"
                           : options_.allow_reference ? " nor by the reference evaluator"
                                                      : ""));
  }

  // An op of the reference evaluator's table keeps its ONNX attributes; the two whose
  // semantics changed with the opset are brought to the current form here.
  Status import_reference(const onnx::NodeProto& n, Node node) {
    const std::string& t = n.op_type();
    node.op = std::string(kReferenceOpPrefix) + t;
    if (t == "Clip" && opset_ < 11) { // min/max were attributes; since opset 11 they are inputs
      node.inputs.resize(1);
      for (const char* bound : {"min", "max"}) {
        auto it = node.attrs.find(bound);
        node.inputs.push_back(it == node.attrs.end() ? std::string()
                                                     : scalar(static_cast<float>(node.attr_float(bound, 0.0))));
        if (it != node.attrs.end()) node.attrs.erase(it);
      }
    }
    if ((t == "LogSoftmax" || t == "Hardmax") && opset_ < 13) { // 2-D coercion at axis (default 1)
      node.attrs["axis"] = node.attr_int("axis", 1);
      node.attrs["coerce_2d"] = std::int64_t{1};
    }
    g_.nodes.push_back(std::move(node));
    return {};
  }

  // Y = alpha · op(A) op(B) + beta · C  →  [transpose] → matmul → [mul alpha] → [add beta·C]
  Status import_gemm(const onnx::NodeProto& n, const Node& node) {
    std::string a = n.input(0), b = n.input(1);
    const std::string y = n.output(0);
    for (auto [flag, v] : {std::pair{"transA", &a}, std::pair{"transB", &b}})
      if (node.attr_int(flag, 0) != 0) {
        const std::string tv = temp(y);
        Node tr = make("transpose", {*v}, {tv}, n);
        tr.attrs["perm"] = std::vector<std::int64_t>{1, 0};
        g_.nodes.push_back(std::move(tr));
        *v = tv;
      }
    const double alpha = node.attr_float("alpha", 1.0), beta = node.attr_float("beta", 1.0);
    const bool has_c = n.input_size() > 2 && !n.input(2).empty() && beta != 0.0;
    std::string cur = (alpha == 1.0 && !has_c) ? y : temp(y);
    g_.nodes.push_back(make("matmul", {a, b}, {cur}, n));
    if (alpha != 1.0) {
      const std::string next = has_c ? temp(y) : y;
      g_.nodes.push_back(make("mul", {cur, scalar(static_cast<float>(alpha))}, {next}, n));
      cur = next;
    }
    if (has_c) {
      std::string c = n.input(2);
      if (beta != 1.0) {
        const std::string scaled = temp(y);
        g_.nodes.push_back(make("mul", {c, scalar(static_cast<float>(beta))}, {scaled}, n));
        c = scaled;
      }
      g_.nodes.push_back(make("add", {cur, c}, {y}, n));
    }
    return {};
  }

  // Swish(α) = x·sigmoid(αx) (silu when α = 1); HardSigmoid(α, β) = max(0, min(1, αx + β));
  // HardSwish = x · HardSigmoid(1/6, 1/2). Decomposed into table ops.
  Status import_gate(const onnx::NodeProto& n, const Node& node) {
    const std::string& t = n.op_type();
    const std::string x = n.input(0), y = n.output(0);
    if (t == "Swish") {
      const double alpha = node.attr_float("alpha", 1.0);
      if (alpha == 1.0) {
        g_.nodes.push_back(make("silu", {x}, {y}, n));
        return {};
      }
      const std::string ax = temp(y), s = temp(y);
      g_.nodes.push_back(make("mul", {x, scalar(static_cast<float>(alpha))}, {ax}, n));
      g_.nodes.push_back(make("sigmoid", {ax}, {s}, n));
      g_.nodes.push_back(make("mul", {x, s}, {y}, n));
      return {};
    }
    const bool swish = t == "HardSwish";
    const double alpha = swish ? 1.0 / 6.0 : node.attr_float("alpha", 0.2);
    const double beta = swish ? 0.5 : node.attr_float("beta", 0.5);
    const std::string ax = temp(y), axb = temp(y), lo = temp(y), hs = swish ? temp(y) : y;
    g_.nodes.push_back(make("mul", {x, scalar(static_cast<float>(alpha))}, {ax}, n));
    g_.nodes.push_back(make("add", {ax, scalar(static_cast<float>(beta))}, {axb}, n));
    g_.nodes.push_back(make("minimum", {axb, scalar(1.0f)}, {lo}, n));
    g_.nodes.push_back(make("maximum", {lo, scalar(0.0f)}, {hs}, n));
    if (swish) g_.nodes.push_back(make("mul", {x, hs}, {y}, n));
    return {};
  }
};

} // namespace

bool onnx_import_available() { return true; }

Expected<Graph> import_onnx_bytes(std::span<const unsigned char> bytes, const std::string& what,
                                  const OnnxImportOptions& options) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return make_error(ErrorCode::graph_invalid, what + " is not a readable ONNX model (protobuf parse failed)");
  return Importer(model, options).run();
}

Expected<Graph> import_onnx_file(const std::filesystem::path& path, const OnnxImportOptions& options) {
  FUSOR_TRY_ASSIGN(std::string bytes, read_bytes(path));
  auto g = import_onnx_bytes(std::span(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()),
                             path.string(), options);
  if (!g) return make_error(g.error().code, path.filename().string() + ": " + g.error().message);
  return g;
}

Expected<NamedTensor> read_onnx_tensor_file(const std::filesystem::path& path) {
  FUSOR_TRY_ASSIGN(std::string bytes, read_bytes(path));
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes))
    return make_error(ErrorCode::graph_invalid, path.string() + " is not a readable TensorProto");
  FUSOR_TRY_ASSIGN(GraphTensor g, convert_tensor(t, path.filename().string()));
  return NamedTensor{t.name(), std::move(g)};
}

#endif

} // namespace fusor
