// State precision modes in the engine (ModelOptions::state, precision.h) on the CPU model with
// random-weight checkpoints: split modes move the logits a little (nonzero, small) from fp32;
// with an fp32 recurrence and L = 1 (every step a flush: y from the new fp32 checkpoint, the read
// copy never read) they equal fp32 bit for bit, i.e. the fp32 checkpoint is kept exactly; slot
// reuse restarts the mode buffers (SR counters included); shared baselines run conventionally
// and split modes with ReplaySSM only; bad names are named; eval of a mode against itself is 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include <unistd.h>

#include "engine/tiny_models.h"
#include "replayssm/engine/eval.h"
#include "replayssm/engine/model.h"

namespace replayssm::engine {
namespace {

namespace fs = std::filesystem;

const std::string& tiny_dir(const std::string& arch) {
  static const std::string root = [] {
    const fs::path p =
        fs::temp_directory_path() / ("rssm_engine_modes_" + std::to_string(::getpid()));
    testing::write_tiny_nemotron_h((p / "nemotron_h").string(), 11);
    testing::write_tiny_qwen3_next((p / "qwen3_next").string(), 12);
    return p.string();
  }();
  static std::map<std::string, std::string> dirs;
  return dirs.try_emplace(arch, root + "/" + arch).first->second;
}

ModelOptions options(const std::string& state, SsmMode ssm, int L = 8) {
  ModelOptions o;
  o.ssm = ssm;
  o.ring_L = L;
  o.state = state;
  o.max_slots = 3;
  o.max_context = 256;
  return o;
}

/// Logits of `steps` steps of two rows (slots 2 and 0) fed fixed pseudo-random tokens.
std::vector<float> decode(const std::string& arch, const ModelOptions& o, int steps = 48) {
  auto m = Model::load(tiny_dir(arch), o);
  const std::vector<int32_t> slots{2, 0};
  m->reset(slots);
  std::mt19937 rng(7);
  std::vector<float> all, logits(2 * 256);
  for (int t = 0; t < steps; ++t) {
    const std::vector<int32_t> tok{int32_t(rng() % 256), int32_t(rng() % 256)};
    m->step(tok, slots, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

/// max |a - b| / max |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, s = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    s = std::max(s, double(std::fabs(b[i])));
  }
  return d / s;
}

class EngineStateModes : public ::testing::TestWithParam<std::string> {};

// The read copy's rounding reaches the ordinary steps' outputs: logits move, but by far less
// than a wrong state would (O(1) of the logit scale). nvfp4 / fp8 reads are coarse (a few %).
TEST_P(EngineStateModes, SplitModesDifferSlightlyFromFp32) {
  const auto ref = decode(GetParam(), options("fp32", SsmMode::kReplay));
  for (const char* mode : {"fp32/bf16", "fp32/fp16", "fp16sr/fp16sr", "fp32/nvfp4", "fp16sr/nvfp4",
                           "fp8/nvfp4", "fp32/fp8"}) {
    const double d = rel_diff(decode(GetParam(), options(mode, SsmMode::kReplay)), ref);
    const bool coarse = std::string(mode).find("nvfp4") != std::string::npos ||
                        std::string(mode).find("fp8") != std::string::npos;
    EXPECT_GT(d, 0.0) << mode << ": the mode changed nothing (is it wired?)";
    EXPECT_LT(d, coarse ? 0.2 : 0.01) << mode;
  }
  for (const char* mode : {"shared-fp16", "shared-bf16", "shared-fp8", "shared-nvfp4"}) {
    const auto conv = decode(GetParam(), options("fp32", SsmMode::kConventional));
    const double d = rel_diff(decode(GetParam(), options(mode, SsmMode::kConventional)), conv);
    EXPECT_GT(d, 0.0) << mode;
    EXPECT_LT(d, 0.5) << mode;
  }
}

// L = 1: every step is a flush, whose output comes from the new float32 state; with an fp32
// recurrence the checkpoint is fp32/fp32's bit for bit (Mamba-2 and GDN alike), so the logits are.
TEST_P(EngineStateModes, Fp32RecurrenceKeepsTheFp32Checkpoint) {
  const auto ref = decode(GetParam(), options("fp32", SsmMode::kReplay, 1));
  for (const char* mode : {"fp32/bf16", "fp32/fp16", "fp32/nvfp4", "fp32/fp8"})
    EXPECT_EQ(decode(GetParam(), options(mode, SsmMode::kReplay, 1)), ref) << mode;
  // fp32/fp32 is the engine's fp32, at any L and in both SSM modes.
  EXPECT_EQ(decode(GetParam(), options("fp32/fp32", SsmMode::kReplay)),
            decode(GetParam(), options("fp32", SsmMode::kReplay)));
  EXPECT_EQ(decode(GetParam(), options("fp32/fp32", SsmMode::kConventional)),
            decode(GetParam(), options("fp32", SsmMode::kConventional)));
}

// A reused slot starts fresh: checkpoint, scales, read copy and SR step counter are reset (the
// seed is kept), so the same tokens give the same logits bit for bit; two runs of a model are
// reproducible.
TEST_P(EngineStateModes, SlotReuseResetsTheModeBuffers) {
  for (const auto& [mode, ssm] : {std::pair{"fp16sr/nvfp4", SsmMode::kReplay},
                                  std::pair{"fp8/nvfp4", SsmMode::kReplay},
                                  std::pair{"shared-nvfp4", SsmMode::kConventional}}) {
    auto m = Model::load(tiny_dir(GetParam()), options(mode, ssm));
    const std::vector<int32_t> slot{1};
    std::vector<float> logits(256);
    auto run = [&] {
      m->reset(slot);
      std::vector<float> all;
      for (int t = 0; t < 37; ++t) {
        m->step(std::vector<int32_t>{(t * 31 + 5) % 256}, slot, logits);
        all.insert(all.end(), logits.begin(), logits.end());
      }
      return all;
    };
    const auto first = run();
    EXPECT_EQ(run(), first) << mode;
  }
  const auto a = decode(GetParam(), options("fp16sr/fp16sr", SsmMode::kReplay));
  EXPECT_EQ(decode(GetParam(), options("fp16sr/fp16sr", SsmMode::kReplay)), a);
}

INSTANTIATE_TEST_SUITE_P(Tiny, EngineStateModes, ::testing::Values("nemotron_h", "qwen3_next"));

template <class E>
void expect_error(const ModelOptions& o, const std::string& needle) {
  try {
    Model::load(tiny_dir("nemotron_h"), o);
    ADD_FAILURE() << o.state << ": no error";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << o.state << ": wrong error type: " << e.what();
  }
}

TEST(EngineStateModesLoad, ModeAndSsmMustAgreeAndNamesAreNamed) {
  expect_error<ConfigError>(options("shared-nvfp4", SsmMode::kReplay), "'shared-nvfp4'");
  expect_error<ConfigError>(options("shared-fp8", SsmMode::kReplay), "conventional");
  expect_error<ConfigError>(options("fp32/nvfp4", SsmMode::kConventional), "replay");
  expect_error<ConfigError>(options("fp32/int3", SsmMode::kReplay), "'fp32/int3'");
  expect_error<ConfigError>(options("no-such-mode", SsmMode::kConventional), "'no-such-mode'");
  expect_error<UnsupportedError>(options("bf16", SsmMode::kReplay), "'bf16'");
  ModelOptions spec = options("fp32/bf16", SsmMode::kReplay, 8);
  spec.spec_T = 2;
  expect_error<UnsupportedError>(spec, "'fp32/bf16'");
  ModelOptions gpu = options("fp8/nvfp4", SsmMode::kReplay);
  gpu.cuda = true;  // no CUDA build, or no device, or not built on CUDA: all UnsupportedError
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), gpu), UnsupportedError);
}

