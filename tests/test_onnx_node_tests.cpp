// Every ONNX node test in ../shared/onnx_node_tests through `check-onnx`, fused and native:
// each float32 test passes; the only skips are dtypes fusor does not compute in.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>

#include "fusor/onnx_check.hpp"
#include "fusor/onnx_import.hpp"
#include "support/compare.hpp"

namespace fusor {
namespace {

const std::filesystem::path kDir = std::filesystem::path(FUSOR_SHARED_DIR) / "onnx_node_tests";

void check_all(bool fuse) {
  if (!onnx_import_available()) GTEST_SKIP() << "built without libonnx";
  if (!std::filesystem::is_directory(kDir)) GTEST_SKIP() << kDir << " is not present";
  testing::use_test_cache();
  std::ostringstream out;
  OnnxCheckOptions o;
  o.fuse = fuse;
  const std::filesystem::path dirs[] = {kDir};
  auto sum = check_onnx(dirs, o, out);
  ASSERT_TRUE(sum.ok()) << sum.error().str();
  EXPECT_EQ(sum->failed, 0) << out.str();
  EXPECT_GT(sum->passed, 200) << out.str();
  // Skips name an unsupported dtype, and nothing float32 is skipped.
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("SKIP ", 0) != 0) continue;
    EXPECT_NE(line.find("skipped: "), std::string::npos) << line;
    EXPECT_EQ(line.find("skipped: float32"), std::string::npos) << line;
  }
  std::cout << out.str().substr(out.str().rfind('\n', out.str().size() - 2) + 1);
}

TEST(OnnxNodeTests, AllPassFused) { check_all(true); }
TEST(OnnxNodeTests, AllPassNative) { check_all(false); }

TEST(OnnxNodeTests, ComparisonRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::string why;
  EXPECT_TRUE(outputs_match(GraphTensor::f32({2}, {nan, inf}), GraphTensor::f32({2}, {nan, inf}), 1e-3, 1e-5, &why));
  EXPECT_FALSE(outputs_match(GraphTensor::f32({1}, {-inf}), GraphTensor::f32({1}, {inf}), 1e-3, 1e-5, &why));
  EXPECT_FALSE(outputs_match(GraphTensor::f32({1}, {nan}), GraphTensor::f32({1}, {0}), 1e-3, 1e-5, &why));
  // 100 vs 100.1: |d| = 0.1 ≤ 1e-5 + 1e-3·100.1 holds; 100 vs 100.2 does not.
  EXPECT_TRUE(outputs_match(GraphTensor::f32({1}, {100.0f}), GraphTensor::f32({1}, {100.1f}), 1e-3, 1e-5, &why));
  EXPECT_FALSE(outputs_match(GraphTensor::f32({1}, {100.0f}), GraphTensor::f32({1}, {100.2f}), 1e-3, 1e-5, &why));
  EXPECT_FALSE(outputs_match(GraphTensor::f32({2}, {1, 2}), GraphTensor::f32({1, 2}, {1, 2}), 1e-3, 1e-5, &why));
  EXPECT_NE(why.find("shape"), std::string::npos);
}

} // namespace
} // namespace fusor
