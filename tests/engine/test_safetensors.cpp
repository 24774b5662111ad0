// SafetensorsFile and write_safetensors: round trips, conversions, and every malformed file the
// strict reader must reject with a CheckpointError naming the file and the offending tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "replayssm/engine/safetensors.h"

namespace replayssm::engine {
namespace {

namespace fs = std::filesystem;

/// A fresh directory per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("rssm_st_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Writes 8-byte little-endian N (the header size unless overridden), the header, then
  /// `data` bytes (0, 1, 2, ...).
  std::string raw(const std::string& header, size_t data, int64_t n_override = -1,
                  const std::string& name = "t.safetensors") {
    const std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    const uint64_t n = n_override >= 0 ? static_cast<uint64_t>(n_override) : header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (size_t i = 0; i < data; ++i) f.put(static_cast<char>(i & 0xff));
    return p;
  }

  fs::path dir_;
};

/// The message of the CheckpointError that opening `p` raises ("" and a test failure if none).
std::string open_error(const std::string& p) {
  try {
    SafetensorsFile f(p);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no CheckpointError for " << p;
  return "";
}

/// Expects every one of `parts` in `msg`.
void expect_has(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST_F(SafetensorsTest, RoundTripF32) {
  const std::string p = path("a.safetensors");
  std::vector<float> w(6);
  for (int i = 0; i < 6; ++i) w[i] = 0.1f * static_cast<float>(i) - 0.25f;
  write_safetensors(p,
                    {{"layer.weight", "F32", {2, 3}, w},
                     {"scale", "F32", {}, {3.5f}},
                     {"empty", "F32", {0, 4}, {}},
                     {"odd", "F32", {1}, {std::numeric_limits<float>::infinity()}}},
                    {{"format", "pt"}});
  SafetensorsFile f(p);
  EXPECT_EQ(f.path(), p);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const StTensor& t = f.info("layer.weight");
  EXPECT_EQ(t.dtype, StDType::kF32);
  EXPECT_EQ(t.dtype_name, "F32");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.end - t.begin, 24u);
  EXPECT_EQ(f.to_float32("layer.weight"), w);
  EXPECT_EQ(f.to_float32("scale"), std::vector<float>{3.5f});
  EXPECT_TRUE(f.info("scale").shape.empty());
  EXPECT_EQ(f.info("scale").numel(), 1);
  EXPECT_TRUE(f.to_float32("empty").empty());
  EXPECT_TRUE(std::isinf(f.to_float32("odd")[0]));
  float first;
  std::memcpy(&first, f.data("layer.weight"), 4);
  EXPECT_EQ(first, w[0]);
  // Header padded so the data starts at a multiple of 8.
  std::ifstream in(p, std::ios::binary);
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST_F(SafetensorsTest, RoundTripBF16RoundsToNearestEven) {
  const std::string p = path("b.safetensors");
  const float one = 1.0f, ulp = std::ldexp(1.0f, -7);  // bf16 spacing at 1
  const std::vector<float> in = {
      0.0f, -2.5f, 1.0f + ulp,          // exact
      1.0f + ulp / 2,                   // tie -> even (1)
      1.0f + 3 * ulp / 2,               // tie -> even (1 + 2 ulp)
      1.0f + ulp / 2 + ulp / 64,        // just above the tie -> up
      -(1.0f + ulp / 2 - ulp / 64),     // just below the tie -> down
      std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
      3.0e38f,                          // large but finite in bf16
  };
  write_safetensors(p, {{"x", "BF16", {static_cast<int64_t>(in.size())}, in},
                        {"y", "F32", {2}, {1.0f, 2.0f}}});
  SafetensorsFile f(p);
  EXPECT_EQ(f.info("x").dtype, StDType::kBF16);
  EXPECT_EQ(f.info("x").end - f.info("x").begin, 2 * in.size());
  // F32 (larger element) is laid out first, like the reference writer.
  EXPECT_EQ(f.info("y").begin, 0u);
  const std::vector<float> out = f.to_float32("x");
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_EQ(out[2], one + ulp);
  EXPECT_EQ(out[3], one);
  EXPECT_EQ(out[4], one + 2 * ulp);
  EXPECT_EQ(out[5], one + ulp);
  EXPECT_EQ(out[6], -one);
  EXPECT_TRUE(std::isinf(out[7]) && out[7] > 0);
  EXPECT_TRUE(std::isnan(out[8]));
  // 3e38 = 0x7f61b1e6: nearest bf16 is 0x7f62 = 3.0019e38.
  EXPECT_NEAR(out[9], 3.0e38f, 3.0e38f * ulp);
  EXPECT_TRUE(std::isfinite(out[9]));
}

TEST_F(SafetensorsTest, ConvertsF16AndF64FromUnalignedOffsets) {
  // F64 data at offset 12 and F32 at 28: not multiples of their element sizes.
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[6],"data_offsets":[0,12]},)"
      R"("d":{"dtype":"F64","shape":[2],"data_offsets":[12,28]},)"
      R"("s":{"dtype":"F32","shape":[1],"data_offsets":[28,32]}})";
  std::vector<uint8_t> data;
  for (uint16_t h : {0x3c00, 0xc000, 0x0001, 0x7c00, 0x3555, 0x8000}) {
    data.push_back(h & 0xff);
    data.push_back(h >> 8);
  }
  for (double d : {0.1, -1e300}) {
    uint8_t b[8];
    std::memcpy(b, &d, 8);
    data.insert(data.end(), b, b + 8);
  }
  const float s = 7.25f;
  uint8_t b[4];
  std::memcpy(b, &s, 4);
  data.insert(data.end(), b, b + 4);
  // Padding spaces put the data buffer itself at an odd address in the mapping too.
  std::string padded = header;
  while ((8 + padded.size()) % 8 != 3) padded += ' ';
  const std::string p = path("c.safetensors");
  {
    std::ofstream f(p, std::ios::binary);
    const uint64_t n = padded.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f << padded;
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  SafetensorsFile f(p);
  const auto h = f.to_float32("h");
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(h[3]));
  EXPECT_NEAR(h[4], 1.0f / 3, 1e-3);
  EXPECT_TRUE(h[5] == 0.0f && std::signbit(h[5]));
  const auto d = f.to_float32("d");
  EXPECT_EQ(d[0], 0.1f);
  EXPECT_TRUE(std::isinf(d[1]) && d[1] < 0);
  EXPECT_EQ(f.to_float32("s"), std::vector<float>{7.25f});
  EXPECT_EQ(f.info("d").dtype, StDType::kF64);
  EXPECT_EQ(f.info("h").dtype, StDType::kF16);
}

TEST_F(SafetensorsTest, AcceptsPaddingEmptyHeaderAndEveryDtypeString) {
  EXPECT_TRUE(SafetensorsFile(raw("{}      ", 0)).tensors().empty());
  // Each known dtype string with a size that fills whole bytes.
  struct D { const char* name; int bits; };
  const D all[] = {{"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8},
                   {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16},
                   {"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32}, {"F32", 32}, {"C64", 64},
                   {"F64", 64}, {"I64", 64}, {"U64", 64}};
  std::string header = "{";
  uint64_t at = 0;
  for (const D& d : all) {
    const uint64_t bytes = 4 * static_cast<uint64_t>(d.bits) / 8;  // shape [4]
    header += std::string(at ? "," : "") + "\"t_" + d.name + "\":{\"dtype\":\"" + d.name +
              "\",\"shape\":[4],\"data_offsets\":[" + std::to_string(at) + "," +
              std::to_string(at + bytes) + "]}";
    at += bytes;
  }
  header += ",\"__metadata__\":{\"format\":\"pt\"}}\n  ";
  SafetensorsFile f(raw(header, at));
  EXPECT_EQ(f.tensors().size(), std::size(all));
  EXPECT_EQ(f.info("t_F8_E4M3").dtype, StDType::kF8E4M3);
  EXPECT_EQ(f.info("t_F4").dtype, StDType::kOther);
  EXPECT_EQ(f.info("t_F4").dtype_name, "F4");
  EXPECT_EQ(f.info("t_I64").dtype, StDType::kI64);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  // Known but not convertible to float32: named in the error.
  try {
    (void)f.to_float32("t_I32");
    ADD_FAILURE() << "I32 converted";
  } catch (const CheckpointError& e) {
    expect_has(e.what(), {"t_I32", "I32", "F32"});
  }
  try {
    (void)f.info("nope");
    ADD_FAILURE() << "missing tensor found";
  } catch (const CheckpointError& e) {
    expect_has(e.what(), {"nope"});
  }
}

// ---- malformed files -----------------------------------------------------------------------

const char* kOne = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(SafetensorsTest, RejectsFileShorterThanTheLength) {
  const std::string p = path("short.safetensors");
  std::ofstream(p, std::ios::binary) << "abc";
  expect_has(open_error(p), {"short.safetensors", "3 bytes", "at least 8"});
  expect_has(open_error(path("absent.safetensors")), {"absent.safetensors", "cannot open"});
}

TEST_F(SafetensorsTest, RejectsTruncatedData) {
  // The header promises 8 bytes of data but only 5 are there.
  expect_has(open_error(raw(kOne, 5)), {"t.safetensors", "tensor 'w'", "[0, 8]", "5 bytes"});
}

TEST_F(SafetensorsTest, RejectsHeaderLengthPastTheEnd) {
  expect_has(open_error(raw(kOne, 8, 1000)), {"header length 1000", "past the end"});
}

TEST_F(SafetensorsTest, RejectsHugeHeaderLength) {
  expect_has(open_error(raw(kOne, 8, 100'000'001)), {"100000001", "limit", "100000000"});
}

TEST_F(SafetensorsTest, RejectsHeaderThatIsNotJson) {
  expect_has(open_error(raw("{\"w\": nope}", 0)), {"not valid JSON"});
  expect_has(open_error(raw("{\"w\": \"\xff\"}", 0)), {"not valid JSON"});  // bad UTF-8
  expect_has(open_error(raw("{\"a\":1} x", 0)), {"not valid JSON"});       // not just padding
}

TEST_F(SafetensorsTest, RejectsHeaderThatIsNotAnObject) {
  expect_has(open_error(raw("[1, 2]", 0)), {"does not start with '{'"});
  expect_has(open_error(raw("", 0)), {"does not start with '{'"});
  expect_has(open_error(raw(R"({"w": 5})", 0)), {"tensor 'w'", "expected an object"});
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  expect_has(open_error(raw(R"({"w":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", 8)),
             {"tensor 'w'", "unknown dtype 'F17'"});
  expect_has(open_error(raw(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8)),
             {"tensor 'w'", "dtype is 7"});
  expect_has(open_error(raw(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8)),
             {"tensor 'w'", "no 'dtype'"});
}

TEST_F(SafetensorsTest, RejectsBadShapes) {
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", 8)),
             {"tensor 'w'", "-1", "non-negative"});
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8)),
             {"tensor 'w'", "2.5"});
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8)),
             {"tensor 'w'", "expected an array"});
  expect_has(open_error(raw(
                 R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8)),
             {"tensor 'w'", "too many elements"});
  expect_has(open_error(raw(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2)),
             {"tensor 'w'", "12 bits", "whole bytes"});
}

