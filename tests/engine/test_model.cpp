// Engine model tests on random-weight checkpoints: ReplaySSM decoding equals conventional decoding
// across many flushes (bit-identical at L = 1), rows are independent of their batch and slot,
// slot reuse starts fresh, the serving loop's continuous batching gives each request the tokens it
// gets alone, and bad input raises a typed error and changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

#include "engine/tiny_models.h"
#include "replayssm/engine/drafter.h"
#include "replayssm/engine/model.h"
#include "replayssm/engine/safetensors.h"
#include "replayssm/engine/sampling.h"
#include "replayssm/engine/serve.h"
#include "replayssm/engine/speculative.h"

namespace replayssm::engine {
namespace {

namespace fs = std::filesystem;

const std::string& tiny_dir(const std::string& arch) {
  static const std::string root = [] {
    const fs::path p = fs::temp_directory_path() / ("rssm_engine_" + std::to_string(::getpid()));
    testing::write_tiny_nemotron_h((p / "nemotron_h").string(), 11);
    testing::write_tiny_qwen3_next((p / "qwen3_next").string(), 12);
    testing::write_tiny_nemotron_h((p / "nemotron_h_odd").string(), 13, "M*M-M", "F32",
                                   testing::odd_widths(testing::NemotronDims{}));
    testing::write_tiny_qwen3_next((p / "qwen3_next_odd").string(), 14, "F32",
                                   testing::odd_widths(testing::QwenDims{}));
    return p.string();
  }();
  static std::map<std::string, std::string> dirs;
  return dirs.try_emplace(arch, root + "/" + arch).first->second;
}

std::unique_ptr<Model> load(const std::string& arch, SsmMode mode, int L = 16, int slots = 4) {
  ModelOptions o;
  o.ssm = mode;
  o.ring_L = L;
  o.max_slots = slots;
  o.max_context = 512;
  return Model::load(tiny_dir(arch), o);
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

class EngineModel : public ::testing::TestWithParam<std::string> {};

// fp32 replay and conventional differ only by summation order inside the SSM op; through a few
// layers and hundreds of steps that stays near 1e-6 of the logit scale. 1e-4 is far below any real
// fault (a missed flush or a wrong record changes logits by O(1)).
TEST_P(EngineModel, ReplayMatchesConventionalAcrossFlushes) {
  for (int L : {1, 2, 5, 16}) {
    auto conv = load(GetParam(), SsmMode::kConventional);
    auto rep = load(GetParam(), SsmMode::kReplay, L);
    const std::vector<int32_t> slots{2, 0, 3};
    conv->reset(slots);
    rep->reset(slots);
    std::mt19937 rng(L);
    std::vector<float> a(3 * 256), b(3 * 256);
    double worst = 0;
    for (int step = 0; step < 300; ++step) {
      std::vector<int32_t> tok(3);
      for (auto& t : tok) t = int32_t(rng() % 256);
      conv->step(tok, slots, a);
      rep->step(tok, slots, b);
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(b[i]));
        worst = std::max(worst, double(std::fabs(a[i] - b[i])));
      }
      if (L == 1) {
        ASSERT_EQ(a, b) << "L = 1 must be the conventional step, bit for bit (step " << step
                        << ")";
      }
    }
    EXPECT_LT(worst, 1e-4 * max_abs(a)) << "L = " << L;
  }
}

TEST_P(EngineModel, RowsIndependentOfBatchAndSlotReuse) {
  std::mt19937 rng(7);
  std::vector<int32_t> seq(80), other(120);
  for (auto& t : seq) t = int32_t(rng() % 256);
  for (auto& t : other) t = int32_t(rng() % 256);
  // Alone in slot 0.
  auto m = load(GetParam(), SsmMode::kReplay, 8);
  std::vector<float> alone(256), row(3 * 256);
  m->reset(std::vector<int32_t>{0});
  std::vector<std::vector<float>> ref;
  for (int32_t t : seq) {
    m->step(std::vector<int32_t>{t}, std::vector<int32_t>{0}, alone);
    ref.push_back(alone);
  }
  // Slot 3 first holds another sequence, is reset, then decodes seq next to two busy rows.
  auto n = load(GetParam(), SsmMode::kReplay, 8);
  n->reset(std::vector<int32_t>{1, 2, 3});
  for (int i = 0; i < 37; ++i)
    n->step(std::vector<int32_t>{other[i], other[i + 1], other[i + 2]},
            std::vector<int32_t>{1, 2, 3}, row);
  n->reset(std::vector<int32_t>{3});
  EXPECT_EQ(n->position(3), 0);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < seq.size(); ++i) {
    n->step(std::vector<int32_t>{other[40 + i], seq[i], other[i]}, std::vector<int32_t>{1, 3, 2},
            row);
    for (int v = 0; v < 256; ++v) {
      worst = std::max(worst, double(std::fabs(row[256 + v] - ref[i][v])));
      scale = std::max(scale, double(std::fabs(ref[i][v])));
    }
  }
  // Only the GEMM's blocking may differ with the batch size: float32 rounding, not state leakage.
  EXPECT_LT(worst, 1e-4 * scale);
}

