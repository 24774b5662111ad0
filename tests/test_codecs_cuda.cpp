// GPU tests of the codecs (include/replayssm/codecs.h): the CUDA kernels give the CPU backend's
// bits exactly, for NVFP4, FP8 per-row and float16 stochastic rounding, on random data mixed
// with the special cases (NaN, +-Inf, zero and tiny blocks, fp32 subnormals), and decoding of
// arbitrary bytes and scales; cuRAND's Philox4_32_10 device stream equals the host Philox4x32-10
// for the offsets and subsequences the codecs use. Guard bytes around every device buffer stay
// intact. Skipped (with the reason) where no CUDA device is present.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/codec_math.h"
#include "cuda/codecs/codecs_cuda.h"
#include "cuda_test_util.h"
#include "replayssm/codecs.h"

namespace replayssm::testing::cuda_test {
namespace {

namespace cd = ::replayssm::codecs;
constexpr DType kF32 = DType::kF32, kU8 = DType::kU8;

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// Random float32 data with the special cases mixed in: normal values of a random magnitude per
/// 16-block, zero blocks, tiny blocks, NaN, +-Inf, -0 and fp32 subnormals.
std::vector<float> nasty_data(int64_t count, Rng& rng) {
  std::vector<float> x(count);
  for (int64_t b = 0; b < count; b += 16) {
    const int kind = static_cast<int>(rng.integer(0, 9));
    const double mag = kind == 0 ? 0.0 : kind == 1 ? 1e-40 : std::pow(10.0, rng.uniform(-20, 20));
    for (int64_t i = b; i < std::min(count, b + 16); ++i)
      x[i] = static_cast<float>(rng.normal() * mag);
  }
  for (int64_t k = 0; k < count / 50; ++k) {
    const int64_t i = rng.integer(0, count - 1);
    const int kind = static_cast<int>(rng.integer(0, 3));
    x[i] = kind == 0   ? std::numeric_limits<float>::quiet_NaN()
           : kind == 1 ? std::numeric_limits<float>::infinity() * (rng.integer(0, 1) ? 1 : -1)
           : kind == 2 ? -0.0f
                       : 1e-41f;
  }
  return x;
}

/// Random bytes (any code, any scale byte, including NaN codes).
std::vector<uint8_t> random_bytes(int64_t count, Rng& rng) {
  std::vector<uint8_t> b(count);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng.integer(0, 255));
  return b;
}

struct Shape2 {
  int64_t rows, n, group_rows;
};

TEST(CodecsCuda, CurandPhiloxEqualsHostPhilox) {
  RSSM_SKIP_WITHOUT_CUDA();
  struct Case {
    uint64_t seed, subsequence, offset;
  };
  const Case cases[] = {
      {0, 0, 0},
      {42, (uint64_t{7} << 32) | 10, 0},
      {0x0123456789abcdefull, (uint64_t{0xffffffff} << 32) | 0xfffffffe, 4 * 1000},
      {1, 3, 1},  // offsets that are not multiples of 4
      {2, 5, 6},
      {3, 0, 4 * ((uint64_t{1} << 32) - 1) + 2},  // crosses into counter word y
      {~uint64_t{0}, ~uint64_t{0}, 12345}};
  const int64_t count = 41;
  DeviceBuffer words(DType::kI32, {count}, 81);
  for (const Case& c : cases) {
    cuda::codecs::curand_philox_words(c.seed, c.subsequence, c.offset, count,
                                      static_cast<uint32_t*>(words.view().data));
    const std::vector<uint8_t> raw = words.download();
    for (int64_t k = 0; k < count; ++k) {
      const uint64_t p = c.offset + static_cast<uint64_t>(k), q = p / 4;
      const codec::Philox4 b = codec::philox4x32_10(
          {static_cast<uint32_t>(q), static_cast<uint32_t>(q >> 32),
           static_cast<uint32_t>(c.subsequence), static_cast<uint32_t>(c.subsequence >> 32)},
          static_cast<uint32_t>(c.seed), static_cast<uint32_t>(c.seed >> 32));
      uint32_t got;
      std::memcpy(&got, raw.data() + 4 * k, 4);
      ASSERT_EQ(got, codec::philox_word(b, static_cast<int>(p % 4)))
          << "seed " << c.seed << " subsequence " << c.subsequence << " offset " << c.offset
          << " word " << k;
    }
    // The codecs' keying: (seed, slot, step) -> subsequence (slot << 32) | step.
    if (c.offset % 4 == 0) {
      ASSERT_EQ(cd::sr_word(c.seed, static_cast<uint32_t>(c.subsequence >> 32),
                            static_cast<uint32_t>(c.subsequence), c.offset),
                [&] {
                  uint32_t w;
                  std::memcpy(&w, raw.data(), 4);
                  return w;
                }());
    }
  }
  EXPECT_TRUE(words.guards_intact());
}

/// Copies `from` into `to` without reallocating `to` (views into it stay valid).
template <class T>
void refill(std::vector<T>& to, const std::vector<T>& from) {
  ASSERT_EQ(to.size(), from.size());
  std::copy(from.begin(), from.end(), to.begin());
}

TEST(CodecsCuda, Nvfp4EncodeAndDecodeEqualTheCpuBitForBit) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(701);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (const Shape2 s : {Shape2{1, 16, 1}, Shape2{6, 48, 3}, Shape2{256, 128, 64},
                         Shape2{3 * 128, 64, 128}, Shape2{1000, 16, 1}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " n " + std::to_string(s.n) + " group_rows " +
                 std::to_string(s.group_rows));
    const int64_t groups = s.rows / s.group_rows;
    std::vector<float> x = nasty_data(s.rows * s.n, rng);
    // CPU
    std::vector<uint8_t> codes(s.rows * s.n / 2), scales(s.rows * s.n / 16);
    std::vector<float> globals(groups), y(s.rows * s.n);
    const cd::Nvfp4 hq{make_view(codes.data(), kU8, {s.rows, s.n / 2}),
                       make_view(scales.data(), kU8, {s.rows, s.n / 16}),
                       make_view(globals.data(), kF32, {groups}), s.group_rows};
    cd::nvfp4_encode(make_view(x.data(), kF32, {s.rows, s.n}), hq);
    // CUDA, through the public API
    DeviceBuffer dx(kF32, {s.rows, s.n}, 82), dc(kU8, {s.rows, s.n / 2}, 83),
        ds(kU8, {s.rows, s.n / 16}, 84), dg(kF32, {groups}, 85), dy(kF32, {s.rows, s.n}, 86);
    dx.upload(as_bytes(x));
    dy.poison();
    const cd::Nvfp4 dq{dc.view(), ds.view(), dg.view(), s.group_rows};
    cd::nvfp4_encode(dx.view(), dq);
    EXPECT_EQ(dc.download(), codes);
    EXPECT_EQ(ds.download(), scales);
    EXPECT_EQ(dg.download(), as_bytes(globals));
    // Decode what was encoded, then arbitrary bytes and scales.
    for (int round = 0; round < 2; ++round) {
      if (round == 1) {
        // Overwrite in place: the host views hq point into these buffers (assigning a new vector
        // would free the memory they read — the bug the first H200 run of this test caught).
        refill(codes, random_bytes(static_cast<int64_t>(codes.size()), rng));
        refill(scales, random_bytes(static_cast<int64_t>(scales.size()), rng));
        for (float& g : globals) g = nasty_data(1, rng)[0];
        dc.upload(codes), ds.upload(scales), dg.upload(as_bytes(globals));
      }
      cd::nvfp4_decode(hq, make_view(y.data(), kF32, {s.rows, s.n}));
      cd::nvfp4_decode(dq, dy.view());
      EXPECT_EQ(dy.download(), as_bytes(y)) << (round ? "random bytes" : "encoded data");
    }
    for (const DeviceBuffer* b : {&dx, &dc, &ds, &dg, &dy}) EXPECT_TRUE(b->guards_intact());
  }
}

