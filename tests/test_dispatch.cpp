// The dispatcher's ring-length table (dispatch.h): replay only where it measured faster.
#include <gtest/gtest.h>

#include "replayssm/dispatch.h"
#include "replayssm/errors.h"

namespace replayssm {
namespace {

TEST(Dispatch, Mamba2ReplaysFromBatch16WithAtMost16) {
  for (int64_t b : {0, 1, 4, 8, 15})
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, b, 16), 1);
  for (int64_t b : {16, 32, 64, 128, 256, 512}) {
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, b, 16), 16);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, b, 8), 8);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, b, 32), 16);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, b, 1), 1);
  }
}

TEST(Dispatch, GdnReplaysFromBatch16Or8WithLargeStatesKdaFrom32AtL8) {
  const int64_t qwen4b = 32 * 128 * 128 * 4, qwen122b = 64 * 128 * 128 * 4;  // bytes per sequence
  for (int64_t b : {0, 1, 7, 8, 15}) {
    EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16), 1);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16, StateFormat::kFp32, qwen4b), 1);
  }
  for (int64_t b : {0, 1, 7})
    EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16, StateFormat::kFp32, qwen122b), 1);
  for (int64_t b : {8, 15})
    EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16, StateFormat::kFp32, qwen122b), 16);
  for (int64_t b : {16, 32, 64, 256, 512}) {
    EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16), 16);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 4, StateFormat::kFp32, qwen4b), 4);
  }
  for (int64_t b : {0, 1, 8, 16, 31}) {
    EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, b, 16), 1);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, b, 16, StateFormat::kFp32, qwen122b), 1);
  }
  for (int64_t b : {32, 64, 256, 512}) {  // KDA's heavier records: at most 8
    EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, b, 16), 8);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, b, 32, StateFormat::kFp32, qwen122b), 8);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, b, 4), 4);
  }
}

TEST(Dispatch, StateBytesMoveOnlyGdn) {
  const int64_t big = int64_t{64} << 20;  // far above every threshold
  for (int64_t b : {8, 15}) {  // Mamba-2 ignores the state size
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, b, 16, StateFormat::kFp32, big), 1);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16, StateFormat::kFp32, big), 16);
  }
  // The boundary: 4 MiB replays from batch 8, one byte less from 16 (a read copy: from 32).
  EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, 8, 16, StateFormat::kFp32, int64_t{4} << 20), 16);
  EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, 8, 16, StateFormat::kFp32, (int64_t{4} << 20) - 1), 1);
  EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, 8, 16, StateFormat::kBf16, int64_t{4} << 20), 16);
  EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, 7, 16, StateFormat::kBf16, int64_t{4} << 20), 1);
  EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, 16, 16, StateFormat::kBf16, (int64_t{4} << 20) - 1), 1);
  EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, 32, 16, StateFormat::kBf16, (int64_t{4} << 20) - 1), 16);
}

TEST(Dispatch, SplitModesWithAReadCopyReplayFromLargerBatches) {
  for (int64_t b : {8, 16, 32, 63})
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, b, 16, StateFormat::kBf16), 1);
  for (int64_t b : {64, 256, 512})
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, b, 16, StateFormat::kBf16), 16);
  for (int64_t b : {8, 16, 31})
    EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16, StateFormat::kBf16), 1);
  for (int64_t b : {32, 256, 512}) EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 8, StateFormat::kBf16), 8);
  for (int64_t b : {32, 63}) EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, b, 16, StateFormat::kBf16), 1);
  for (int64_t b : {64, 512}) EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, b, 16, StateFormat::kBf16), 8);
  // fp16sr/fp16sr: against its own L = 1 step (an SR write every step), from batch 8 / 8 / 32.
  const StateFormat sr = StateFormat::kFp16Sr;
  for (SsmFamily f : {SsmFamily::kMamba2, SsmFamily::kGdn}) {
    for (int64_t b : {1, 7}) EXPECT_EQ(recommended_ring_length(f, b, 16, sr), 1);
    for (int64_t b : {8, 256}) EXPECT_EQ(recommended_ring_length(f, b, 16, sr), 16);
  }
  EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, 31, 16, sr), 1);
  EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, 32, 16, sr), 8);
}

// Quantised read copies (fp32/fp8, fp32/nvfp4, fp16sr/nvfp4): GDN NVFP4 from batch 64 (32 at
// >= 4 MiB of state per sequence) and FP8 from 128 whatever the state size, KDA never (its
// quantised ordinary step is slower than the fp32 one), Mamba-2 NVFP4 from 32 (measured in
// session 30), FP8 as the 16-bit copies (64).
TEST(Dispatch, QuantisedReadCopiesReplayFromTheirOwnBatches) {
  const int64_t big = int64_t{4} << 20;
  for (StateFormat f : {StateFormat::kFp8, StateFormat::kNvfp4}) {
    const bool nv = f == StateFormat::kNvfp4;
    for (const int64_t bytes : {int64_t{0}, big}) {
      const int64_t from = nv ? (bytes == big ? 32 : 64) : 128;
      for (int64_t b : {int64_t{8}, from - 1})
        EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16, f, bytes), 1) << b;
      for (int64_t b : {from, int64_t{512}})
        EXPECT_EQ(recommended_ring_length(SsmFamily::kGdn, b, 16, f, bytes), 16) << b;
    }
    for (int64_t b : {64, 512, 4096}) EXPECT_EQ(recommended_ring_length(SsmFamily::kKda, b, 8, f), 1);
    const int64_t m2 = f == StateFormat::kNvfp4 ? 32 : 64;
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, m2 - 1, 16, f), 1);
    EXPECT_EQ(recommended_ring_length(SsmFamily::kMamba2, m2, 16, f), 16);
  }
}

TEST(Dispatch, RejectsBadArguments) {
  EXPECT_THROW(recommended_ring_length(SsmFamily::kMamba2, 4, 0), ConfigError);
  EXPECT_THROW(recommended_ring_length(SsmFamily::kGdn, -1, 16), ConfigError);
  EXPECT_THROW(recommended_ring_length(SsmFamily::kGdn, 8, 16, StateFormat::kFp32, -1), ConfigError);
}

}  // namespace
}  // namespace replayssm