TEST_P(EngineModel, ContinuousBatchingGivesEachRequestItsOwnTokens) {
  std::vector<Request> reqs;
  std::mt19937 rng(3);
  for (int i = 0; i < 5; ++i) {
    Request r;
    r.prompt.resize(3 + i * 4);
    for (auto& t : r.prompt) t = int32_t(rng() % 256);
    r.max_new_tokens = 10 + 7 * i;
    reqs.push_back(r);
  }
  SamplingParams greedy;
  auto m = load(GetParam(), SsmMode::kReplay, 4, 2);
  ServeStats st;
  const auto together = serve(*m, reqs, 2, greedy, &st);
  EXPECT_EQ(st.generated_tokens, 10 + 17 + 24 + 31 + 38);
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto solo = load(GetParam(), SsmMode::kReplay, 4, 1);
    const auto alone = serve(*solo, {reqs[i]}, 1, greedy);
    ASSERT_EQ(together[i].tokens.size(), size_t(reqs[i].max_new_tokens));
    // Greedy picks are robust to the 1e-6 GEMM rounding differences unless two logits tie that
    // closely; random weights make that vanishingly rare, and a state bug diverges immediately.
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << "request " << i;
  }
}

TEST_P(EngineModel, BadInputRaisesAndChangesNothing) {
  auto m = load(GetParam(), SsmMode::kReplay, 4, 3);
  auto ref = load(GetParam(), SsmMode::kReplay, 4, 3);
  const std::vector<int32_t> s01{0, 1};
  m->reset(s01);
  ref->reset(s01);
  std::vector<float> logits(2 * 256), expect(2 * 256);
  for (int i = 0; i < 6; ++i) {
    m->step(std::vector<int32_t>{i, 2 * i}, s01, logits);
    ref->step(std::vector<int32_t>{i, 2 * i}, s01, expect);
  }
  EXPECT_THROW(m->step(std::vector<int32_t>{1, 2}, std::vector<int32_t>{0, 3}, logits), SlotError);
  EXPECT_THROW(m->step(std::vector<int32_t>{1, 2}, std::vector<int32_t>{1, 1}, logits), SlotError);
  EXPECT_THROW(m->step(std::vector<int32_t>{1, 2}, std::vector<int32_t>{0, -1}, logits), SlotError);
  EXPECT_THROW(m->step(std::vector<int32_t>{1, 256}, s01, logits), ConfigError);
  EXPECT_THROW(m->step(std::vector<int32_t>{1}, s01, logits), ShapeError);
  std::vector<float> small(256);
  EXPECT_THROW(m->step(std::vector<int32_t>{1, 2}, s01, small), ShapeError);
  EXPECT_THROW(m->reset(std::vector<int32_t>{5}), SlotError);
  EXPECT_EQ(m->position(0), 6);
  m->step(std::vector<int32_t>{9, 8}, s01, logits);
  ref->step(std::vector<int32_t>{9, 8}, s01, expect);
  EXPECT_EQ(logits, expect) << "a rejected call modified state";
}

TEST_P(EngineModel, ContextFullIsASlotError) {
  ModelOptions o;
  o.max_slots = 1;
  o.max_context = 5;
  auto m = Model::load(tiny_dir(GetParam()), o);
  m->reset(std::vector<int32_t>{0});
  std::vector<float> logits(256);
  for (int i = 0; i < 5; ++i) m->step(std::vector<int32_t>{i}, std::vector<int32_t>{0}, logits);
  EXPECT_THROW(m->step(std::vector<int32_t>{1}, std::vector<int32_t>{0}, logits), SlotError);
}