/// Sets an environment variable for its lifetime (a tuning plan read at every launch).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

// nvfp4_encode_flushed, the split modes' copy after a flush: every group (slot, head) of a batch
// row whose slot flushes equals the CPU codec's encoding of the checkpoint (float32, or float16
// widened) byte for byte; every other group (pad rows, ordinary rows, slot ids past the pool,
// flushing slots outside the batch) keeps its bytes. Work lists with small grids (blocks walking
// many items) and batches longer than a block (lists built in several passes) included. Groups of 384 / 640 / 1024 blocks of 16 (odd, Nano-4B and Qwen3.5-4B
// heads: one block per thread, runs of 4 heads, here also 5 and 6 heads) and of 2048 (the
// 256-thread kernel). fp8_encode_flushed (the same work list) likewise on the float32 inputs.
TEST(CodecsCuda, FlushedEncodesEqualTheCpuOnFlushingRowsOnly) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(705);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  struct S {
    int64_t heads, rows, n, slots, batch;
  };
  struct Plans {
    const char *nvfp4, *fp8;
  };
  // The default plans (the work lists); the work lists with grids of 2 or 3 blocks (each block
  // walks many items); the fallbacks for batches of more than 8192 rows (NVFP4: 4-head / 3-head
  // runs; FP8: a block per (row, head)) through the tuning plans, read at every launch.
  for (const Plans plan : {Plans{"", ""}, Plans{"grid=2", "grid=3"}, Plans{"kernel=1,hpb=4", "list=0"},
                           Plans{"kernel=1,hpb=3", "grid=2"}})
  // Groups of 384 / 640 / 1024 / 2048 blocks of 16, and small groups (64 blocks: 2 warps) in a
  // batch of 130 rows, so a block lists the rows in several passes.
  for (const S s : {S{6, 96, 64, 7, 5}, S{5, 80, 128, 7, 5}, S{3, 128, 128, 7, 5},
                    S{2, 256, 128, 7, 5}, S{2, 16, 64, 160, 130}})
    for (const DType xd : {kF32, DType::kF16}) {
      ScopedEnv env("RSSM_NVFP4_ENCODE_PLAN", plan.nvfp4), env8("RSSM_FP8_ENCODE_PLAN", plan.fp8);
      SCOPED_TRACE(std::string("plans '") + plan.nvfp4 + "' '" + plan.fp8 + "' heads " +
                   std::to_string(s.heads) + " rows " + std::to_string(s.rows) + " n " +
                   std::to_string(s.n) + " batch " + std::to_string(s.batch) +
                   (xd == kF32 ? " float32" : " float16"));
      const int64_t slots = s.slots, batch = s.batch, ge = s.rows * s.n, groups = slots * s.heads;
      // The checkpoint, and its values as the encoder sees them (float16 widened exactly).
      std::vector<float> x = nasty_data(groups * ge, rng);
      std::vector<uint16_t> xh(x.size());
      if (xd == DType::kF16)
        for (size_t i = 0; i < x.size(); ++i) xh[i] = codec::f16_rne(x[i]), x[i] = codec::f16_decode(xh[i]);
      // Rows: distinct random slots, one pad row; random flush flags on every slot (some outside
      // the batch flush too: they must not be encoded).
      std::vector<int32_t> all(slots);
      for (int32_t i = 0; i < slots; ++i) all[i] = i;
      rng.shuffle(all);
      std::vector<int32_t> ids(all.begin(), all.begin() + batch);
      ids[rng.integer(0, batch - 1)] = -1;
      int64_t big = rng.integer(0, batch - 1);  // a slot id past the pool: never encoded
      while (ids[big] < 0) big = (big + 1) % batch;
      ids[big] = static_cast<int32_t>(slots);
      std::vector<int8_t> flush(slots);
      for (int8_t& f : flush) f = static_cast<int8_t>(rng.integer(0, 1));
      flush[all[batch]] = 1;  // a slot outside the batch that flushes
      if (ids[0] >= 0 && ids[0] < slots) flush[ids[0]] = 1;
      if (ids[1] >= 0 && ids[1] < slots) flush[ids[1]] = 0;
      // Expected: random prior bytes, the flushing rows' groups encoded by the CPU codec.
      std::vector<uint8_t> codes = random_bytes(groups * ge / 2, rng);
      std::vector<uint8_t> scales = random_bytes(groups * ge / 16, rng);
      std::vector<float> globals(groups);
      for (float& g : globals) g = static_cast<float>(rng.uniform(0.0, 1.0));
      DeviceBuffer dx(xd, {groups * ge}, 91), dc(kU8, {groups * ge / 2}, 92),
          ds(kU8, {groups * ge / 16}, 93), dg(kF32, {groups}, 94), di(DType::kI32, {batch}, 95),
          df(DType::kI8, {slots}, 96);
      dx.upload(xd == kF32 ? as_bytes(x) : as_bytes(xh));
      dc.upload(codes), ds.upload(scales), dg.upload(as_bytes(globals));
      di.upload(as_bytes(ids)), df.upload(as_bytes(flush));
      for (int32_t slot : ids) {
        if (slot < 0 || slot >= slots || !flush[slot]) continue;
        for (int64_t h = 0; h < s.heads; ++h) {
          const int64_t g = slot * s.heads + h;
          const cd::Nvfp4 q{make_view(codes.data() + g * ge / 2, kU8, {s.rows, s.n / 2}),
                            make_view(scales.data() + g * ge / 16, kU8, {s.rows, s.n / 16}),
                            make_view(globals.data() + g, kF32, {1}), s.rows};
          cd::nvfp4_encode(make_view(x.data() + g * ge, kF32, {s.rows, s.n}), q);
        }
      }
      ::replayssm::cuda::codecs::FlushedRows fr;
      fr.slot_ids = static_cast<const int32_t*>(di.view().data);
      fr.is_flush = static_cast<const int8_t*>(df.view().data);
      fr.batch = static_cast<int32_t>(batch), fr.slots = static_cast<int32_t>(slots);
      fr.heads = static_cast<int32_t>(s.heads);
      const cd::Nvfp4 dq{dc.view(), ds.view(), dg.view(), s.rows};
      ::replayssm::cuda::codecs::nvfp4_encode_flushed(dx.view().data, xd, fr, s.rows, s.n, dq,
                                                       nullptr);
      ::replayssm::cuda::device_synchronize();
      EXPECT_EQ(dc.download(), codes);
      EXPECT_EQ(ds.download(), scales);
      EXPECT_EQ(dg.download(), as_bytes(globals));
      for (const DeviceBuffer* b : {&dx, &dc, &ds, &dg, &di, &df}) EXPECT_TRUE(b->guards_intact());
      if (xd != kF32) continue;
      // fp8_encode_flushed (fp32/fp8's copy, float32 checkpoints only): the same rows, one scale
      // per row of n.
      std::vector<uint8_t> f8 = random_bytes(groups * ge, rng);
      std::vector<float> rs(groups * s.rows);
      for (float& v : rs) v = static_cast<float>(rng.uniform(0.0, 1.0));
      DeviceBuffer d8(kU8, {groups * ge}, 97), drs(kF32, {groups * s.rows}, 98);
      d8.upload(f8), drs.upload(as_bytes(rs));
      for (int32_t slot : ids) {
        if (slot < 0 || slot >= slots || !flush[slot]) continue;
        const int64_t r0 = slot * s.heads * s.rows, nr = s.heads * s.rows;
        cd::fp8_encode(make_view(x.data() + r0 * s.n, kF32, {nr, s.n}),
                       cd::Fp8Rows{make_view(f8.data() + r0 * s.n, kU8, {nr, s.n}),
                                   make_view(rs.data() + r0, kF32, {nr})});
      }
      ::replayssm::cuda::codecs::fp8_encode_flushed(static_cast<const float*>(dx.view().data), fr,
                                                     s.rows, s.n, cd::Fp8Rows{d8.view(), drs.view()},
                                                     nullptr);
      ::replayssm::cuda::device_synchronize();
      EXPECT_EQ(d8.download(), f8);
      EXPECT_EQ(drs.download(), as_bytes(rs));
      EXPECT_TRUE(d8.guards_intact() && drs.guards_intact());
    }
}

