// .npy I/O: NumPy-written fixtures (tests/data/npy, made by scripts/gen_npy_fixtures.py),
// byte-identical output, round trips for every dtype and rank 0-4, and bad files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <unistd.h>

#include "fusor/npy.hpp"

namespace fs = std::filesystem;
using namespace fusor;

namespace {

const fs::path kData = fs::path(FUSOR_TEST_DATA) / "npy";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Expected<Tensor> parse_string(const std::string& bytes, const std::string& name = "mem.npy") {
  return parse_npy({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}, name);
}

// A scratch directory unique to this process, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("fusor_test_npy_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Builds a v1.0 file by hand from a header dict and raw data bytes (no padding rules).
std::string handmade(const std::string& dict, const std::string& data, int major = 1) {
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  const size_t n = dict.size();
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  if (major != 1) out.append(2, '\0');
  return out + dict + data;
}

std::string f32_bytes(std::initializer_list<float> xs) {
  std::string out;
  for (float x : xs) out.append(reinterpret_cast<const char*>(&x), 4);
  return out;
}

const std::vector<float> kM23 = {1.5f, -2.0f, 0.25f, 3.0f, -0.125f, 1024.0f};

} // namespace

// ---- files written by NumPy ----------------------------------------------------------------

TEST(NpyRead, NumpyFilesEveryDtypeAndVersion) {
  for (const char* file : {"f4_2x3.npy", "f2_2x3.npy", "f8_2x3.npy", "f4_2x3_v2.npy", "f4_2x3_v3.npy"}) {
    SCOPED_TRACE(file);
    auto t = read_npy(kData / file);
    ASSERT_TRUE(t.ok()) << t.error().str();
    EXPECT_EQ(t->shape, (Shape{2, 3}));
    EXPECT_EQ(t->data, kM23);
  }
}

TEST(NpyRead, NumpyI64) {
  auto t = read_npy(kData / "i8_5.npy");
  ASSERT_TRUE(t.ok()) << t.error().str();
  EXPECT_EQ(t->shape, (Shape{5}));
  EXPECT_EQ(t->data, (std::vector<float>{-3.0f, 0.0f, 7.0f, 1099511627776.0f, -1048576.0f}));
}

TEST(NpyRead, NumpyScalarEmptyAndRank4) {
  auto s = read_npy(kData / "f4_scalar.npy");
  ASSERT_TRUE(s.ok()) << s.error().str();
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->data, (std::vector<float>{-6.5f}));

  auto e = read_npy(kData / "f4_0x3.npy");
  ASSERT_TRUE(e.ok()) << e.error().str();
  EXPECT_EQ(e->shape, (Shape{0, 3}));
  EXPECT_TRUE(e->data.empty());

  auto r4 = read_npy(kData / "f4_2x1x3x2.npy");
  ASSERT_TRUE(r4.ok()) << r4.error().str();
  EXPECT_EQ(r4->shape, (Shape{2, 1, 3, 2}));
  ASSERT_EQ(r4->data.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(r4->data[i], static_cast<float>(i) - 5.5f);
}

// Our writer reproduces NumPy's bytes exactly (header text, growth space, 64-byte padding).
TEST(NpyWrite, ByteIdenticalToNumpy) {
  struct Case {
    const char* file;
    Tensor t;
    NpyDType dtype;
  };
  const Case cases[] = {
      {"f4_2x3.npy", Tensor({2, 3}, kM23), NpyDType::f32},
      {"f2_2x3.npy", Tensor({2, 3}, kM23), NpyDType::f16},
      {"f8_2x3.npy", Tensor({2, 3}, kM23), NpyDType::f64},
      {"i8_5.npy", Tensor({5}, {-3.0f, 0.0f, 7.0f, 1099511627776.0f, -1048576.0f}), NpyDType::i64},
      {"f4_scalar.npy", Tensor({}, {-6.5f}), NpyDType::f32},
      {"f4_0x3.npy", Tensor({0, 3}, {}), NpyDType::f32},
      {"f4_2x1x3x2.npy",
       Tensor({2, 1, 3, 2}, {-5.5f, -4.5f, -3.5f, -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}),
       NpyDType::f32},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    EXPECT_EQ(serialize_npy(c.t, c.dtype), read_bytes(kData / c.file));
  }
}

// ---- round trips ---------------------------------------------------------------------------

TEST(NpyRoundTrip, EveryDtypeRanks0To4) {
  TempDir dir;
  const Shape shapes[] = {{}, {7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 2}};
  for (NpyDType dtype : {NpyDType::f32, NpyDType::f16, NpyDType::f64, NpyDType::i64}) {
    for (const auto& shape : shapes) {
      SCOPED_TRACE("dtype " + std::to_string(static_cast<int>(dtype)) + " shape " + shape_str(shape));
      Tensor t(shape);
      // Small integers and quarters are exact in every dtype (integers only for i64).
      for (size_t i = 0; i < t.data.size(); ++i) {
        const float v = static_cast<float>(static_cast<int>(i * 7 % 23) - 11);
        t.data[i] = dtype == NpyDType::i64 ? v : v * 0.25f;
      }
      const fs::path p = dir.path / "rt.npy";
      ASSERT_TRUE(write_npy(p, t, dtype).ok());
      auto back = read_npy(p);
      ASSERT_TRUE(back.ok()) << back.error().str();
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(back->data, t.data);
    }
  }
}

