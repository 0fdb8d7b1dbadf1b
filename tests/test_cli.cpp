// The fusor binary, run as a child process: help, usage errors, parse, ref, run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "fusor/npy.hpp"
#include "fusor/onnx_import.hpp"
#include "fusor/operand_gen.hpp"
#include "fusor/reference.hpp"
#include "fusor/region_text.hpp"
#include "fusor/toolchain.hpp"
#include "support/compare.hpp"

namespace fs = std::filesystem;
using namespace fusor;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A scratch directory per test, which is also the child's working directory.
class Cli : public ::testing::Test {
protected:
  void SetUp() override {
    fusor::testing::use_test_cache(); // children inherit it: no test writes to ~/.cache
    dir_ = fs::temp_directory_path() / ("fusor_test_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs `fusor ARGS` in the scratch directory, after the shell assignments in `env`;
  // ARGS is shell text (paths here have no spaces).
  Result fusor(const std::string& args, const std::string& env = {}) const {
    const fs::path err = dir_ / "stderr.txt";
    const std::string cmd =
        "cd '" + dir_.string() + "' && " + env + " '" FUSOR_BIN "' " + args + " 2>'" + err.string() + "'";
    Result r;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return r;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
    const int status = ::pclose(pipe);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = slurp(err);
    return r;
  }

  fs::path write_text(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }

  // Writes each operand as in0.npy, in1.npy, ...; returns the --in argument list.
  std::string write_operands(const std::vector<Tensor>& ops, NpyDType dtype = NpyDType::f32) const {
    std::string args;
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::string name = "in" + std::to_string(i) + ".npy";
      EXPECT_TRUE(write_npy(dir_ / name, ops[i], dtype).ok());
      args += " " + name;
    }
    return args;
  }

  fs::path dir_;
};

Region parsed(const std::string& text) {
  auto r = parse_region(text);
  EXPECT_TRUE(r.ok()) << r.error().str();
  return std::move(r).value();
}

const char* kFusedText = "fused { epilogue = [bias, gelu]; residual = true }";

ProblemShape gemm_dims(std::int64_t m, std::int64_t n, std::int64_t k) {
  ProblemShape d;
  d.M = m;
  d.N = n;
  d.K = k;
  return d;
}

const char* kKinds[] = {"fused", "matmul", "attention", "gated", "pointwise", "pointwise_reduce", "norm_chain"};

} // namespace

// ---- help and usage errors -------------------------------------------------------------------