TEST(CodecsCuda, Fp8RowsEncodeAndDecodeEqualTheCpuBitForBit) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(702);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (const Shape2 s :
       {Shape2{1, 1, 1}, Shape2{7, 33, 1}, Shape2{512, 128, 1}, Shape2{3, 1000, 1}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " n " + std::to_string(s.n));
    std::vector<float> x = nasty_data(s.rows * s.n, rng);
    std::vector<uint8_t> codes(s.rows * s.n);
    std::vector<float> scales(s.rows), y(s.rows * s.n);
    const cd::Fp8Rows hq{make_view(codes.data(), kU8, {s.rows, s.n}),
                         make_view(scales.data(), kF32, {s.rows})};
    cd::fp8_encode(make_view(x.data(), kF32, {s.rows, s.n}), hq);
    DeviceBuffer dx(kF32, {s.rows, s.n}, 87), dc(kU8, {s.rows, s.n}, 88), ds(kF32, {s.rows}, 89),
        dy(kF32, {s.rows, s.n}, 90);
    dx.upload(as_bytes(x));
    dy.poison();
    const cd::Fp8Rows dq{dc.view(), ds.view()};
    cd::fp8_encode(dx.view(), dq);
    EXPECT_EQ(dc.download(), codes);
    EXPECT_EQ(ds.download(), as_bytes(scales));
    for (int round = 0; round < 2; ++round) {
      if (round == 1) {  // in place: hq points into codes and scales
        refill(codes, random_bytes(static_cast<int64_t>(codes.size()), rng));
        refill(scales, nasty_data(s.rows, rng));
        dc.upload(codes), ds.upload(as_bytes(scales));
      }
      cd::fp8_decode(hq, make_view(y.data(), kF32, {s.rows, s.n}));
      cd::fp8_decode(dq, dy.view());
      EXPECT_EQ(dy.download(), as_bytes(y)) << (round ? "random bytes" : "encoded data");
    }
    for (const DeviceBuffer* b : {&dx, &dc, &ds, &dy}) EXPECT_TRUE(b->guards_intact());
  }
}