TEST(NpyRoundTrip, F32SpecialValuesBitExact) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor t({5}, {inf, -inf, std::nanf(""), -0.0f, 1e-45f}); // 1e-45: the smallest subnormal
  auto back = parse_string(serialize_npy(t));
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->data[0], inf);
  EXPECT_EQ(back->data[1], -inf);
  EXPECT_TRUE(std::isnan(back->data[2]));
  EXPECT_TRUE(std::signbit(back->data[3]));
  EXPECT_EQ(back->data[4], 1e-45f);
}

TEST(NpyRoundTrip, F16RoundsToNearestHalf) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even gives 1. 70000 > f16 max → inf.
  Tensor t({3}, {1.0f + 0x1p-11f, 1.0f + 0x1p-10f, 70000.0f});
  auto back = parse_string(serialize_npy(t, NpyDType::f16));
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->data[0], 1.0f);
  EXPECT_EQ(back->data[1], 1.0f + 0x1p-10f);
  EXPECT_EQ(back->data[2], std::numeric_limits<float>::infinity());
}

TEST(NpyWrite, I64TruncatesTowardZeroAndSaturates) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor t({6}, {2.75f, -2.75f, std::nanf(""), inf, -inf, 3e19f});
  const std::string bytes = serialize_npy(t, NpyDType::i64);
  const std::int64_t max = std::numeric_limits<std::int64_t>::max(), min = std::numeric_limits<std::int64_t>::min();
  const std::int64_t want[] = {2, -2, 0, max, min, max};
  ASSERT_EQ(bytes.size() % 64, 48u); // 128-byte header + 6 * 8 bytes of data
  for (int i = 0; i < 6; ++i) {
    std::int64_t v;
    std::memcpy(&v, bytes.data() + 128 + 8 * i, 8);
    EXPECT_EQ(v, want[i]) << i;
  }
}

// NumPy's rule: magic + version + length + header is a multiple of 64, header ends in '\n'.
TEST(NpyWrite, HeaderPaddedTo64Bytes) {
  for (const Shape& shape : {Shape{}, Shape{1}, Shape{123456789, 0}, Shape{0, 123456789012345},
                             Shape{1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 1, 1}, Shape(40, 1)}) {
    SCOPED_TRACE(shape_str(shape));
    const std::string bytes = serialize_npy(Tensor(shape, std::vector<float>(shape_numel(shape), 1.0f)));
    ASSERT_GE(bytes.size(), 10u);
    EXPECT_EQ(bytes[6], 1); // version 1.0
    const size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    EXPECT_EQ((10 + header_len) % 64, 0u);
    EXPECT_EQ(bytes[10 + header_len - 1], '\n');
  }
}

TEST(NpyWrite, HugeHeaderUsesVersion2) {
  const Shape shape(30000, 1); // "1, " * 30000 does not fit a 16-bit header length
  const std::string bytes = serialize_npy(Tensor(shape, {4.5f}));
  EXPECT_EQ(bytes[6], 2);
  const size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8) |
                            (static_cast<unsigned char>(bytes[10]) << 16);
  EXPECT_GT(header_len, 0xffffu);
  EXPECT_EQ((12 + header_len) % 64, 0u);
  auto back = parse_string(bytes);
  ASSERT_TRUE(back.ok()) << back.error().str();
  EXPECT_EQ(back->shape, shape);
  EXPECT_EQ(back->data, (std::vector<float>{4.5f}));
}

// ---- byte-order marks and lenient-but-valid headers ------------------------------------------

TEST(NpyRead, NativeAndNotApplicableByteOrderMarks) {
  for (const char* descr : {"=f4", "|f4", "<f4"}) {
    SCOPED_TRACE(descr);
    auto t = parse_string(
        handmade(std::string("{\"descr\": \"") + descr + "\", \"shape\": (2,), \"fortran_order\": False}\n",
                 f32_bytes({0.5f, -8.0f})));
    ASSERT_TRUE(t.ok()) << t.error().str();
    EXPECT_EQ(t->data, (std::vector<float>{0.5f, -8.0f}));
  }
}

TEST(NpyRead, FortranFlagIsHarmlessForRank1) {
  auto t = parse_string(handmade("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f32_bytes({1.0f, 2.0f})));
  ASSERT_TRUE(t.ok()) << t.error().str();
  EXPECT_EQ(t->data, (std::vector<float>{1.0f, 2.0f}));
}

// ---- bad files ---------------------------------------------------------------------------------

namespace {
void expect_error(const Expected<Tensor>& r, ErrorCode code, const std::string& name, const std::string& what) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, code) << r.error().str();
  EXPECT_NE(r.error().message.find(name), std::string::npos) << r.error().str();
  EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().str();
}
} // namespace

