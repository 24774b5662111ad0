// What `replayssm bench e2e` stands on: the published configs it builds (models.md §1), the
// synthetic checkpoint (Checkpoint::random) and the model's benchmark hooks (skip_to_position,
// time_steps), on the CPU and, where a device is present, on CUDA. time_steps must do the work of
// real decode steps: a model advanced by it continues exactly like one advanced by step().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"
#include "replayssm/engine/errors.h"
#include "replayssm/engine/memory.h"
#include "replayssm/engine/model.h"
#include "replayssm/engine/published.h"

namespace replayssm::engine {
namespace {

const std::string kTiny = std::string(RSSM_SOURCE_DIR) + "/models/nemotron-h-tiny";
const std::string kTinyGdn = std::string(RSSM_SOURCE_DIR) + "/models/qwen3-next-tiny";

int64_t count(const std::vector<BlockKind>& v, BlockKind k) {
  return std::count(v.begin(), v.end(), k);
}

TEST(PublishedConfig, NemotronNano4BHasTheModelCardsLayers) {
  const ModelConfig c = parse_config(published_config("nemotron-3-nano-4b"));
  EXPECT_EQ(c.arch, Arch::kNemotronH);
  EXPECT_EQ(c.num_layers, 42);
  EXPECT_EQ(count(c.layers, BlockKind::kMamba2), 21);
  EXPECT_EQ(count(c.layers, BlockKind::kMlp), 17);
  EXPECT_EQ(count(c.layers, BlockKind::kAttention), 4);
  for (const int i : {12, 17, 24, 32}) EXPECT_EQ(c.layers[i], BlockKind::kAttention) << i;
  EXPECT_EQ(c.hidden_size, 3136);
  EXPECT_EQ(c.mamba.nheads, 96);
  EXPECT_EQ(c.mamba.headdim, 80);
  EXPECT_EQ(c.mamba.d_state, 128);
  EXPECT_EQ(c.mamba.ngroups, 8);
  EXPECT_EQ(c.mamba.d_inner(), 7680);
  EXPECT_EQ(c.mamba.conv_dim(), 9728);
  EXPECT_EQ(c.mamba.norm_group_size, 7680 / 8);
  EXPECT_EQ(c.attn.num_heads, 40);
  EXPECT_EQ(c.attn.num_kv_heads, 8);
  EXPECT_EQ(c.attn.head_dim, 128);
  EXPECT_EQ(c.attn.rotary_dim, 0);
  EXPECT_EQ(c.mlp.intermediate, 12544);
  EXPECT_FALSE(c.mlp.gated);
  EXPECT_EQ(c.vocab_size, 131072);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(PublishedConfig, Qwen35_4BHasTheModelCardsLayers) {
  const ModelConfig c = parse_config(published_config("qwen3.5-4b"));
  EXPECT_EQ(c.arch, Arch::kQwen35);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(count(c.layers, BlockKind::kGdn), 24);
  EXPECT_EQ(count(c.layers, BlockKind::kAttention), 8);
  for (int i = 3; i < 32; i += 4) EXPECT_EQ(c.layers[i], BlockKind::kAttention) << i;
  EXPECT_EQ(count(c.qwen_mlp, BlockKind::kMlp), 32);
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.gdn.num_k_heads, 16);
  EXPECT_EQ(c.gdn.num_v_heads, 32);
  EXPECT_EQ(c.gdn.head_k_dim, 128);
  EXPECT_EQ(c.gdn.head_v_dim, 128);
  EXPECT_EQ(c.gdn.conv_dim(), 8192);
  EXPECT_FALSE(c.gdn.interleaved_proj);
  EXPECT_EQ(c.attn.num_heads, 16);
  EXPECT_EQ(c.attn.num_kv_heads, 4);
  EXPECT_EQ(c.attn.head_dim, 256);
  EXPECT_EQ(c.attn.rotary_dim, 64);
  EXPECT_TRUE(c.attn.output_gate);
  EXPECT_TRUE(c.attn.qk_norm);
  EXPECT_EQ(c.mlp.intermediate, 9216);
  EXPECT_TRUE(c.mlp.gated);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qwen_norm);
}

TEST(PublishedConfig, UnknownNameListsTheKnownOnes) {
  try {
    published_config("gpt-5");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'gpt-5'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nemotron-3-nano-4b, qwen3.5-4b"), std::string::npos)
        << e.what();
  }
}

double mean(const std::vector<float>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double stddev(const std::vector<float>& v) {
  const double m = mean(v);
  double s = 0;
  for (const float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST(RandomCheckpoint, HoldsEveryTensorWithTheAskedShapeReproducibly) {
  const nlohmann::json cfg = published_config("nemotron-3-nano-4b");
  const Checkpoint a = Checkpoint::random(cfg, 7, "nano"), b = Checkpoint::random(cfg, 7, "nano");
  const Checkpoint other_seed = Checkpoint::random(cfg, 8, "nano");
  EXPECT_EQ(a.dir(), "random-weights:nano");
  EXPECT_TRUE(a.has("backbone.layers.0.mixer.in_proj.weight"));
  EXPECT_TRUE(a.names().empty());
  EXPECT_THROW(a.info("anything"), CheckpointError);
  const std::string w = "backbone.layers.0.mixer.in_proj.weight";
  const std::vector<float> x = a.load(w, {300, 3136});
  ASSERT_EQ(x.size(), 300u * 3136u);
  EXPECT_EQ(x, b.load(w, {300, 3136}));
  EXPECT_NE(x, other_seed.load(w, {300, 3136}));
  EXPECT_NE(x, a.load("backbone.layers.1.mixer.in_proj.weight", {300, 3136}));
  // Uniform with std 1/sqrt(fan-in).
  EXPECT_NEAR(mean(x), 0.0, 2e-4);
  EXPECT_NEAR(stddev(x), 1.0 / std::sqrt(3136.0), 2e-4);
  const std::vector<float> emb = a.load("backbone.embeddings.weight", {50, 3136});
  EXPECT_NEAR(stddev(emb), 1.0 / std::sqrt(3136.0), 5e-4);

  for (const float v : a.load("backbone.layers.0.mixer.A_log", {96})) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LE(v, std::log(16.0f));
  }
  for (const float v : a.load("backbone.layers.0.mixer.dt_bias", {96})) {
    const double dt = std::log1p(std::exp(double(v)));  // softplus
    EXPECT_GE(dt, 1e-3 * (1 - 1e-6));
    EXPECT_LE(dt, 1e-1 * (1 + 1e-6));
  }
  for (const float v : a.load("backbone.layers.0.mixer.D", {96})) EXPECT_EQ(v, 1.0f);
  for (const float v : a.load("backbone.layers.0.mixer.conv1d.bias", {9728})) EXPECT_EQ(v, 0.0f);
  const std::vector<float> conv = a.load("backbone.layers.0.mixer.conv1d.weight", {9728, 1, 4});
  EXPECT_NEAR(stddev(conv), 0.5, 0.01);  // fan-in = the 4 taps
  for (const float v : a.load("backbone.layers.0.norm.weight", {3136})) {
    EXPECT_GE(v, 0.95f);
    EXPECT_LE(v, 1.05f);
  }
}

TEST(RandomCheckpoint, QwenNormsScaleByOnePlusW) {
  const Checkpoint q = Checkpoint::random(published_config("qwen3.5-4b"), 1, "q");
  for (const float v : q.load("model.layers.0.input_layernorm.weight", {2560}))
    EXPECT_LE(std::abs(v), 0.05f);
  for (const float v : q.load("model.layers.0.self_attn.q_norm.weight", {256}))
    EXPECT_LE(std::abs(v), 0.05f);
  // The GDN gated norm multiplies by w (Qwen3NextRMSNormGated).
  for (const float v : q.load("model.layers.0.linear_attn.norm.weight", {128})) EXPECT_GE(v, 0.95f);
}

/// A random checkpoint probes like the real one: the MoE fixtures store experts one by one, so a
/// random checkpoint of their configs must not claim the fused Qwen3.5-MoE tensors (a fused
/// load would build SwiGLU experts of the wrong width). Loading and stepping every MoE fixture's
/// config with random weights must give the real checkpoint's layout.
TEST(RandomCheckpoint, MoeFixturesLoadWithTheirOwnExpertLayout) {
  for (const char* f : {"nemotron-h-latent-moe-random", "nemotron-h-moe-random",
                        "qwen3-next-moe-random", "qwen3.5-moe-random"}) {
    SCOPED_TRACE(f);
    const Checkpoint real = Checkpoint::open(std::string(RSSM_SOURCE_DIR) + "/tests/fixtures/" + f);
    const Checkpoint rnd = Checkpoint::random(real.config(), 1, f);
    for (const std::string& n : real.names()) EXPECT_TRUE(rnd.has(n)) << n;
    const ModelConfig cfg = parse_config(real.config());
    const std::string root = cfg.weight_prefix;
    for (int64_t i = 0; i < cfg.num_layers; ++i)
      for (const char* mid : {"mixer.", "mlp."}) {
        const std::string n = root + "layers." + std::to_string(i) + "." + mid + "experts.gate_up_proj";
        EXPECT_EQ(rnd.has(n), real.has(n)) << n;
      }
    ModelOptions o;
    o.max_slots = 2;
    o.max_context = 8;
    const auto m = Model::load(rnd, o);
    std::vector<float> logits(2 * static_cast<size_t>(cfg.vocab_size));
    m->step(std::vector<int32_t>{1, 2}, std::vector<int32_t>{0, 1}, logits);
    for (const float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

/// A tiny model of the bundled one's config with random weights (spec_T > 0: verify steps).
std::unique_ptr<Model> tiny(const std::string& dir, bool cuda, SsmMode ssm, int L, int spec_T = 0) {
  ModelOptions o;
  o.cuda = cuda;
  o.ssm = ssm;
  o.ring_L = L;
  o.spec_T = spec_T;
  o.max_slots = 6;
  o.max_context = 64;
  return Model::load(Checkpoint::random(Checkpoint::open(dir).config(), 3, "tiny"), o);
}

/// time_steps(n) and n step() calls leave two models in the same state: their next step's logits
/// agree bit for bit (same kernels, same arguments; graph and eager launches compute the same).
void time_steps_continue_like_step(const std::string& dir, bool cuda, SsmMode ssm, int L) {
  auto a = tiny(dir, cuda, ssm, L), b = tiny(dir, cuda, ssm, L);
  const std::vector<int32_t> slots{4, 1, 3}, tokens{17, 200, 5};
  a->skip_to_position(slots, 9);
  b->skip_to_position(slots, 9);
  EXPECT_EQ(a->position(4), 9);
  const int steps = 7;  // crosses a flush at L = 4
  const StepTiming t = a->time_steps(tokens, slots, steps, true);
  ASSERT_EQ(t.step_ms.size(), size_t(steps));
  for (const double ms : t.step_ms) EXPECT_GT(ms, 0.0);
  const int advanced = steps + 1 + t.warmup_steps;
  std::vector<float> lb(3 * 256);
  for (int i = 0; i < advanced; ++i) b->step(tokens, slots, lb);
  for (const int32_t s : slots) EXPECT_EQ(a->position(s), b->position(s)) << s;
  EXPECT_EQ(a->position(0), 0);
  std::vector<float> la(3 * 256);
  const std::vector<int32_t> next{9, 8, 7};
  a->step(next, slots, la);
  b->step(next, slots, lb);
  EXPECT_EQ(la, lb);
  // The profile names the parts and sums to its total.
  double sum = 0;
  for (const auto& [k, ms] : t.kind_ms) {
    EXPECT_GE(ms, 0.0) << k;
    sum += ms;
  }
  EXPECT_TRUE(t.kind_ms.count("embed+head"));
  EXPECT_TRUE(t.kind_ms.count("attention"));
  EXPECT_TRUE(t.kind_ms.count("mamba2") || t.kind_ms.count("gdn"));
  EXPECT_NEAR(sum, t.profiled_ms, 1e-6 + 1e-3 * t.profiled_ms);
}

/// time_verify over a list of accepted counts and as many verify() + accept() calls (plus the
/// warm-up step time_verify reports) leave two models in the same state, bit for bit; a bad count
/// anywhere in the list raises before anything runs.
void time_verify_continues_like_verify(const std::string& dir, bool cuda, SsmMode ssm) {
  auto a = tiny(dir, cuda, ssm, 8, 3), b = tiny(dir, cuda, ssm, 8, 3);
  const std::vector<int32_t> slots{4, -1, 1}, ntok{3, 0, 2}, tokens{17, 200, 5, 9, 60};
  const std::vector<std::vector<int32_t>> accepted{{3, 0, 1}, {1, 0, 2}, {0, 0, 2}, {2, 0, 1},
                                                   {3, 0, 2}, {1, 0, 0}, {2, 0, 2}};
  std::vector<std::vector<int32_t>> bad = accepted;
  bad[4][2] = 3;  // more than row 2 feeds
  EXPECT_THROW(a->time_verify(tokens, ntok, slots, bad), SlotError);
  EXPECT_EQ(a->position(4), 0);
  const StepTiming t = a->time_verify(tokens, ntok, slots, accepted, true);
  ASSERT_EQ(t.step_ms.size(), accepted.size());
  for (const double ms : t.step_ms) EXPECT_GT(ms, 0.0);
  std::vector<std::vector<int32_t>> ran;
  if (t.warmup_steps) ran.push_back(accepted[0]);
  ran.insert(ran.end(), accepted.begin(), accepted.end());
  if (!t.kind_ms.empty()) ran.push_back(accepted.back());  // the profiled step (CUDA)
  std::vector<float> lb(tokens.size() * 256);
  for (const auto& n : ran) {
    b->verify(tokens, ntok, slots, lb);
    b->accept(n);
  }
  for (const int32_t s : {4, 1}) EXPECT_EQ(a->position(s), b->position(s)) << s;
  std::vector<float> la(tokens.size() * 256);
  a->verify(tokens, ntok, slots, la);
  b->verify(tokens, ntok, slots, lb);
  EXPECT_EQ(la, lb);
  if (cuda) {
    EXPECT_TRUE(t.kind_ms.count("accept"));
    double sum = 0;
    for (const auto& [k, ms] : t.kind_ms) sum += ms;
    EXPECT_NEAR(sum, t.profiled_ms, 1e-6 + 1e-3 * t.profiled_ms);
  }
}

TEST(BenchHooks, TimeVerifyContinuesLikeVerifyCpu) {
  time_verify_continues_like_verify(kTiny, false, SsmMode::kReplay);
  time_verify_continues_like_verify(kTiny, false, SsmMode::kConventional);
  time_verify_continues_like_verify(kTinyGdn, false, SsmMode::kReplay);
}

TEST(BenchHooks, TimeVerifyContinuesLikeVerifyCuda) {
  if (::replayssm::cuda::device_count() == 0) GTEST_SKIP() << ::replayssm::cuda::device_summary();
  time_verify_continues_like_verify(kTiny, true, SsmMode::kReplay);
  time_verify_continues_like_verify(kTiny, true, SsmMode::kConventional);
  time_verify_continues_like_verify(kTinyGdn, true, SsmMode::kReplay);
}

TEST(BenchHooks, TimeStepsContinueLikeStepCpu) {
  time_steps_continue_like_step(kTiny, false, SsmMode::kReplay, 4);
  time_steps_continue_like_step(kTiny, false, SsmMode::kConventional, 1);
  time_steps_continue_like_step(kTinyGdn, false, SsmMode::kReplay, 4);
}

TEST(BenchHooks, TimeStepsContinueLikeStepCuda) {
  if (::replayssm::cuda::device_count() == 0) GTEST_SKIP() << ::replayssm::cuda::device_summary();
  time_steps_continue_like_step(kTiny, true, SsmMode::kReplay, 4);
  time_steps_continue_like_step(kTiny, true, SsmMode::kConventional, 1);
  time_steps_continue_like_step(kTinyGdn, true, SsmMode::kReplay, 4);
  auto m = tiny(kTiny, true, SsmMode::kReplay, 4);
  EXPECT_GT(m->device_bytes(), 0);
}

TEST(BenchHooks, BadArgumentsRaiseAndChangeNothing) {
  auto m = tiny(kTiny, false, SsmMode::kReplay, 4);
  auto twin = tiny(kTiny, false, SsmMode::kReplay, 4);  // takes only the valid calls
  const std::vector<int32_t> slots{0, 2}, tokens{1, 2};
  m->skip_to_position(slots, 40);
  twin->skip_to_position(slots, 40);
  std::vector<float> la(2 * 256), lb(2 * 256);
  for (int i = 0; i < 10; ++i) {  // some SSM state and ring history to disturb
    m->step(tokens, slots, la);
    twin->step(tokens, slots, lb);
  }
  m->skip_to_position(slots, 50);
  twin->skip_to_position(slots, 50);
  EXPECT_THROW(m->skip_to_position(slots, 64), SlotError);  // max_context 64
  EXPECT_THROW(m->skip_to_position(slots, -1), SlotError);
  EXPECT_THROW(m->skip_to_position(std::vector<int32_t>{1, 1}, 3), SlotError);
  EXPECT_THROW(m->skip_to_position(std::vector<int32_t>{6}, 3), SlotError);
  EXPECT_EQ(m->position(0), 50);
  EXPECT_EQ(m->position(1), 0);
  EXPECT_THROW(m->time_steps(tokens, slots, 0, false), ConfigError);
  EXPECT_THROW(m->time_steps(tokens, slots, 14, true), SlotError);  // 50 + 14 + 1 > 64
  EXPECT_THROW(m->time_steps(std::vector<int32_t>{1, 256}, slots, 1, false), ConfigError);
  EXPECT_THROW(m->time_steps(std::vector<int32_t>{1}, slots, 1, false), ShapeError);
  EXPECT_EQ(m->position(0), 50);
  EXPECT_EQ(m->position(2), 50);
  // The rejected calls left states, rings and caches as the twin's: the next steps agree.
  m->step(tokens, slots, la);
  twin->step(tokens, slots, lb);
  EXPECT_EQ(la, lb);
  const StepTiming t = m->time_steps(tokens, slots, 12, true);  // exactly fits
  EXPECT_EQ(t.step_ms.size(), 12u);
  EXPECT_EQ(m->position(0), 64);
}

TEST(BenchHooks, LoadFromAnOpenCheckpointEqualsLoadFromItsDirectory) {
  ModelOptions o;
  o.max_slots = 2;
  o.max_context = 32;
  auto a = Model::load(kTiny, o), b = Model::load(Checkpoint::open(kTiny), o);
  const std::vector<int32_t> slots{0, 1}, tokens{65, 66};
  std::vector<float> la(2 * 256), lb(2 * 256);
  a->step(tokens, slots, la);
  b->step(tokens, slots, lb);
  EXPECT_EQ(la, lb);
}

TEST(BenchHooks, SnapshotBaselineTakesAnyRingLength) {
  // The snapshot baseline keeps no ring; the speculative cursors it builds still need L >= 2T.
  ModelOptions o;
  o.ssm = SsmMode::kConventional;
  o.spec_T = 4;
  o.ring_L = 1;
  o.max_slots = 2;
  o.max_context = 16;
  const auto m = Model::load(Checkpoint::random(Checkpoint::open(kTiny).config(), 1, "t"), o);
  EXPECT_EQ(m->options().ring_L, 8);
}

/// Elements of every tensor of a checkpoint directory (its safetensors header).
int64_t stored_elements(const std::string& dir) {
  const Checkpoint ck = Checkpoint::open(dir);
  int64_t n = 0;
  for (const std::string& name : ck.names()) {
    int64_t e = 1;
    for (const int64_t d : ck.info(name).shape) e *= d;
    n += e;
  }
  return n;
}

TEST(ParameterCount, EqualsEveryFixturesStoredTensors) {
  const std::string root = RSSM_SOURCE_DIR;
  for (const std::string& dir :
       {root + "/models/nemotron-h-tiny", root + "/models/qwen3-next-tiny",
        root + "/tests/fixtures/mamba2-tiny", root + "/tests/fixtures/nemotron-h-latent-moe-random",
        root + "/tests/fixtures/nemotron-h-moe-random", root + "/tests/fixtures/qwen3-next-moe-random",
        root + "/tests/fixtures/qwen3.5-random", root + "/tests/fixtures/qwen3.5-moe-random"}) {
    SCOPED_TRACE(dir);
    EXPECT_EQ(parameter_count(parse_config(Checkpoint::open(dir).config())), stored_elements(dir));
  }
  // The published sizes: Nemotron-3-Nano-4B ~4.0e9, Qwen3.5-4B's text model ~4.2e9.
  const double nano = double(parameter_count(parse_config(published_config("nemotron-3-nano-4b"))));
  const double qwen = double(parameter_count(parse_config(published_config("qwen3.5-4b"))));
  std::printf("  parameters: nemotron-3-nano-4b %.3e, qwen3.5-4b %.3e\n", nano, qwen);
  EXPECT_GT(nano, 3.5e9);
  EXPECT_LT(nano, 4.5e9);
  EXPECT_GT(qwen, 3.5e9);
  EXPECT_LT(qwen, 4.7e9);
}

TEST(SequenceBytes, MatchModelsMdFigures) {
  const ModelConfig nano = parse_config(published_config("nemotron-3-nano-4b"));
  ModelOptions o;
  o.max_slots = 4;
  o.max_context = 1024;
  o.ssm = SsmMode::kConventional;
  o.ring_L = 1;
  SequenceBytes s = sequence_bytes(nano, o);
  EXPECT_EQ(s.ssm_state, 21 * 3932160);          // 3.75 MiB per layer (models.md §1.1)
  EXPECT_EQ(s.kv_cache, int64_t{16384} * 1024);  // 16 KiB per token
  EXPECT_EQ(s.conv, 21 * 9728 * 4 * 4);
  EXPECT_EQ(s.ssm_ring, 0);
  EXPECT_EQ(s.snapshots, 0);
  o.ssm = SsmMode::kReplay;
  o.ring_L = 16;
  s = sequence_bytes(nano, o);
  EXPECT_EQ(s.ssm_ring, int64_t{21} * 4 * 16 * (96 * 80 + 96 + 8 * 128));
  o.state = "fp32/bf16";  // + a 16-bit read copy
  EXPECT_EQ(sequence_bytes(nano, o).ssm_state, 21 * 3932160 * 3 / 2);
  o.state = "fp32";
  o.ssm = SsmMode::kConventional;
  o.spec_T = 4;  // the snapshot baseline: one state per token of a verify step
  s = sequence_bytes(nano, o);
  EXPECT_EQ(s.snapshots, int64_t{4} * 21 * 3932160);
  EXPECT_EQ(s.conv, 21 * 9728 * 4 * 4 + 21 * 4 * (9728 * 4 + 4 * 9728));  // + conv rollback
  EXPECT_EQ(s.total(), s.ssm_state + s.conv + s.kv_cache + s.snapshots);

  const ModelConfig qwen = parse_config(published_config("qwen3.5-4b"));
  ModelOptions q;
  q.max_context = 1000;
  q.ring_L = 16;
  s = sequence_bytes(qwen, q);
  EXPECT_EQ(s.ssm_state, int64_t{24} * 2 * 1024 * 1024);  // 2 MiB per layer (models.md §1.4)
  EXPECT_EQ(s.kv_cache, int64_t{32768} * 1000);            // 32 KiB per token
  EXPECT_EQ(s.ssm_ring, int64_t{24} * 4 * 16 * (32 * 128 + 16 * 128 + 32));
  q.ring_L = 0;  // resolved as load() does
  EXPECT_EQ(sequence_bytes(qwen, q).ssm_ring % (int64_t{24} * 4 * (32 * 128 + 16 * 128 + 32)), 0);
  q.ring_L = 99;
  EXPECT_THROW(sequence_bytes(qwen, q), ConfigError);
}

}  // namespace
}  // namespace replayssm::engine
