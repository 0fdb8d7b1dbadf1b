// .npy array files (NumPy format 1.0/2.0/3.0): f32, f16, f64 and i64 in C order.
#pragma once

#include <filesystem>
#include <span>
#include <string>

#include "fusor/error.hpp"
#include "fusor/tensor.hpp"

namespace fusor {

enum class NpyDType { f32, f16, f64, i64 };

// Reads any supported dtype and converts to f32. Anything else (Fortran order, other
// dtypes, big-endian, object arrays, truncated data) is E_NPY_UNSUPPORTED / E_IO with
// a message naming the file and the problem.
Expected<Tensor> read_npy(const std::filesystem::path& path);
Expected<Tensor> parse_npy(std::span<const unsigned char> bytes, const std::string& name);

// Writes `tensor` converted to `dtype` (f32 by default).
Status write_npy(const std::filesystem::path& path, const Tensor& tensor, NpyDType dtype = NpyDType::f32);
std::string serialize_npy(const Tensor& tensor, NpyDType dtype = NpyDType::f32);

} // namespace fusor
