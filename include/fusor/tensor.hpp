// Host tensors: logical shape plus row-major (C-order) f32 data.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

namespace fusor {

using Shape = std::vector<std::int64_t>;

// Storage that starts on a 64-byte cache line: the x86 lanes stream large outputs past the
// cache with non-temporal stores, whole lines at a time, and an output 16 bytes off a line
// made a 4096 x 4096 layer norm 1.2x slower (development VM, AMD EPYC).
template <class T> struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <class U> CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, kAlign); }
  template <class U> bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};
using FloatBuffer = std::vector<float, CacheLineAllocator<float>>;
// A kernel operand's raw storage bytes (f16/bf16 patterns, or f32 copied for another process).
using ByteBuffer = std::vector<char, CacheLineAllocator<char>>;
// Values compare whatever their storage (found by ADL through the allocator's namespace).
inline bool operator==(const FloatBuffer& a, const std::vector<float>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape); // "[8, 16]"

struct Tensor {
  Shape shape;
  FloatBuffer data;

  Tensor() = default;
  explicit Tensor(Shape s) : shape(std::move(s)), data(static_cast<size_t>(shape_numel(shape)), 0.0f) {}
  Tensor(Shape s, FloatBuffer d) : shape(std::move(s)), data(std::move(d)) {}
  // Values held elsewhere are copied onto cache lines (a template, so a braced list picks the
  // FloatBuffer constructor above).
  template <class Alloc>
  requires(!std::same_as<Alloc, CacheLineAllocator<float>>) Tensor(Shape s, const std::vector<float, Alloc>& d)
      : shape(std::move(s)), data(d.begin(), d.end()) {}
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