TEST_F(Cli, HelpListsCommandsAndExitCodes) {
  const Result r = fusor("--help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* cmd : {"parse", "ref", "run", "--version", "Exit status"})
    EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd << "\n" << r.out;
}

TEST_F(Cli, CommandHelpDescribesOptionsAndOperandOrder) {
  const Result ref = fusor("ref --help");
  EXPECT_EQ(ref.code, 0) << ref.err;
  for (const char* text : {"--in", "--out", "--region", "A[M,K] B[K,N] [bias[N]] [residual[M,N]]", "Q[..,M,D]",
                           "A[M,K] Wg[K,H] Wu[K,H]", "x[..,N] [residual[..,N]] [gamma[N]] [beta[N]]"})
    EXPECT_NE(ref.out.find(text), std::string::npos) << text << "\n" << ref.out;
  const Result run = fusor("run --help");
  EXPECT_EQ(run.code, 0) << run.err;
  for (const char* text : {"--target", "reference", "--in", "lane="})
    EXPECT_NE(run.out.find(text), std::string::npos) << text << "\n" << run.out;
  const Result parse = fusor("parse --help");
  EXPECT_EQ(parse.code, 0) << parse.err;
  EXPECT_NE(parse.out.find("E_PARSE"), std::string::npos) << parse.out;
}

TEST_F(Cli, Version) {
  const Result r = fusor("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, std::string("fusor ") + FUSOR_VERSION + "\n");
}

TEST_F(Cli, UsageErrorsExit2) {
  const Result unknown = fusor("frobnicate x");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown command 'frobnicate'"), std::string::npos) << unknown.err;
  for (const char* args : {"--bogus", "", "parse", "parse --bogus x.region", "ref x.region --out o.npy",
                           "run --target gpu", "run --region 0 x.region"}) {
    const Result r = fusor(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_FALSE(r.err.empty()) << args;
  }
}

// ---- parse -----------------------------------------------------------------------------------

TEST_F(Cli, ParsePrintsCanonicalForm) {
  const Result r = fusor("parse '" FUSOR_EXAMPLES_DIR "/gated_silu.region'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "gated { gate_act = silu; storage = f32 }\n");

  write_text("two.region", "# two blocks\nmatmul { transpose_b = true }\nnorm_chain { weight = true }\n");
  const Result two = fusor("parse two.region");
  EXPECT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(two.out, "matmul { storage = f32; transpose_a = false; transpose_b = true }\n"
                     "norm_chain { norm = rmsnorm; add_residual = false; weight = true; bias = false; eps = 1e-05 }\n");
}

TEST_F(Cli, ParseEveryExampleOneKindEachFromStdin) {
  std::string all;
  for (const auto& e : fs::directory_iterator(FUSOR_EXAMPLES_DIR))
    if (e.path().extension() == ".region") all += slurp(e.path());
  write_text("all.region", all);
  const Result r = fusor("parse - < all.region");
  ASSERT_EQ(r.code, 0) << r.err;
  size_t lines = 0;
  for (char c : r.out) lines += c == '\n';
  EXPECT_EQ(lines, std::size(kKinds));
  for (const char* kind : kKinds) EXPECT_NE(r.out.find(std::string(kind) + " {"), std::string::npos) << kind;
}

TEST_F(Cli, ParseErrorsExit2WithCode) {
  write_text("bad.region", "# a typo on line 3\nfused {\n  epilogue = [bias, gelu]\n  residual = true\n}\n");
  const Result r = fusor("parse bad.region");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  // Line 4, column 3: `residual` where ';' or '}' must follow the epilogue list.
  EXPECT_NE(r.err.find("E_PARSE at 4:3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bad.region"), std::string::npos) << r.err;

  write_text("order.region", "fused { epilogue = [bias, bias] }\n");
  const Result order = fusor("parse order.region");
  EXPECT_EQ(order.code, 2);
  EXPECT_NE(order.err.find("E_FUSED_EPILOGUE_BAD_ORDER"), std::string::npos) << order.err;

  const Result missing = fusor("parse no_such.region");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("E_IO"), std::string::npos) << missing.err;
}

// ---- ref -------------------------------------------------------------------------------------

TEST_F(Cli, RefMatchesEvaluateReference) {
  write_text("f.region", kFusedText);
  const Region region = parsed(kFusedText);
  const auto ops = make_operands(region, gemm_dims(5, 7, 3), 11, 0.5);
  const Result r = fusor("ref f.region --in" + write_operands(ops) + " --out out.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  auto got = read_npy(dir_ / "out.npy");
  ASSERT_TRUE(got.ok()) << got.error().str();
  auto want = evaluate_reference(region, ops);
  ASSERT_TRUE(want.ok()) << want.error().str();
  EXPECT_EQ(*got, *want); // f32 .npy is lossless, so the files agree bit for bit
}

// Hand-computed: [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]], B passed transposed
// (transpose_b) as i64 and A as f16, so dtype conversion and raw orientation are exercised.
TEST_F(Cli, RefHandComputedMatmul) {
  write_text("mm.region", "matmul { transpose_b = true }");
  ASSERT_TRUE(write_npy(dir_ / "a.npy", Tensor({2, 2}, {1, 2, 3, 4}), NpyDType::f16).ok());
  ASSERT_TRUE(write_npy(dir_ / "bt.npy", Tensor({2, 2}, {5, 7, 6, 8}), NpyDType::i64).ok());
  const Result r = fusor("ref mm.region --in a.npy bt.npy --out c.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  auto c = read_npy(dir_ / "c.npy");
  ASSERT_TRUE(c.ok()) << c.error().str();
  EXPECT_EQ(*c, Tensor({2, 2}, {19, 22, 43, 50}));
  EXPECT_NE(slurp(dir_ / "c.npy").find("'<f4'"), std::string::npos); // the output is f32
}

TEST_F(Cli, RefMissingBiasExit2BeforeWriting) {
  write_text("f.region", kFusedText);
  const auto ops = make_operands(parsed(kFusedText), gemm_dims(4, 6, 3), 1);
  const Result r = fusor("ref f.region --in" + write_operands({ops[0], ops[1]}) + " --out out.npy");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("E_FUSED_EPILOGUE_MISSING_OPERAND"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("A B bias residual"), std::string::npos) << r.err; // the operand-order note
  EXPECT_FALSE(fs::exists(dir_ / "out.npy"));
}

TEST_F(Cli, RefOperandErrorsExit2) {
  write_text("g.region", "gated { gate_act = silu }");
  const Region gated = parsed("gated { gate_act = silu }");
  auto ops = make_operands(gated, gemm_dims(4, 6, 3), 1);
  ops[2] = Tensor({3, 5}); // Wu must have Wg's shape [3, 6]
  const Result shape = fusor("ref g.region --in" + write_operands(ops) + " --out o.npy");
  EXPECT_EQ(shape.code, 2);
  EXPECT_NE(shape.err.find("E_SHAPE_MISMATCH"), std::string::npos) << shape.err;
  EXPECT_NE(shape.err.find("Wu"), std::string::npos) << shape.err;

  const Result unreadable = fusor("ref g.region --in in0.npy nope.npy in2.npy --out o.npy");
  EXPECT_EQ(unreadable.code, 2);
  EXPECT_NE(unreadable.err.find("E_IO"), std::string::npos) << unreadable.err;
  EXPECT_NE(unreadable.err.find("nope.npy"), std::string::npos) << unreadable.err;

  write_text("junk.npy", "not an array");
  const Result junk = fusor("ref g.region --in in0.npy junk.npy in2.npy --out o.npy");
  EXPECT_EQ(junk.code, 2);
  EXPECT_NE(junk.err.find("junk.npy"), std::string::npos) << junk.err;

  const Result unwritable =
      fusor("ref g.region --in" + write_operands(make_operands(gated, gemm_dims(4, 6, 3), 1)) + " --out no_dir/o.npy");
  EXPECT_EQ(unwritable.code, 2);
  EXPECT_NE(unwritable.err.find("E_IO"), std::string::npos) << unwritable.err;
}

TEST_F(Cli, RefRegionSelection) {
  write_text("two.region", "matmul { }\nmatmul { transpose_b = true }\n");
  ASSERT_TRUE(write_npy(dir_ / "a.npy", Tensor({1, 2}, {1, 2})).ok());
  ASSERT_TRUE(write_npy(dir_ / "b.npy", Tensor({2, 2}, {1, 10, 100, 1000})).ok());
  const Result ambiguous = fusor("ref two.region --in a.npy b.npy --out c.npy");
  EXPECT_EQ(ambiguous.code, 2);
  EXPECT_NE(ambiguous.err.find("--region"), std::string::npos) << ambiguous.err;

  // Block 2 reads b as B^T: [1,2] @ [[1,100],[10,1000]] = [21, 2100]; block 1: [201, 2010].
  ASSERT_EQ(fusor("ref two.region --region 2 --in a.npy b.npy --out c.npy").code, 0);
  EXPECT_EQ(read_npy(dir_ / "c.npy")->data, (std::vector<float>{21, 2100}));
  ASSERT_EQ(fusor("ref two.region --region 1 --in a.npy b.npy --out c.npy").code, 0);
  EXPECT_EQ(read_npy(dir_ / "c.npy")->data, (std::vector<float>{201, 2010}));

  const Result range = fusor("ref two.region --region 3 --in a.npy b.npy --out c.npy");
  EXPECT_EQ(range.code, 2);
  EXPECT_NE(range.err.find("out of range"), std::string::npos) << range.err;
}

// ---- run -------------------------------------------------------------------------------------

TEST_F(Cli, RunExamplesShowsEveryKind) {
  const Result r = fusor("run --examples");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* kind : kKinds) EXPECT_NE(r.out.find("\n" + std::string(kind) + " "), std::string::npos) << kind;
  for (const char* column : {"operands", "lane", "time_ms", "max|err|"})
    EXPECT_NE(r.out.find(column), std::string::npos) << column << "\n" << r.out;
  // The examples are embedded: the working directory (a scratch dir) has no examples/.
  EXPECT_FALSE(fs::exists(dir_ / "examples"));
}

TEST_F(Cli, RunFileOnUserArrays) {
  write_text("n.region", "norm_chain { norm = layer_norm; weight = true; bias = true }");
  const Region region = parsed("norm_chain { norm = layer_norm; weight = true; bias = true }");
  ProblemShape d;
  d.output = {3, 8};
  const auto ops = make_operands(region, d, 5);
  const Result r = fusor("run n.region --target reference --in" + write_operands(ops) + " --out y.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("lane=reference time_ms=", 0), 0u) << r.out;
  auto got = read_npy(dir_ / "y.npy");
  ASSERT_TRUE(got.ok()) << got.error().str();
  EXPECT_EQ(*got, *evaluate_reference(region, ops));

  const Result no_inputs = fusor("run n.region");
  EXPECT_EQ(no_inputs.code, 2);
  EXPECT_NE(no_inputs.err.find("--in x gamma beta"), std::string::npos) << no_inputs.err;
}

TEST_F(Cli, RunUnknownTargetIsAUsageError) {
  const Result r = fusor("run --target tpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown target 'tpu'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("x86"), std::string::npos) << "lists the targets: " << r.err;
  const Result stray = fusor("run --in a.npy");
  EXPECT_EQ(stray.code, 2);
  EXPECT_NE(stray.err.find("need a region FILE"), std::string::npos) << stray.err;
}

TEST_F(Cli, RegionsListsAReferenceNodeUnfusedAndFlagsAreDocumented) {
  write_text("m.graph", "input x: f32[2, 3]\ny = relu(x)\nc = ref.Cos(y)\noutput c\n");
  const Result r = fusor("regions m.graph");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(ref.Cos): reference evaluator (--allow-reference)"), std::string::npos) << r.out;
  for (const char* cmd : {"run --help", "regions --help", "check-onnx --help"})
    EXPECT_NE(fusor(cmd).out.find("--allow-reference"), std::string::npos) << cmd;
  const Result examples = fusor("run --examples --allow-reference");
  EXPECT_EQ(examples.code, 2);
  EXPECT_NE(examples.err.find("--allow-reference applies to a model"), std::string::npos) << examples.err;
}

// ---- native lanes through the CLI (child processes: a bad kernel or operand never takes
// the caller down) -----------------------------------------------------------------------

class CliLanes : public Cli {
protected:
  // A private cache and corpus per test.
  Result fusor_env(const std::string& args) const {
    return fusor(args, "FUSOR_CACHE_DIR='" + (dir_ / "cache").string() + "' FUSOR_CORPUS='" +
                           (dir_ / "corpus.json").string() + "'");
  }
};

TEST_F(CliLanes, RunOnX86PrintsLaneAndMatchesReference) {
  const Region region = parse_region("fused { epilogue = [bias, gelu] }").value();
  ProblemShape dims;
  dims.M = 17, dims.N = 13, dims.K = 31;
  const auto ops = make_operands(region, dims, 1, 0.5);
  write_text("r.region", "fused { epilogue = [bias, gelu] }\n");
  const auto r = fusor_env("run r.region --target x86 --in" + write_operands(ops) + " --out y.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("lane=x86_", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("time_ms="), std::string::npos);
  auto y = read_npy(dir_ / "y.npy");
  ASSERT_TRUE(y.ok());
  const Tensor ref = evaluate_reference(region, ops).value();
  ASSERT_EQ(y->data.size(), ref.data.size());
  for (size_t i = 0; i < ref.data.size(); ++i) EXPECT_NEAR(y->data[i], ref.data[i], 1e-3);

  // --repeats: time_ms is the median of that many warm calls, and the line says how many.
  const auto timed = fusor_env("run r.region --target x86 --repeats 3 --in" + write_operands(ops) + " --out z.npy");
  ASSERT_EQ(timed.code, 0) << timed.err;
  EXPECT_EQ(timed.out.rfind("lane=x86_", 0), 0u) << timed.out;
  EXPECT_NE(timed.out.find(" repeats=3"), std::string::npos) << timed.out;
  auto z = read_npy(dir_ / "z.npy");
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(*z, *y) << "a repeated call writes what one call writes";
}

TEST_F(CliLanes, MissingBiasOnX86IsACleanErrorInTheChild) {
  const Region region = parse_region("fused { epilogue = [bias, relu]; residual = true }").value();
  ProblemShape dims;
  dims.M = 8, dims.N = 16, dims.K = 12;
  auto ops = make_operands(region, dims, 2, 0.2);
  ops.resize(2); // A and B only
  write_text("r.region", "fused { epilogue = [bias, relu]; residual = true }\n");
  for (const char* target : {"x86", "auto"}) {
    const auto r = fusor_env(std::string("run r.region --target ") + target + " --in" + write_operands(ops));
    EXPECT_EQ(r.code, 2) << "exit 2, not a signal: " << r.err;
    EXPECT_NE(r.err.find("E_FUSED_EPILOGUE_MISSING_OPERAND"), std::string::npos) << r.err;
  }
}

TEST_F(CliLanes, ForcingAnUnknownLaneListsTheRegisteredOnes) {
  write_text("r.region", "matmul { }\n");
  const auto r = fusor_env("explain r.region --dims 8,8,8 --force nonexistent");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("E_ARBITER_FORCED_UNKNOWN"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("x86_c"), std::string::npos) << "names the registered candidates: " << r.err;
}

TEST_F(CliLanes, ExplainPrintsEveryCandidateAndTheWinner) {
  write_text("r.region", "norm_chain { norm = layer_norm; weight = true }\n");
  const auto r = fusor_env("explain r.region --dims 16,64 --target x86");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("candidate"), std::string::npos);
  EXPECT_NE(r.out.find("x86_c"), std::string::npos);
  EXPECT_NE(r.out.find("winner: "), std::string::npos) << r.out;
}

TEST_F(CliLanes, EmitOpensWithRegionLaneAndSpec) {
  write_text("r.region", "attention { causal = true }\n");
  const auto r = fusor_env("emit r.region --target x86 --spec bucket --dims 17,29,16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("/* fusor kernel | region: attention {", 0), 0u) << r.out.substr(0, 200);
  EXPECT_NE(r.out.find("spec: bucket:batch<=1,heads<=1,kv_heads<=1,M<=32,Nk<=32,D<=16,Dv<=16"), std::string::npos)
      << r.out.substr(0, 300);
  EXPECT_EQ(fusor_env("emit r.region --target x86 --spec static").code, 2) << "static needs --dims";
}

TEST_F(CliLanes, VerifyBringYourOwnKernel) {
  write_text("r.region", "pointwise { inputs = [x, y]; t0 = mul(x, y); t1 = relu(t0); output = t1 }\n");
  // Correct: out = relu(x*y) over the contiguous case and the broadcast strides of the ABI.
  const std::string body =
      "#include <stdint.h>\n"
      "static int64_t at(int64_t i, int64_t rank, const int64_t* shape, const int64_t* st) {\n"
      "  int64_t idx = 0;\n"
      "  for (int64_t d = rank - 1; d >= 0; --d) { idx += (i % shape[d]) * st[d]; i /= shape[d]; }\n"
      "  return idx;\n}\n"
      "int fusor_kernel(const void* const* ops, float* out, const int64_t* dims) {\n"
      "  const float* x = ops[0]; const float* y = ops[1];\n"
      "  const int64_t total = dims[0], rank = dims[1]; const int64_t* shape = dims + 2;\n"
      "  for (int64_t i = 0; i < total; ++i) {\n"
      "    float v = x[at(i, rank, shape, shape + rank)] * y[at(i, rank, shape, shape + 2 * rank)];\n"
      "    out[i] = BODY;\n  }\n  return 0;\n}\n";
  auto with = [&](const std::string& expr) {
    std::string s = body;
    s.replace(s.find("BODY"), 4, expr);
    return s;
  };
  write_text("good.c", with("(v < 0.0f ? 0.0f : v)"));
  write_text("nan_dropping.c", with("(v > 0.0f ? v : 0.0f)")); // relu(NaN) must stay NaN
  write_text("crashing.c", with("(*(volatile float*)0)"));
  const auto good = fusor_env("verify r.region --target x86 --kernel good.c");
  EXPECT_EQ(good.code, 0) << good.out << good.err;
  EXPECT_NE(good.out.find("verdict: verified"), std::string::npos);
  const auto wrong = fusor_env("verify r.region --target x86 --kernel nan_dropping.c");
  EXPECT_EQ(wrong.code, 1) << wrong.out << wrong.err;
  EXPECT_NE(wrong.out.find("family special"), std::string::npos) << wrong.out;
  const auto crash = fusor_env("verify r.region --target x86 --kernel crashing.c");
  EXPECT_EQ(crash.code, 1) << crash.out << crash.err;
  EXPECT_NE(crash.out.find("SIGSEGV"), std::string::npos) << crash.out;
}

TEST_F(CliLanes, RunWithoutArgumentsRunsTheEmbeddedModel) {
  // The embedded default is an ONNX model; a build without libonnx (the GPU machine) says so.
  if (!onnx_import_available()) GTEST_SKIP() << "built without libonnx: the embedded ONNX model cannot be read";
  const auto r = fusor_env("run --repeats 2");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("region"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention"), std::string::npos) << "the default is a transformer block:\n" << r.out;
  EXPECT_NE(r.out.find("oracle"), std::string::npos) << r.out;
  // Where fusor's end-to-end time goes: kernels, native ops, the rest.
  EXPECT_NE(r.out.find("fusor's time: region kernels"), std::string::npos) << r.out;
  // --repeats times a model or a region FILE; --examples has nothing to repeat.
  const auto stray = fusor_env("run --examples --repeats 3");
  EXPECT_EQ(stray.code, 2) << stray.out;
  EXPECT_NE(stray.err.find("--repeats applies to a model or a region FILE"), std::string::npos) << stray.err;
  EXPECT_EQ(fusor_env("run --repeats 0").code, 2);
}

// `fusor bench --json`: one JSON object per case with fusor's time and rate, each peer's time
// and ratio, the oracle's error and each peer's on the same rows, and the FMA-peak columns. No
// timing is asserted, only that the fields are there and consistent with each other.
TEST_F(CliLanes, BenchPrintsOneJsonObjectPerCase) {
  if (!fs::exists(fs::path(FUSOR_BIN).parent_path() / "fusor-bench")) GTEST_SKIP() << "fusor-bench is not built";
  // Without AVX-512 every case runs the x86_avx2 lane and the portable lane beside it.
  const std::string base_lane = host_has_avx512() ? "x86_avx512" : "x86_c";
  const std::string side_lane = !host_lacks_amx_bf16() ? "x86_amx" : (host_has_avx512() ? "" : "x86_avx2");
  const auto r = fusor_env("bench gemm --filter 128x3072 --json --min-ms 1");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::istringstream lines(r.out);
  int cases = 0;
  for (std::string line; std::getline(lines, line); ++cases) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("case"), "gemm_bias_gelu_128x3072x768");
    const double fusor_ms = j.at("fusor_ms").get<double>();
    EXPECT_GT(fusor_ms, 0.0);
    EXPECT_GT(j.at("gflops").get<double>(), 0.0);
    EXPECT_LT(j.at("max_abs_err").get<double>(), 1e-3);
    EXPECT_TRUE(j.at("verified").get<bool>());
    const double fraction = j.at("fraction_of_peak").get<double>();
    EXPECT_GT(fraction, 0.0);
    EXPECT_GE(j.at("rounds").get<int>(), 7); // at least seven interleaved rounds
    int peers = 0;
    for (const auto& [key, value] : j.items()) {
      if (key == "fusor_ms" || key.size() < 3 || key.substr(key.size() - 3) != "_ms") continue;
      if (key.rfind("x86_", 0) == 0) continue; // a lane's own time, not a peer's
      const std::string peer = key.substr(0, key.size() - 3);
      ++peers;
      const double ratio = j.at(peer + "_ratio").get<double>();
      EXPECT_NEAR(ratio, value.get<double>() / fusor_ms, 1e-9 * ratio) << peer;
      // The spread of the same ratio round by round (each round times every contender in turn).
      const double q1 = j.at(peer + "_ratio_q1").get<double>(), q3 = j.at(peer + "_ratio_q3").get<double>();
      EXPECT_GT(q1, 0.0) << peer;
      EXPECT_LE(q1, q3) << peer;
      // Each peer's output against the same reference rows (a GEMM peer is an f32 GEMM: near fusor's).
      const double peer_err = j.at(peer + "_max_abs_err").get<double>();
      EXPECT_GT(peer_err, 0.0) << peer;
      EXPECT_LT(peer_err, 1e-3) << peer;
      // The ratio a kernel at the FMA peak would reach: this ratio over fusor's share of the peak.
      EXPECT_NEAR(j.at(peer + "_ratio_at_peak").get<double>(), ratio / fraction, 1e-6 * ratio / fraction) << peer;
    }
    EXPECT_GE(peers, 1) << "a build with the bench has oneDNN or OpenBLAS: " << line;
    // The threads' placement, round by round (bench/cross_core.hpp), wherever two threads run.
    if (std::thread::hardware_concurrency() >= 2 && !std::getenv("OMP_NUM_THREADS")) {
      EXPECT_TRUE(j.contains("cross_core_ns")) << line;
    }
    if (j.contains("cross_core_ns")) {
      EXPECT_GT(j.at("cross_core_ns").get<double>(), 0.0);
      const long far = j.at("far_rounds").get<long>();
      EXPECT_GE(far, 0);
      EXPECT_LE(far, j.at("rounds").get<long>());
      for (const auto& [key, value] : j.items()) {
        if (key.find("_ratio_near") != std::string::npos || key.find("_ratio_far") != std::string::npos) {
          EXPECT_GT(value.get<double>(), 0.0) << key;
        }
      }
    }
    // GEMM cases run the AMX and AVX-512 lanes where AMX runs here (without AVX-512: x86_avx2
    // and x86_c); fusor's time is the faster's.
    EXPECT_EQ(j.contains("x86_amx_ms"), side_lane == "x86_amx");
    EXPECT_EQ(j.contains("x86_avx2_ms"), side_lane == "x86_avx2");
    if (!side_lane.empty()) {
      const double a = j.at(side_lane + "_ms").get<double>(), v = j.at(base_lane + "_ms").get<double>();
      EXPECT_EQ(fusor_ms, std::min(a, v));
      EXPECT_EQ(j.at("lane"), a <= v ? side_lane : base_lane);
    } else {
      EXPECT_EQ(j.at("lane"), base_lane);
    }
  }
  EXPECT_EQ(cases, 1) << r.out;
  const auto forced = fusor_env("bench gemm --filter 128x3072 --json --min-ms 1 --lane x86_avx512");
  if (!host_has_avx512()) {
    EXPECT_NE(r.err.find("fusor's times are the portable x86_c lane's"), std::string::npos) << r.err;
    EXPECT_EQ(forced.code, 2); // a forced lane that declines here: refused with the reason
    EXPECT_NE(forced.err.find("x86_avx512: the host lacks AVX-512"), std::string::npos) << forced.err;
    return;
  }
  ASSERT_EQ(forced.code, 0) << forced.err << forced.out;
  const auto j = nlohmann::json::parse(forced.out.substr(0, forced.out.find('\n')));
  EXPECT_EQ(j.at("lane"), "x86_avx512");
  EXPECT_FALSE(j.contains("x86_amx_ms"));
  EXPECT_EQ(fusor_env("bench gemm --lane x86_c").code, 2); // not a bench lane
  // A forced lane runs alone: x86_avx2 on an AVX-512 host, with no second lane timed.
  const auto avx2 = fusor_env("bench gemm --filter 128x3072 --json --min-ms 1 --lane x86_avx2");
  ASSERT_EQ(avx2.code, 0) << avx2.err << avx2.out;
  const auto ja = nlohmann::json::parse(avx2.out.substr(0, avx2.out.find('\n')));
  EXPECT_EQ(ja.at("lane"), "x86_avx2");
  EXPECT_FALSE(ja.contains("x86_avx512_ms"));
  EXPECT_TRUE(ja.at("verified").get<bool>());
}

// `fusor bench --shape MxNxK`: the caller's GEMM shapes in place of the listed cases, each
// checked by the oracle and timed against the same peers (attention's and the norm and
// pointwise suites' shapes too); a malformed shape or a suite that holds no such case is
// refused with the reason.
TEST_F(CliLanes, BenchRunsTheCallersShapes) {
  if (!fs::exists(fs::path(FUSOR_BIN).parent_path() / "fusor-bench")) GTEST_SKIP() << "fusor-bench is not built";
  // Each case of a --json run, in order, checked by the oracle and with its own time.
  const auto cases_of = [&](const std::string& args) {
    const auto r = fusor_env(args);
    EXPECT_EQ(r.code, 0) << args << ": " << r.err << r.out;
    std::istringstream lines(r.out);
    std::vector<nlohmann::json> cases;
    for (std::string line; std::getline(lines, line);) {
      cases.push_back(nlohmann::json::parse(line));
      EXPECT_TRUE(cases.back().at("verified").get<bool>()) << line;
      EXPECT_GT(cases.back().at("fusor_ms").get<double>(), 0.0) << line;
    }
    return cases;
  };
  const auto names = [](const std::vector<nlohmann::json>& cases) {
    std::vector<std::string> out;
    for (const auto& j : cases) out.push_back(j.at("case").get<std::string>());
    return out;
  };
  EXPECT_EQ(names(cases_of("bench --shape 17x300x40 --shape 3x513x9 --json --min-ms 1")),
            (std::vector<std::string>{"gemm_bias_gelu_17x300x40", "gemm_bias_gelu_3x513x9"}));
  // Attention shapes (B x H x M x Nk x D, causal or not) make attention cases.
  const auto att = cases_of("bench --shape 1x2x40x70x16:causal --shape 2x1x33x33x8 --json --min-ms 1");
  EXPECT_EQ(names(att), (std::vector<std::string>{"attention_causal_1x2x40x70x16", "attention_2x1x33x33x8"}));
  for (const auto& j : att) EXPECT_LT(j.at("max_abs_err").get<double>(), 1e-4) << j.dump();
  // Rows x columns make the norm chains' cases under `norm`, the pointwise kinds' under `pointwise`.
  const auto rc = cases_of("bench norm --shape 33x70 --json --min-ms 1");
  EXPECT_EQ(names(rc), (std::vector<std::string>{"rmsnorm_residual_weight_33x70", "layer_norm_weight_bias_33x70",
                                                 "softmax_weight_bias_33x70"}));
  for (const auto& j : rc) EXPECT_EQ(j.at("shape"), "33x70") << j.dump();
  EXPECT_EQ(names(cases_of("bench pointwise --shape 5x40 --json --min-ms 1")),
            (std::vector<std::string>{"pointwise_swish_gate_5x40", "pointwise_reduce_sumsq_5x40"}));
  for (const char* suite : {"", "gemm "}) {
    const auto refused = fusor_env(std::string("bench ") + suite + "--shape 33x70");
    EXPECT_EQ(refused.code, 2) << suite;
    EXPECT_NE(refused.err.find("SUITE must be norm, pointwise or all"), std::string::npos) << refused.err;
  }
  for (const char* malformed :
       {"17", "17x300x", "1x2x3x4", "1x2x3x4x0", "17x300x40:causal", "17x300:causal", "1x2x3x4x5:soon"}) {
    const auto bad = fusor_env(std::string("bench --shape ") + malformed);
    EXPECT_EQ(bad.code, 2) << malformed;
    EXPECT_NE(bad.err.find("--shape takes MxNxK"), std::string::npos) << malformed << ": " << bad.err;
  }
  const auto norm = fusor_env("bench norm --shape 4x300x40");
  EXPECT_EQ(norm.code, 2);
  EXPECT_NE(norm.err.find("SUITE must be gemm or all"), std::string::npos) << norm.err;
  const auto gemm = fusor_env("bench gemm --shape 1x2x40x70x16");
  EXPECT_EQ(gemm.code, 2);
  EXPECT_NE(gemm.err.find("SUITE must be attention or all"), std::string::npos) << gemm.err;
  EXPECT_EQ(fusor_env("bench").code, 2); // neither a suite nor a shape
}

// `fusor bench --knob KEY=VALUE`: a lane option for A/B runs reaches the timed lane's kernels
// and is recorded in each case and the saved machine (so fusor-results never reads such a case
// as the defaults'); a key the lane does not take, a value that is not an integer and a knob
// without a value are refused with the reason.
TEST_F(CliLanes, BenchKnobsReachTheLaneAndAreRecorded) {
  if (!fs::exists(fs::path(FUSOR_BIN).parent_path() / "fusor-bench")) GTEST_SKIP() << "fusor-bench is not built";
  const std::string base = "bench --shape 17x300x40 --lane x86_avx2 --min-ms 1 ";
  const fs::path saved = dir_ / "knobs.json";
  const auto r = fusor_env(base + "--knob mr=4 --knob serial=0 --json --save '" + saved.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  EXPECT_EQ(j.at("lane"), "x86_avx2");
  EXPECT_TRUE(j.at("verified").get<bool>());
  const nlohmann::json knobs = {{"mr", "4"}, {"serial", "0"}};
  EXPECT_EQ(j.at("knobs"), knobs);
  EXPECT_EQ(nlohmann::json::parse(slurp(saved)).at("machine").at("knobs"), knobs);
  // Without knobs, neither says any.
  const auto plain = fusor_env(base + "--json");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_FALSE(nlohmann::json::parse(plain.out.substr(0, plain.out.find('\n'))).contains("knobs"));
  const auto unknown = fusor_env(base + "--knob bogus=1");
  EXPECT_NE(unknown.code, 0);
  EXPECT_NE(unknown.err.find("unknown option 'bogus=1' (options: "), std::string::npos) << unknown.err;
  const auto word = fusor_env(base + "--knob mr=four");
  EXPECT_NE(word.code, 0);
  EXPECT_NE(word.err.find("option mr=four is not an integer"), std::string::npos) << word.err;
  const auto range = fusor_env(base + "--knob mr=40");
  EXPECT_NE(range.code, 0);
  EXPECT_NE(range.err.find("option mr=40 is outside 4..6"), std::string::npos) << range.err;
  for (const char* bad : {"mr", "=4", "mr="}) {
    const auto refused = fusor_env(base + "--knob " + bad);
    EXPECT_EQ(refused.code, 2) << bad;
    EXPECT_NE(refused.err.find("--knob takes KEY=VALUE"), std::string::npos) << bad << ": " << refused.err;
  }
}

// What `fusor emit` writes is C a user may build with their own flags: every example region's
// kernel on the SIMD lanes compiles without a warning under -Wall -Wextra (unused names
// aside, as fusor's own compile allows them), optimised so flow-based warnings run too.
// Emission needs no AVX-512 or AMX here: on a host without them the kernels are built for
// Sapphire Rapids (x86_avx2: Haswell), so a machine like CI's still checks every lane.
TEST_F(CliLanes, EmittedSimdKernelsCompileWithoutWarnings) {
  const std::vector<std::pair<std::string, bool>> lanes{
      {"x86_avx512", host_has_avx512()}, {"x86_amx", !host_lacks_amx_bf16()}, {"x86_avx2", false}};
  int regions = 0, compiled = 0;
  for (const auto& entry : fs::directory_iterator(FUSOR_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".region") continue;
    ++regions;
    for (const auto& [lane, runs_here] : lanes) {
      const std::string what = entry.path().filename().string() + " on " + lane;
      const auto r = fusor_env("emit '" + entry.path().string() + "' --lane " + lane);
      if (r.code == 2 && r.err.find("E_ARBITER_FORCED_UNKNOWN") != std::string::npos)
        continue; // AMX and AVX2: GEMM-rooted kinds and attention only
      ASSERT_EQ(r.code, 0) << what << ": " << r.err;
      write_text("k.c", r.out);
      const fs::path log = dir_ / "cc.txt";
      // x86_avx2's kernels are for hosts without AVX-512: always built for Haswell.
      const std::string march = lane == "x86_avx2" ? "haswell" : runs_here ? "native" : "sapphirerapids";
      const std::string cmd = "cc -O2 -march=" + march + " -std=c11 -fopenmp -Wall -Wextra -Werror -Wno-unused -c '" +
                              (dir_ / "k.c").string() + "' -o /dev/null > '" + log.string() + "' 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << what << ":\n" << slurp(log);
      if (lane == "x86_avx2") {
        // Built for a host that has AVX-512 as well, with the flags the source's header names,
        // the lane's code stays AVX2: no EVEX-only register (the compiler would otherwise use
        // ymm16-31 and the longer encodings, and Clang zmm).
        std::smatch flags;
        ASSERT_TRUE(std::regex_search(r.out, flags,
                                      std::regex(R"(/\* compiled with (.*) after the host compiler's flags \*/)")))
            << what << ": the source names no compile flags";
        const fs::path s = dir_ / "k.s";
        const std::string asm_cmd = "cc -O3 -march=sapphirerapids " + flags[1].str() +
                                    " -std=c11 -fopenmp -Wno-unused -S '" + (dir_ / "k.c").string() + "' -o '" +
                                    s.string() + "' > '" + log.string() + "' 2>&1";
        ASSERT_EQ(std::system(asm_cmd.c_str()), 0) << what << ":\n" << slurp(log);
        EXPECT_FALSE(std::regex_search(slurp(s), std::regex("%(zmm[0-9]|ymm(1[6-9]|2[0-9]|3[01]))")))
            << what << " uses AVX-512 registers";
      }
      ++compiled;
    }
  }
  EXPECT_GE(regions, 7) << "the examples cover the GEMM-rooted, attention, norm and pointwise kinds";
  // Every region on x86_avx512, the GEMM-rooted and attention ones again on x86_amx and on
  // x86_avx2.
  EXPECT_GE(compiled, regions + 8);
}

// The saved run records the host's FMA peak and, where AMX runs, the tile rate of every bench
// thread before and after the cases (shared hosts slow their tiles for minutes at a time).
// The `small` suite: shapes whose fixed costs show (the embedded transformer block's GEMMs),
// timed in batches; each case against the same peers with the oracle's error.
TEST_F(CliLanes, BenchSmallSuite) {
  if (!fs::exists(fs::path(FUSOR_BIN).parent_path() / "fusor-bench")) GTEST_SKIP() << "fusor-bench is not built";
  const auto r = fusor_env("bench small --filter residual_64x64 --json --min-ms 1");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::istringstream lines(r.out);
  std::vector<std::string> names;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    names.push_back(j.at("case").get<std::string>());
    EXPECT_GT(j.at("fusor_ms").get<double>(), 0.0);
    EXPECT_LT(j.at("max_abs_err").get<double>(), 1e-3);
    EXPECT_TRUE(j.at("verified").get<bool>());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"gemm_bias_residual_64x64x256", "gemm_bias_residual_64x64x64"}));
  EXPECT_EQ(fusor_env("bench tiny").code, 2); // suites are checked
}