// step_greedy gives the argmax of the logits step() gives for the same rows and history (two
// models of the same weights fed the same tokens); a wrong next size raises and changes nothing.
TEST_P(EngineModel, StepGreedyIsTheArgmaxOfStep) {
  auto a = load(GetParam(), SsmMode::kReplay, 4);
  auto g = load(GetParam(), SsmMode::kReplay, 4);
  const std::vector<int32_t> slots{3, 1, 0};
  a->reset(slots);
  g->reset(slots);
  std::mt19937 rng(5);
  std::vector<float> logits(slots.size() * 256);
  std::vector<int32_t> next(slots.size()), tokens(slots.size());
  for (int step = 0; step < 24; ++step) {
    for (auto& t : tokens) t = int32_t(rng() % 256);
    a->step(tokens, slots, logits);
    g->step_greedy(tokens, slots, next);
    for (size_t b = 0; b < slots.size(); ++b)
      ASSERT_EQ(next[b], greedy_token({logits.data() + b * 256, 256})) << "step " << step;
  }
  std::vector<int32_t> short_next(slots.size() - 1);
  EXPECT_THROW(g->step_greedy(tokens, slots, short_next), ShapeError);
  EXPECT_EQ(g->position(3), 24);  // nothing ran
}

// The argmax rule of greedy_token: the lowest id among equal maxima; -1 for a NaN or an infinity.
TEST(EngineSampling, GreedyTokenRule) {
  std::vector<float> v{0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(greedy_token(v), 1);
  v[2] = std::nanf("");
  EXPECT_EQ(greedy_token(v), -1);
  v[2] = -INFINITY;
  EXPECT_EQ(greedy_token(v), -1);
}

INSTANTIATE_TEST_SUITE_P(Tiny, EngineModel,
                         ::testing::Values("nemotron_h", "qwen3_next", "nemotron_h_odd",
                                           "qwen3_next_odd"));

TEST(EngineLoad, BadOptionsAndMissingTensorsAreNamed) {
  ModelOptions o;
  o.ring_L = -1;
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), o), ConfigError);
  o.ring_L = 65;
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), o), ConfigError);
  o.ring_L = 16;
  o.state = "no-such-mode";
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), o), ConfigError);
  o.state = "bf16";  // 16-bit state runs on the CUDA engine only
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), o), UnsupportedError);
  o.state = "fp32";
  o.cuda = true;
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), o), UnsupportedError);

  // A checkpoint whose in_proj disagrees with config.json names the tensor.
  const fs::path dir = fs::path(tiny_dir("nemotron_h")).parent_path() / "bad_shape";
  testing::write_tiny_nemotron_h(dir.string(), 11);
  nlohmann::json c;
  std::ifstream(dir / "config.json") >> c;
  c["mamba_num_heads"] = 8;  // in_proj / A_log were written for 4 heads
  c["mamba_head_dim"] = 8;
  std::ofstream(dir / "config.json") << c.dump();
  try {
    Model::load(dir.string(), ModelOptions{});
    FAIL() << "loaded a checkpoint whose tensors disagree with config.json";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("backbone.layers.0.mixer."), std::string::npos) << e.what();
  }
}

TEST(EngineLoad, RingLengthZeroIsTheDispatchersChoice) {
  ModelOptions o;
  o.ring_L = 0;
  o.max_slots = 15;  // Mamba-2 replay is not measured faster below batch 16 (dispatch.h): L = 1
  EXPECT_EQ(Model::load(tiny_dir("nemotron_h"), o)->options().ring_L, 1);
  o.max_slots = 16;
  EXPECT_EQ(Model::load(tiny_dir("nemotron_h"), o)->options().ring_L, 16);
  o.max_slots = 15;  // GDN with small states (the tiny model's) replays from batch 16 too
  EXPECT_EQ(Model::load(tiny_dir("qwen3_next"), o)->options().ring_L, 1);
  o.max_slots = 16;
  EXPECT_EQ(Model::load(tiny_dir("qwen3_next"), o)->options().ring_L, 16);
  // A split mode with a read copy replays from larger batches (Mamba-2 64, GDN 32 with small
  // states).
  o.ssm = SsmMode::kReplay;
  o.state = "fp32/bf16";
  o.max_slots = 31;
  EXPECT_EQ(Model::load(tiny_dir("qwen3_next"), o)->options().ring_L, 1);
  o.max_slots = 32;
  EXPECT_EQ(Model::load(tiny_dir("qwen3_next"), o)->options().ring_L, 16);
  o.max_slots = 63;
  EXPECT_EQ(Model::load(tiny_dir("nemotron_h"), o)->options().ring_L, 1);
  o.max_slots = 64;
  EXPECT_EQ(Model::load(tiny_dir("nemotron_h"), o)->options().ring_L, 16);
  o.max_slots = 256;
  EXPECT_EQ(Model::load(tiny_dir("qwen3_next"), o)->options().ring_L, 16);
  EXPECT_EQ(auto_ring_length(Model::load(tiny_dir("qwen3_next"), o)->config(), 256, "fp32/nvfp4"),
            16);
  EXPECT_THROW(auto_ring_length(Model::load(tiny_dir("qwen3_next"), o)->config(), 8, "nonsense"),
               ConfigError);
}

