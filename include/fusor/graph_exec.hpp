// The native executor: a plain C++ kernel for every graph op. It runs the ops discovery
// leaves unfused, folds constants at import, and infers shapes by execution.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/graph.hpp"

namespace fusor {

using ValueMap = std::map<std::string, GraphTensor>;

// Every graph op name the native executor runs, sorted.
std::vector<std::string_view> native_op_names();
bool native_op_known(std::string_view op);

// One node on its inputs (nullptr for an absent optional input). Errors name the node:
// E_SHAPE_MISMATCH for shapes that do not fit, E_GRAPH_INVALID for bad attributes or
// dtypes, E_ONNX_UNSUPPORTED_OP for an op the executor does not know.
Expected<std::vector<GraphTensor>> run_native_node(const Node& node, std::span<const GraphTensor* const> inputs);

// Runs the whole graph natively on `inputs` (one per graph input, by name); returns every
// value (inputs, constants, intermediates, outputs).
Expected<ValueMap> run_graph_native(const Graph& graph, const ValueMap& inputs);

// Every value's shape and dtype, found by running the graph on zeros of the declared input
// shapes (E_SHAPE_MISMATCH when an input dimension is free: -1).
struct ValueType {
  ElemType type = ElemType::f32;
  Shape shape;
};
Expected<std::map<std::string, ValueType>> infer_value_types(const Graph& graph);

// Folds every node whose inputs are all constants, and — when every input shape is known —
// the shape queries (shape, size) over computed values; then drops nodes and constants
// nothing reads. Semantics are unchanged: a folded value is what the node would compute.
Status fold_graph(Graph& graph);

} // namespace fusor
