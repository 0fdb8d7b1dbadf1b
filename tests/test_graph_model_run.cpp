// `fusor run` as a library call on the embedded transformer block: regions are found,
// verified and run, and the whole model matches the unfused native path.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <regex>
#include <sstream>

#include "fusor/model_exec.hpp"
#include "fusor/model_run.hpp"
#include "fusor/onnx_import.hpp"
#include "support/compare.hpp"

namespace fusor {
namespace {

TEST(ModelRun, EmbeddedTransformerBlockRunsFusedAndMatchesTheUnfusedPath) {
  if (!onnx_import_available()) GTEST_SKIP() << "built without libonnx";
  testing::use_test_cache();
  ModelRunOptions o;
  o.repeats = 1;
  o.compare_onnxruntime = false;
  std::ostringstream out, err;
  const int rc = run_model(o, out, err);
  const std::string report = out.str();
  std::cout << report; // the report in the test log shows what ran
  ASSERT_EQ(rc, 0) << err.str() << report;
  // The block's structure: attention, two layer-norm chains, the MLP GEMM epilogues.
  EXPECT_NE(report.find("attention"), std::string::npos) << report;
  EXPECT_NE(report.find("norm_chain"), std::string::npos) << report;
  EXPECT_NE(report.find("matmul + bias + gelu_erf"), std::string::npos) << report;
  EXPECT_NE(report.find("matmul + bias + residual"), std::string::npos) << report;
  // The report names every target the arbiter chose among, not one as if every region ran there.
  std::string names;
  for (const auto& t : dispatch_target_names()) names += (names.empty() ? "" : ", ") + t;
  EXPECT_NE(report.find((dispatch_target_names().size() > 1 ? "targets: " : "target: ") + names), std::string::npos)
      << report;
  // Fused and unfused outputs agree to f32 rounding of a 64-wide block.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(report, m, std::regex(R"(max \|fused - unfused\| = ([0-9.e+-]+))"))) << report;
  EXPECT_LT(std::stod(m[1]), 1e-3) << report;
}

TEST(ModelRun, MissingModelIsAnIoError) {
  ModelRunOptions o;
  o.model = "/nonexistent/model.graph";
  std::ostringstream out, err;
  EXPECT_EQ(run_model(o, out, err), 2);
  EXPECT_NE(err.str().find("E_IO"), std::string::npos) << err.str();
}

} // namespace
} // namespace fusor

namespace fusor {
namespace {

TEST(ModelRun, AgreesWithOnnxRuntimeWhenInstalled) {
  if (!onnx_import_available()) GTEST_SKIP() << "built without libonnx";
  if (std::system("python3 -c 'import onnxruntime' >/dev/null 2>&1") != 0) GTEST_SKIP() << "onnxruntime not installed";
  testing::use_test_cache();
  ModelRunOptions o;
  o.repeats = 1;
  std::ostringstream out, err;
  ASSERT_EQ(run_model(o, out, err), 0) << err.str() << out.str();
  std::smatch m;
  const std::string report = out.str();
  std::cout << report.substr(report.find("end to end"));
  ASSERT_TRUE(std::regex_search(report, m, std::regex(R"(max \|fusor - onnxruntime\| = ([0-9.e+-]+))"))) << report;
  EXPECT_LT(std::stod(m[1]), 1e-3) << report;
}

} // namespace
} // namespace fusor
