// Host tensors: logical shape plus row-major (C-order) f32 data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fusor {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape); // "[8, 16]"

struct Tensor {
  Shape shape;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(Shape s) : shape(std::move(s)), data(static_cast<size_t>(shape_numel(shape)), 0.0f) {}
  Tensor(Shape s, std::vector<float> d) : shape(std::move(s)), data(std::move(d)) {}
  std::int64_t numel() const { return static_cast<std::int64_t>(data.size()); }
  std::int64_t rank() const { return static_cast<std::int64_t>(shape.size()); }
  bool operator==(const Tensor&) const = default;
};

// The same in double: what the reference evaluator computes before the f32 output.
struct TensorF64 {
  Shape shape;
  std::vector<double> data;
};

} // namespace fusor