TEST_F(SafetensorsTest, RejectsBadOffsets) {
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8)),
             {"tensor 'w'", "[8, 16]", "past the end", "buffer is 8 bytes"});
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8)),
             {"tensor 'w'", "begin > end"});
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)),
             {"tensor 'w'", "[begin, end]"});
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8)),
             {"tensor 'w'", "[begin, end]"});
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":[2]}})", 8)),
             {"tensor 'w'", "no 'data_offsets'"});
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_has(open_error(raw(h, 12)), {"tensor 'b'", "overlaps tensor 'a'", "expected 8"});
  const std::string same = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_has(open_error(raw(same, 8)), {"tensor 'b'", "overlaps tensor 'a'"});
}

TEST_F(SafetensorsTest, RejectsGaps) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  expect_has(open_error(raw(h, 20)), {"tensor 'b'", "gap", "starts at byte 12, expected 8",
                                      "tensor 'a'"});
  expect_has(open_error(raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
             {"tensor 'w'", "gap", "expected 0"});
}

TEST_F(SafetensorsTest, RejectsWrongByteSize) {
  expect_has(open_error(raw(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8)),
             {"tensor 'w'", "hold 8 bytes, expected 12", "BF16 [2, 3]"});
}

TEST_F(SafetensorsTest, RejectsTrailingBytes) {
  expect_has(open_error(raw(kOne, 12)),
             {"t.safetensors", "tensor 'w'", "4 trailing bytes", "buffer is 12 bytes"});
  expect_has(open_error(raw("{}", 3)), {"3 trailing bytes", "no tensors"});
}

