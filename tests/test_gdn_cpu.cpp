// GDN/KDA CPU backend against the fp64 oracle, op by op: outputs, the checkpoint after each flush,
// ring contents at the live positions, at small, odd and real model shapes, GDN and KDA, float32
// and bfloat16 inputs, beta rounded to bf16 or not.
#include <gtest/gtest.h>

#include "test_gdn_harness.h"

namespace replayssm::testing::gdnt {
namespace {

using gdn::Gate;

struct Variant {
  Gate gate;
  DType dtype;
  bool beta_bf16;
};
const Variant kVariants[] = {{Gate::kScalar, DType::kF32, false},
                             {Gate::kScalar, DType::kBF16, true},
                             {Gate::kChannel, DType::kF32, true},
                             {Gate::kChannel, DType::kBF16, false}};

Cfg make(Shape sh, Variant v, RingConfig ring, int64_t slots) {
  Cfg s;
  s.shape = sh, s.gate = v.gate, s.dtype = v.dtype, s.beta_bf16 = v.beta_bf16, s.ring = ring,
  s.slots = slots;
  return s;
}

void run_ops(Shape sh, int64_t steps, int64_t slots, int64_t live, uint64_t seed) {
  for (const Variant& v : kVariants) {
    const struct {
      Op op;
      RingConfig ring;
    } cases[] = {
        {Op::kConventional, {4, 1, RingMode::kDecode}},
        {Op::kReplay, {4, 1, RingMode::kDecode}},
        {Op::kReplay, {5, 1, RingMode::kDecode}},
        {Op::kVerify, {8, 3, RingMode::kSpeculative}},
    };
    for (const auto& c : cases) {
      const Cfg s = make(sh, v, c.ring, slots);
      SCOPED_TRACE(s.describe());
      const Stats st = run_random(s, c.op, steps, live, seed++);
      if (::testing::Test::HasFailure()) return;
      report(s, st);
    }
  }
}

TEST(GdnCpu, MatchesOracleSmallShape) {
  const uint64_t seed = test_seed(101);
  SCOPED_TRACE("seed " + std::to_string(seed));
  run_ops(kSmall, 40, 6, 3, seed);
}

TEST(GdnCpu, MatchesOracleOddShapes) {
  const uint64_t seed = test_seed(202);
  SCOPED_TRACE("seed " + std::to_string(seed));
  run_ops(kTiny, 40, 5, 3, seed);
  run_ops(kOdd, 12, 4, 2, seed + 100);
}

// The real shapes, a few steps each: enough to cross a flush (L = 4) in both modes.
TEST(GdnCpu, MatchesOracleRealShapes) {
  const uint64_t seed = test_seed(303);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const struct {
    Shape sh;
    Variant v;
  } cases[] = {
      {kQwen4B, {Gate::kScalar, DType::kBF16, true}},
      {kQwen122B, {Gate::kScalar, DType::kF32, false}},
      {kKimi, {Gate::kChannel, DType::kBF16, false}},
  };
  uint64_t s0 = seed;
  for (const auto& c : cases) {
    for (const auto& [op, ring] :
         {std::pair{Op::kReplay, RingConfig{4, 1, RingMode::kDecode}},
          std::pair{Op::kVerify, RingConfig{4, 2, RingMode::kSpeculative}}}) {
      const Cfg s = make(c.sh, c.v, ring, 3);
      SCOPED_TRACE(s.describe());
      const Stats st = run_random(s, op, 5, 2, s0++, 0.0);
      if (HasFailure()) return;
      report(s, st);
    }
  }
}

}  // namespace
}  // namespace replayssm::testing::gdnt
