// `fusor run MODEL`: import, discover regions, compile and verify them, execute the whole
// model, and report per region (kind, lane, oracle error vs budget, fused vs unfused time)
// and end to end (against the native unfused path and, when installed, ONNX Runtime).
#pragma once

#include <filesystem>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/graph.hpp"
#include "fusor/onnx_import.hpp"

namespace fusor {

// A model file: *.onnx (ONNX import with `onnx`) or anything else as op-graph text (*.graph).
Expected<Graph> load_model(const std::filesystem::path& path, const OnnxImportOptions& onnx = {});

// The transformer block shipped as examples/transformer_block.onnx, compiled into the
// library (cmake embeds the bytes), so `fusor run` works with no file.
std::span<const unsigned char> default_model_bytes();
inline constexpr std::string_view kDefaultModelName = "transformer_block.onnx";

struct ModelRunOptions {
  std::string model;               // empty: the embedded default transformer block
  std::vector<std::string> inputs; // .npy files in graph-input order; empty: deterministic N(0,1) inputs
  std::string out_dir;             // write each output as OUT_DIR/<name>.npy when set
  std::uint64_t seed = 1;
  int repeats = 5;                 // timed repetitions (median) after one warm-up run
  bool compare_onnxruntime = true; // run ONNX Runtime through python3 when it is installed
  bool allow_reference = false;    // ONNX ops outside fusor's set run on the reference evaluator
};

// Prints the report to `out`; returns the process exit code (0 ok, 1 a region's kernel was
// rejected by the oracle, 2 a user error, printed to `err`).
int run_model(const ModelRunOptions& options, std::ostream& out, std::ostream& err);

} // namespace fusor