TEST_F(SafetensorsTest, RejectsDuplicateNames) {
  const std::string h = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_has(open_error(raw(h, 8)), {"tensor 'w'", "more than once"});
  const std::string k = R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})";
  expect_has(open_error(raw(k, 4)), {"tensor 'w'", "duplicate key 'dtype'"});
}

TEST_F(SafetensorsTest, RejectsBadMetadata) {
  expect_has(open_error(raw(R"({"__metadata__":{"format":1}})", 0)),
             {"__metadata__", "format", "expected a string"});
  expect_has(open_error(raw(R"({"__metadata__":"pt"})", 0)), {"__metadata__", "expected an object"});
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  const std::string p = path("w.safetensors");
  EXPECT_THROW(write_safetensors(p, {{"x", "F16", {1}, {1.0f}}}), CheckpointError);
  EXPECT_THROW(write_safetensors(p, {{"x", "F32", {2}, {1.0f}}}), CheckpointError);
  EXPECT_THROW(write_safetensors(p, {{"x", "F32", {1}, {1.0f}}, {"x", "F32", {1}, {1.0f}}}),
               CheckpointError);
  EXPECT_THROW(write_safetensors(path("no/such/dir/w.safetensors"), {}), CheckpointError);
}

}  // namespace
}  // namespace replayssm::engine