// evaluate() of a mode against itself: both models draw the same SR bits from the same seeds,
// so every KL term is exactly 0; against the fp32 reference it is > 0.
TEST(EngineStateModesEval, ModeAgainstItselfIsZero) {
  std::vector<int32_t> tokens(300);
  std::mt19937 rng(3);
  for (auto& t : tokens) t = int32_t(rng() % 256);
  for (const std::string arch : {"nemotron_h", "qwen3_next"}) {
    EvalConfig self{"fp16sr/nvfp4", options("fp16sr/nvfp4", SsmMode::kReplay)};
    EvalOptions eo;
    eo.windows = 2;
    const EvalConfig ref{"fp32/fp32", options("fp32", SsmMode::kConventional)};
    const EvalConfig shared{"shared-nvfp4", options("shared-nvfp4", SsmMode::kConventional)};
    const EvalResult r = evaluate(tiny_dir(arch), tokens, self, std::vector{self}, eo);
    EXPECT_EQ(r.candidates.at(0).all.kl, 0.0) << arch;
    EXPECT_EQ(r.candidates.at(0).all.top1_agreement, 1.0) << arch;
    const EvalResult r2 = evaluate(tiny_dir(arch), tokens, ref, std::vector{self, shared}, eo);
    EXPECT_GT(r2.candidates.at(0).all.kl, 0.0) << arch;
    EXPECT_GT(r2.candidates.at(1).all.kl, 0.0) << arch;
  }
}

}  // namespace
}  // namespace replayssm::engine
