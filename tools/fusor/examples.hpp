// The bundled examples/*.region, compiled into the binary at build time
// (cmake/embed_examples.cmake writes the definition), so `fusor run` needs no files.
#pragma once

#include <span>
#include <string_view>

namespace fusor::cli {

struct EmbeddedExample {
  std::string_view name; // file name, e.g. "gated_silu.region"
  std::string_view text; // the file's contents
};

// Sorted by file name.
std::span<const EmbeddedExample> embedded_examples();

} // namespace fusor::cli
