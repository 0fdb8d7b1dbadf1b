// Graph value types, attribute accessors and the structural check.
#include <set>

#include "fusor/graph.hpp"

namespace fusor {

std::string_view elem_type_name(ElemType type) {
  switch (type) {
  case ElemType::f32: return "f32";
  case ElemType::i64: return "i64";
  case ElemType::boolean: return "bool";
  }
  return "f32";
}

std::optional<ElemType> elem_type_from_name(std::string_view name) {
  for (ElemType t : {ElemType::f32, ElemType::i64, ElemType::boolean})
    if (elem_type_name(t) == name) return t;
  return std::nullopt;
}

GraphTensor GraphTensor::f32(Shape shape, FloatBuffer data) {
  GraphTensor t;
  t.shape = std::move(shape);
  t.f = std::move(data);
  return t;
}

GraphTensor GraphTensor::i64(Shape shape, std::vector<std::int64_t> data) {
  GraphTensor t;
  t.type = ElemType::i64;
  t.shape = std::move(shape);
  t.i = std::move(data);
  return t;
}

GraphTensor GraphTensor::boolean(Shape shape, std::vector<std::int64_t> data) {
  GraphTensor t = i64(std::move(shape), std::move(data));
  t.type = ElemType::boolean;
  return t;
}

GraphTensor GraphTensor::zeros(ElemType type, Shape shape) {
  const auto n = static_cast<size_t>(shape_numel(shape));
  if (type == ElemType::f32) return f32(std::move(shape), FloatBuffer(n, 0.0f));
  GraphTensor t = i64(std::move(shape), std::vector<std::int64_t>(n, 0));
  t.type = type;
  return t;
}

double GraphTensor::at(std::int64_t k) const {
  const auto u = static_cast<size_t>(k);
  return type == ElemType::f32 ? static_cast<double>(f[u]) : static_cast<double>(i[u]);
}

Tensor GraphTensor::to_tensor() const {
  if (type == ElemType::f32) return Tensor(shape, f);
  std::vector<float> data(i.size());
  for (size_t k = 0; k < i.size(); ++k) data[k] = static_cast<float>(i[k]);
  return Tensor(shape, std::move(data));
}

std::int64_t Node::attr_int(const std::string& key, std::int64_t fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* v = std::get_if<std::int64_t>(&it->second)) return *v;
  if (const auto* d = std::get_if<double>(&it->second)) return static_cast<std::int64_t>(*d);
  return fallback;
}

double Node::attr_float(const std::string& key, double fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  if (const auto* v = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*v);
  return fallback;
}

std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
  return fallback;
}

std::optional<std::vector<std::int64_t>> Node::attr_ints(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return std::nullopt;
  if (const auto* v = std::get_if<std::vector<std::int64_t>>(&it->second)) return *v;
  if (const auto* s = std::get_if<std::int64_t>(&it->second)) return std::vector<std::int64_t>{*s};
  return std::nullopt;
}

std::string Node::label() const {
  const std::string who = name.empty() ? (outputs.empty() ? std::string("?") : "-> " + outputs.front()) : name;
  return "node '" + who + "' (" + op + ")";
}

Status validate_graph(const Graph& graph) {
  std::set<std::string> defined;
  auto define = [&](const std::string& v, const std::string& by) -> Status {
    if (v.empty()) return {};
    if (!defined.insert(v).second)
      return make_error(ErrorCode::graph_invalid, "value '" + v + "' is defined twice (again by " + by + ")");
    return {};
  };
  for (const auto& in : graph.inputs) FUSOR_TRY(define(in.name, "graph input"));
  for (const auto& [name, t] : graph.constants) {
    FUSOR_TRY(define(name, "constant"));
    const auto n = static_cast<size_t>(shape_numel(t.shape));
    const size_t have = t.type == ElemType::f32 ? t.f.size() : t.i.size();
    if (n != have)
      return make_error(ErrorCode::graph_invalid, "constant '" + name + "' has shape " + shape_str(t.shape) +
                                                      " but holds " + std::to_string(have) + " values");
  }
  for (const auto& node : graph.nodes) {
    for (const auto& in : node.inputs)
      if (!in.empty() && !defined.count(in))
        return make_error(ErrorCode::graph_invalid,
                          node.label() + " reads '" + in + "', which is not defined before it");
    for (const auto& out : node.outputs) FUSOR_TRY(define(out, node.label()));
  }
  for (const auto& out : graph.outputs)
    if (!defined.count(out)) return make_error(ErrorCode::graph_invalid, "graph output '" + out + "' is never defined");
  return {};
}

} // namespace fusor
