// `fusor check-onnx`: run ONNX node-test directories (model.onnx + test_data_set_*/
// input_N.pb → output_N.pb) through import, discovery and whole-graph execution.
#pragma once

#include <filesystem>
#include <ostream>
#include <span>

#include "fusor/error.hpp"
#include "fusor/graph_exec.hpp"

namespace fusor {

struct OnnxCheckOptions {
  double rtol = 1e-3;
  double atol = 1e-5;
  bool fuse = true;     // discover regions and run them on a target; false: native ops only
  bool verbose = false; // a line for passing and skipped tests too
  // Import ops outside fusor's set that the reference evaluator has (OnnxImportOptions);
  // the lines of such tests name them: "PASS test_cos (reference evaluator: Cos)".
  bool allow_reference = false;
};

struct OnnxCheckSummary {
  int passed = 0, failed = 0, skipped = 0;
};

// Each path is a node-test directory (holding model.onnx) or a directory of them (run in
// name order). Prints a line per failing test ("FAIL name: why") and per skip ("SKIP name:
// skipped: <dtype>", only for dtypes fusor does not compute in), then
// "N passed, M failed, K skipped". Errors only for unusable paths.
Expected<OnnxCheckSummary> check_onnx(std::span<const std::filesystem::path> paths, const OnnxCheckOptions& options,
                                      std::ostream& out);

// |got - want| <= atol + rtol·|want| elementwise, NaN equal to NaN, infinities matching in
// sign; shapes must match. On failure, `why` says where.
bool outputs_match(const GraphTensor& got, const GraphTensor& want, double rtol, double atol, std::string* why);

} // namespace fusor
