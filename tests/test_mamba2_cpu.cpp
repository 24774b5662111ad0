// Mamba-2 CPU backend against the fp64 oracle, op by op: every shape of the brief (small, odd,
// the two Nemotron shapes), float32 and bfloat16 inputs (dt float32 or bfloat16), with and
// without z and D. Each call is checked by Sim (test_mamba2_sim.h): outputs, the checkpoint after
// each flush, the ring contents at the live positions, untouched slots and pad rows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_mamba2_sim.h"

namespace replayssm {
namespace {

using namespace testing::m2;

struct Case {
  Shape shape;
  Options opt;
  int steps;  ///< calls per op
};

std::vector<Case> cases() {
  std::vector<Case> out;
  const Options f32{DType::kF32, false, true, true};
  const Options bf16{DType::kBF16, true, true, true};
  for (const Shape& s : {kSmall, kOddA, kOddB}) {
    const int more = s.H == kOddA.H ? 6 : 20, fewer = s.H == kOddA.H ? 4 : 12;  // 24x48x64 is slower
    out.push_back({s, f32, more});
    out.push_back({s, bf16, more});
    out.push_back({s, Options{DType::kF32, false, false, false}, fewer});
    out.push_back({s, Options{DType::kBF16, false, true, false}, fewer});
    out.push_back({s, Options{DType::kF32, false, false, true, false}, fewer});  // no softplus
  }
  // The real shapes: a few steps each (the fp64 oracle dominates the time).
  for (const Shape& s : {kNano, kSuper}) {
    out.push_back({s, f32, 3});
    out.push_back({s, bf16, 3});
  }
  return out;
}

class Mamba2Cpu : public ::testing::TestWithParam<Case> {};

std::string label(const Case& c) {
  return std::to_string(c.shape.H) + "x" + std::to_string(c.shape.P) + "x" +
         std::to_string(c.shape.N) + "g" + std::to_string(c.shape.G) + "_" +
         (c.opt.dtype == DType::kBF16 ? "bf16" : "f32") + (c.opt.dt_same ? "dt" : "") +
         (c.opt.z ? "_z" : "") + (c.opt.D ? "_D" : "") + (c.opt.softplus ? "" : "_nosp");
}
std::string case_name(const ::testing::TestParamInfo<Case>& info) { return label(info.param); }
void PrintTo(const Case& c, std::ostream* os) { *os << label(c) << ", " << c.steps << " calls"; }

bool is_real(const Shape& s) { return s.H * s.P * s.N > 500000; }

Sim::Config config(const Case& c, RingConfig ring) {
  Sim::Config cfg;
  cfg.shape = c.shape;
  cfg.opt = c.opt;
  cfg.ring = ring;
  cfg.slots = is_real(c.shape) ? 3 : 9;  // real shapes: two sequences and an idle slot
  return cfg;
}

TEST_P(Mamba2Cpu, ConventionalStep) {
  const Case& c = GetParam();
  const uint64_t seed = testing::test_seed(101);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Sim sim(config(c, RingConfig{1, 1, RingMode::kDecode}), seed);
  const int nseq = is_real(c.shape) ? 2 : 4;
  std::vector<int> seqs;
  const std::vector<int32_t> slots = {2, 0, 8, 5};  // random-looking ids in a pool of 3 or 9
  for (int i = 0; i < nseq; ++i) seqs.push_back(sim.start(slots[i]));
  for (int step = 0; step < c.steps; ++step)
    ASSERT_TRUE(sim.step(Op::kConventional, sim.random_rows(seqs, step % 2)));
}

TEST_P(Mamba2Cpu, ReplayStep) {
  const Case& c = GetParam();
  const uint64_t seed = testing::test_seed(102);
  SCOPED_TRACE("seed " + std::to_string(seed));
  // L small enough that the calls cross flushes (real shapes: 3 calls, L = 2).
  const int L = is_real(c.shape) ? 2 : c.steps >= 12 ? 5 : 3;
  Sim sim(config(c, RingConfig{L, 1, RingMode::kDecode}), seed);
  const int nseq = is_real(c.shape) ? 2 : 4;
  std::vector<int> seqs;
  for (int i = 0; i < nseq; ++i) seqs.push_back(sim.start(is_real(c.shape) ? 2 - 2 * i : 8 - 2 * i));
  for (int step = 0; step < c.steps; ++step) {
    std::vector<RowPlan> rows = sim.random_rows(seqs, step % 3 == 1 ? 2 : 0);
    ASSERT_TRUE(sim.step(Op::kReplay, rows));
  }
  EXPECT_GT(sim.flushes(), 0);
}

TEST_P(Mamba2Cpu, Verify) {
  const Case& c = GetParam();
  const uint64_t seed = testing::test_seed(103);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const RingConfig ring = is_real(c.shape) ? RingConfig{4, 2, RingMode::kSpeculative}
                                           : RingConfig{9, 4, RingMode::kSpeculative};
  Sim sim(config(c, ring), seed);
  const int nseq = is_real(c.shape) ? 2 : 4;
  std::vector<int> seqs;
  for (int i = 0; i < nseq; ++i) seqs.push_back(sim.start(is_real(c.shape) ? i + 1 : 2 * i + 1));
  for (int step = 0; step < c.steps; ++step)
    ASSERT_TRUE(sim.step(Op::kVerify, sim.random_rows(seqs, step % 3 == 2 ? 1 : 0)));
  EXPECT_GT(sim.flushes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Mamba2Cpu, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace replayssm
