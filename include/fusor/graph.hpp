// Op graphs: what an ONNX import produces, what discovery (SPEC §6) cuts into regions and
// what the native executor runs. One op per node, values named SSA-style.
//
// Values carry a small dtype story: f32 is what fusor computes on; i64 and bool exist for
// shapes, indices and masks (folded at import where constant, executed natively where not).
#pragma once

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/tensor.hpp"

namespace fusor {

enum class ElemType { f32, i64, boolean };
std::string_view elem_type_name(ElemType type); // "f32", "i64", "bool"
std::optional<ElemType> elem_type_from_name(std::string_view name);

// A graph value's data: f32 values live in `f`, i64 and bool (0/1) values in `i`.
struct GraphTensor {
  ElemType type = ElemType::f32;
  Shape shape;
  FloatBuffer f; // lent to region operands (Tensor::data) without a copy
  std::vector<std::int64_t> i;

  static GraphTensor f32(Shape shape, FloatBuffer data);
  template <class Alloc>
  requires(!std::same_as<Alloc, CacheLineAllocator<float>>) static GraphTensor
      f32(Shape shape, const std::vector<float, Alloc>& data) {
    return f32(std::move(shape), FloatBuffer(data.begin(), data.end()));
  }
  static GraphTensor i64(Shape shape, std::vector<std::int64_t> data);
  static GraphTensor boolean(Shape shape, std::vector<std::int64_t> data);
  static GraphTensor zeros(ElemType type, Shape shape);
  std::int64_t numel() const { return shape_numel(shape); }
  // Element k as a double (i64 values past 2^53 round).
  double at(std::int64_t k) const;
  // The f32 view (a copy); i64/bool convert.
  Tensor to_tensor() const;
  bool operator==(const GraphTensor&) const = default;
};

using Attr = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>, std::vector<double>>;

struct Node {
  std::string op;                  // graph op name, e.g. "matmul", "gelu_erf", "reshape"
  std::vector<std::string> inputs; // "" marks an absent optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attr> attrs;
  std::string name; // the source node's name (ONNX), for messages

  std::int64_t attr_int(const std::string& key, std::int64_t fallback) const;
  double attr_float(const std::string& key, double fallback) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::optional<std::vector<std::int64_t>> attr_ints(const std::string& key) const;
  // "node 'name' (op)" or "node #k (op)" when unnamed.
  std::string label() const;
};

// An ONNX op outside fusor's set, imported with OnnxImportOptions::allow_reference, is a
// node named "ref.<ONNX op type>" (e.g. "ref.Cos") keeping its ONNX attributes: the native
// executor runs it on the reference evaluator's table, and discovery never fuses it.
inline constexpr std::string_view kReferenceOpPrefix = "ref.";
inline bool is_reference_op(std::string_view op) { return op.starts_with(kReferenceOpPrefix); }

struct GraphInput {
  std::string name;
  ElemType type = ElemType::f32;
  Shape shape; // -1 marks a dimension the model leaves free
};

struct Graph {
  std::string name = "graph";
  std::vector<GraphInput> inputs;
  std::map<std::string, GraphTensor> constants;
  std::vector<Node> nodes; // topologically ordered
  std::vector<std::string> outputs;
};

// Structural checks: every input of a node is a graph input, a constant or an earlier
// output; no value is defined twice; every graph output is defined. E_GRAPH_INVALID.
Status validate_graph(const Graph& graph);

// ---- The op-graph text form ------------------------------------------------------------
//   graph NAME
//   input x: f32[2, 8]
//   const w: f32[8, 4] = normal(seed=1, scale=0.5)   # or = [1, 2, ...] or = 0.5 (filled)
//   y = matmul(x, w)
//   a, b = op(x, _, y; axis=-1, eps=1e-05, perm=[1, 0], mode="constant")
//   output y
// `_` is an absent optional input; attribute values are ints, floats (spelled with '.',
// 'e', inf or nan), quoted strings, or lists of either. `#` starts a comment.
struct PrintOptions {
  // Constants with more elements print as `= elided(N)`, which does not parse back.
  std::int64_t max_inline = std::int64_t{1} << 40;
};
// The deterministic N(0,1)·scale values of `normal(seed=, scale=)` constants (splitmix64 +
// Box–Muller); also the default inputs of `fusor run`.
FloatBuffer normal_values(std::int64_t n, std::uint64_t seed, double scale);

std::string print_graph(const Graph& graph, const PrintOptions& options = {});
Expected<Graph> parse_graph(std::string_view text);
Expected<Graph> load_graph_file(const std::filesystem::path& path);

} // namespace fusor