TEST(NpyBad, UnsupportedNumpyFiles) {
  const std::pair<const char*, const char*> cases[] = {
      {"bad_fortran.npy", "Fortran"}, {"bad_bigendian.npy", "big-endian"},  {"bad_i4.npy", "'<i4'"},
      {"bad_bool.npy", "'|b1'"},      {"bad_structured.npy", "structured"},
  };
  for (auto [file, what] : cases) {
    SCOPED_TRACE(file);
    expect_error(read_npy(kData / file), ErrorCode::npy_unsupported, file, what);
  }
}

TEST(NpyBad, BadMagicAndVersion) {
  std::string good = serialize_npy(Tensor({2}, {1.0f, 2.0f}));
  std::string magic = good;
  magic[1] = 'X';
  expect_error(parse_string(magic, "m.npy"), ErrorCode::io_error, "m.npy", "bad magic");
  expect_error(parse_string("", "empty.npy"), ErrorCode::io_error, "empty.npy", "bad magic");
  std::string v4 = good;
  v4[6] = 4;
  expect_error(parse_string(v4, "v.npy"), ErrorCode::npy_unsupported, "v.npy", "version 4.0");
}

TEST(NpyBad, TruncatedAndTrailing) {
  const std::string good = serialize_npy(Tensor({2, 3}, kM23));
  expect_error(parse_string(good.substr(0, good.size() - 1), "t.npy"), ErrorCode::io_error, "t.npy", "truncated data");
  expect_error(parse_string(good.substr(0, 40), "h.npy"), ErrorCode::io_error, "h.npy", "truncated header");
  expect_error(parse_string(good.substr(0, 9), "l.npy"), ErrorCode::io_error, "l.npy", "truncated header length");
  expect_error(parse_string(good + "xy", "x.npy"), ErrorCode::io_error, "x.npy", "2 unexpected bytes");
  // A header claiming 2^62 elements over 4 data bytes must fail cleanly, not allocate.
  expect_error(parse_string(handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 2)}",
                                     f32_bytes({1.0f})),
                            "big.npy"),
               ErrorCode::io_error, "big.npy", "truncated data");
}

TEST(NpyBad, MalformedHeaderDicts) {
  const std::pair<const char*, const char*> cases[] = {
      {"{'descr': '<f4', 'shape': (1,)}", "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", "repeated"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", "malformed header"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}", "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk", "after '}'"},
      {"['descr']", "expected '{'"},
  };
  for (auto [dict, what] : cases) {
    SCOPED_TRACE(dict);
    expect_error(parse_string(handmade(dict, f32_bytes({1.0f})), "d.npy"), ErrorCode::io_error, "d.npy", what);
  }
}

TEST(NpyBad, FilesystemErrors) {
  TempDir dir;
  const fs::path missing = dir.path / "missing.npy";
  expect_error(read_npy(missing), ErrorCode::io_error, missing.string(), "cannot open");
  expect_error(read_npy(dir.path), ErrorCode::io_error, dir.path.string(), "directory");
  const fs::path unwritable = dir.path / "no_such_dir" / "out.npy";
  Status s = write_npy(unwritable, Tensor({1}, {1.0f}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::io_error);
  EXPECT_NE(s.error().message.find(unwritable.string()), std::string::npos);
}

// ---- live NumPy, when installed (FUSOR_PYTHON picks the interpreter) --------------------------

TEST(NpyNumpy, NumpyReadsWhatWeWrite) {
  const char* env = std::getenv("FUSOR_PYTHON");
  const std::string py = env != nullptr ? env : "python3";
  if (std::system((py + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "numpy is not importable by " << py << "; the committed fixtures cover NumPy compatibility";
  TempDir dir;
  const std::pair<NpyDType, const char*> dtypes[] = {
      {NpyDType::f32, "float32"}, {NpyDType::f16, "float16"}, {NpyDType::f64, "float64"}, {NpyDType::i64, "int64"}};
  for (auto [dtype, np_name] : dtypes) {
    SCOPED_TRACE(np_name);
    const fs::path p = dir.path / "w.npy";
    ASSERT_TRUE(write_npy(p, Tensor({2, 3}, {1, -2, 3, 4, -5, 6}), dtype).ok());
    const std::string check =
        py +
        " -c \"import numpy as np, sys; a = np.load(sys.argv[1]); "
        "sys.exit(0 if a.dtype == np.dtype('" +
        np_name + "') and a.shape == (2, 3) and a.tolist() == [[1, -2, 3], [4, -5, 6]] else 1)\" " + p.string();
    EXPECT_EQ(std::system(check.c_str()), 0);
  }
}