TEST_F(CliLanes, BenchSavesTheMachineWithItsTileRate) {
  if (!fs::exists(fs::path(FUSOR_BIN).parent_path() / "fusor-bench")) GTEST_SKIP() << "fusor-bench is not built";
  const fs::path saved = dir_ / "bench.json";
  const auto r = fusor_env("bench gemm --filter 128x3072 --json --min-ms 1 --save " + saved.string());
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::ifstream f(saved);
  const auto doc = nlohmann::json::parse(f);
  const auto& m = doc.at("machine");
  EXPECT_GT(m.at("fma_peak_gflops").get<double>(), 0.0);
  EXPECT_EQ(doc.at("cases").size(), 1u);
  // The case is held to its own peak, the higher of the readings before it (the run's first)
  // and after it, and its fraction and ceilings are taken against that one.
  const auto& c = doc.at("cases").at(0);
  const double case_peak = c.at("fma_peak_gflops").get<double>();
  const auto& readings = c.at("fma_peak_readings");
  ASSERT_EQ(readings.size(), 2u);
  EXPECT_EQ(readings.at(0).get<double>(), m.at("fma_peak_gflops").get<double>());
  EXPECT_EQ(case_peak, std::max(readings.at(0).get<double>(), readings.at(1).get<double>()));
  EXPECT_NEAR(c.at("fraction_of_peak").get<double>(), c.at("gflops").get<double>() / case_peak, 1e-9);
  for (const auto& [key, value] : c.items())
    if (key.size() > 14 && key.ends_with("_ratio_at_peak")) {
      const std::string peer = key.substr(0, key.size() - 14);
      EXPECT_NEAR(value.get<double>(), c.at(peer + "_ratio").get<double>() / c.at("fraction_of_peak").get<double>(),
                  1e-9 * value.get<double>())
          << key;
    }
  const bool amx = !host_lacks_amx_bf16();
  EXPECT_EQ(m.contains("amx_tile_ns_per_product"), amx) << m.dump();
  if (!amx) return;
  const int threads = m.at("threads").get<int>();
  for (const char* key : {"amx_tile_ns_per_product", "amx_tile_ns_per_product_after"}) {
    ASSERT_EQ(m.at(key).size(), static_cast<size_t>(threads)) << key;
    // One product is 8 192 multiply-adds: at least a few ns on any AMX core, and far less than a µs.
    for (const double ns : m.at(key)) {
      EXPECT_GT(ns, 2.0) << key;
      EXPECT_LT(ns, 1000.0) << key;
    }
  }
  double gflops = 0;
  for (const double ns : m.at("amx_tile_ns_per_product")) gflops += 16384.0 / ns;
  EXPECT_NEAR(m.at("amx_bf16_peak_gflops").get<double>(), gflops, 1e-6 * gflops);
}