TEST(CodecsCuda, F16StochasticRoundingEqualsTheCpuBitForBit) {
  RSSM_SKIP_WITHOUT_CUDA();
  const uint64_t seed = test_seed(703);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (const Shape2 s : {Shape2{1, 1, 1}, Shape2{5, 4099, 1}, Shape2{64, 8192, 1}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " n " + std::to_string(s.n));
    std::vector<float> x = nasty_data(s.rows * s.n, rng);
    for (int64_t i = 0; i < s.rows * s.n; i += 7)  // fp16-subnormal and overflow regions too
      x[i] = static_cast<float>(rng.normal() * (i % 2 ? 1e-6 : 7e4));
    std::vector<int32_t> slots(s.rows), steps(s.rows);
    for (int64_t r = 0; r < s.rows; ++r) {
      slots[r] = static_cast<int32_t>(rng.integer(-5, 1 << 20));
      steps[r] = static_cast<int32_t>(rng.integer(INT32_MIN, INT32_MAX));
    }
    const uint64_t key_seed = rng.gen();
    std::vector<uint16_t> y(s.rows * s.n);
    cd::f16_sr_encode(make_view(x.data(), kF32, {s.rows, s.n}),
                      {key_seed, make_view(slots.data(), DType::kI32, {s.rows}),
                       make_view(steps.data(), DType::kI32, {s.rows})},
                      make_view(y.data(), DType::kF16, {s.rows, s.n}));
    DeviceBuffer dx(kF32, {s.rows, s.n}, 91), dsl(DType::kI32, {s.rows}, 92),
        dst(DType::kI32, {s.rows}, 93), dy(DType::kF16, {s.rows, s.n}, 94);
    dx.upload(as_bytes(x)), dsl.upload(as_bytes(slots)), dst.upload(as_bytes(steps));
    dy.poison();
    cd::f16_sr_encode(dx.view(), {key_seed, dsl.view(), dst.view()}, dy.view());
    EXPECT_EQ(dy.download(), as_bytes(y));
    for (const DeviceBuffer* b : {&dx, &dsl, &dst, &dy}) EXPECT_TRUE(b->guards_intact());
  }
}

TEST(CodecsCuda, StochasticRoundingAdvancesWithTheDeviceStepCounter) {
  RSSM_SKIP_WITHOUT_CUDA();
  // What a graph replay sees: the same launch, a step counter changed on the device in between.
  const int64_t n = 2048;
  Rng rng(test_seed(704));
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.uniform(1.0, 2.0));
  DeviceBuffer dx(kF32, {1, n}, 95), dsl(DType::kI32, {1}, 96), dst(DType::kI32, {1}, 97),
      dy(DType::kF16, {1, n}, 98);
  dx.upload(as_bytes(x)), dsl.upload(as_bytes(std::vector<int32_t>{3}));
  std::vector<std::vector<uint8_t>> outs;
  for (int32_t step : {5, 6, 5}) {
    dst.upload(as_bytes(std::vector<int32_t>{step}));
    cd::f16_sr_encode(dx.view(), {77, dsl.view(), dst.view()}, dy.view());
    outs.push_back(dy.download());
  }
  EXPECT_NE(outs[0], outs[1]) << "a new step draws fresh bits";
  EXPECT_EQ(outs[0], outs[2]) << "the same step reproduces";
}

}  // namespace
}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