TEST(EngineLoad, RingLengthFollowsTheGdnStateSize) {
  // A GDN layer's state size reaches the dispatcher: Qwen3.5-122B's 4 MiB per sequence replays
  // from batch 8, Qwen3.5-4B's 2 MiB from 16 (dispatch.h).
  ModelConfig cfg;
  cfg.layers = {BlockKind::kGdn, BlockKind::kAttention};
  cfg.gdn.num_k_heads = 16, cfg.gdn.head_k_dim = 128, cfg.gdn.head_v_dim = 128;
  cfg.gdn.num_v_heads = 64;
  EXPECT_EQ(auto_ring_length(cfg, 7), 1);
  EXPECT_EQ(auto_ring_length(cfg, 8), 16);
  cfg.gdn.num_v_heads = 32;
  EXPECT_EQ(auto_ring_length(cfg, 8), 1);
  EXPECT_EQ(auto_ring_length(cfg, 16), 16);
  cfg.layers.push_back(BlockKind::kMamba2);  // the shortest over the families: Mamba-2 from 16
  cfg.gdn.num_v_heads = 64;
  EXPECT_EQ(auto_ring_length(cfg, 8), 1);
}

/// Rewrites dir/model.safetensors without `drop` and with `nan_in` (if non-empty) poisoned.
void rewrite_checkpoint(const fs::path& dir, const std::string& drop, const std::string& nan_in) {
  std::vector<StWriteTensor> out;
  {
    SafetensorsFile f((dir / "model.safetensors").string());
    for (const auto& [name, info] : f.tensors()) {
      if (name == drop) continue;
      StWriteTensor t{name, "F32", info.shape, f.to_float32(name)};
      if (name == nan_in) t.values[0] = NAN;
      out.push_back(std::move(t));
    }
  }
  write_safetensors((dir / "model.safetensors").string(), out);
}

TEST(EngineLoad, UntiedCheckpointWithoutLmHeadIsRejected) {
  const fs::path dir = fs::path(tiny_dir("nemotron_h")).parent_path() / "no_lm_head";
  testing::write_tiny_nemotron_h(dir.string(), 11);
  rewrite_checkpoint(dir, "lm_head.weight", "");
  try {
    Model::load(dir.string(), ModelOptions{});
    FAIL() << "decoded an untied model with the embedding as its output layer";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos) << e.what();
  }
}

TEST(EngineServe, NonFiniteLogitsStopTheRun) {
  const fs::path dir = fs::path(tiny_dir("nemotron_h")).parent_path() / "nan_D";
  testing::write_tiny_nemotron_h(dir.string(), 11);
  rewrite_checkpoint(dir, "", "backbone.layers.0.mixer.D");
  auto m = Model::load(dir.string(), ModelOptions{});
  Request r;
  r.prompt = {72, 105};
  r.max_new_tokens = 4;
  const auto non_finite = [](const std::function<void()>& run) {
    try {
      run();
    } catch (const Error& e) {
      return std::string(e.what()).find("non-finite logit") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(non_finite([&] { serve(*m, {r}, 1, SamplingParams{}); }));  // step_greedy's -1
  SamplingParams warm;
  warm.temperature = 0.7;
  m->reset(std::vector<int32_t>{0});
  EXPECT_TRUE(non_finite([&] { serve(*m, {r}, 1, warm); }));  // sampled: the logits' check
  for (const double temp : {0.0, 0.7}) {  // the speculative loop: verify_greedy / verify
    ModelOptions so;
    so.spec_T = 2;
    auto sm = Model::load(dir.string(), so);
    auto drafter = make_drafter("ngram", *sm);
    SamplingParams sp;
    sp.temperature = temp;
    EXPECT_TRUE(non_finite([&] { serve_speculative(*sm, {r}, 1, sp, {2, drafter.get()}); }))
        << "temperature " << temp;
  }
  std::vector<int32_t> next(1);
  m->reset(std::vector<int32_t>{0});
  m->step_greedy(std::vector<int32_t>{72}, std::vector<int32_t>{0}, next);
  EXPECT_EQ(next[0], -1);
}

TEST(EngineLoad, Bf16WeightsLoad) {
  const fs::path dir = fs::path(tiny_dir("qwen3_next")).parent_path() / "qwen_bf16";
  testing::write_tiny_qwen3_next(dir.string(), 12, "BF16");
  auto m = Model::load(dir.string(), ModelOptions{});
  std::vector<float> logits(256);
  m->reset(std::vector<int32_t>{0});
  m->step(std::vector<int32_t>{65}, std::vector<int32_t>{0}, logits);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace replayssm::engine
