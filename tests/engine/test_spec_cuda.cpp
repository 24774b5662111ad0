// Speculative verify / accept steps of the CUDA engine (engine/src/cuda/cuda_model.cpp), for
// ReplaySSM verify and the snapshot baseline, on random-weight tiny checkpoints with sizes the
// CUDA kernels run and on the bundled models. GPU tests: they skip, with the reason, where no
// CUDA device is present.
//
// What is checked, and the bounds (the CUDA engine's bf16 GEMMs: test_model_cuda.cpp explains the
// 8e-2 / 2.5e-2 bounds against the fp32 CPU engine and the 2e-2 bound between two CUDA runs whose
// SSM ops differ only in fp32 summation order):
//  * verify logits against the CPU engine's verify on the same rows (random T_b, pad rows,
//    random accepted counts including 0): max |diff| <= 8e-2 max |logit| per step, RMS <= 2.5e-2;
//  * the accepted stream: after every accept, the logits the verify step gave for the kept tokens
//    equal (within 2e-2 max |logit|) those of a CUDA model that decodes only the kept tokens one
//    by one (conv rollback, ring commit, attention positions and the snapshot selection all show
//    here: a wrong one moves the logits by O(max |logit|) at once);
//  * graph-replayed verify steps against eager launches: bit for bit;
//  * bad accept counts and calls out of protocol raise and change nothing (bit for bit against a
//    model that never saw them);
//  * greedy speculative serving on the bundled models gives the tokens of greedy decoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>

#include <unistd.h>

#include "cuda/device.h"
#include "engine/tiny_models.h"
#include "replayssm/engine/drafter.h"
#include "replayssm/engine/errors.h"
#include "replayssm/engine/model.h"
#include "replayssm/engine/sampling.h"
#include "replayssm/engine/speculative.h"
#include "replayssm/engine/tokenizer.h"

namespace replayssm::engine {
namespace {

namespace fs = std::filesystem;
constexpr int kVocab = 256;

#define RSSM_SKIP_WITHOUT_CUDA_DEVICE()                                              \
  do {                                                                               \
    if (::replayssm::cuda::device_count() == 0)                                      \
      GTEST_SKIP() << ::replayssm::cuda::device_summary();                           \
  } while (0)

/// Tiny random-weight checkpoints with CUDA-supported sizes (as test_model_cuda.cpp).
const std::string& tiny_dir(const std::string& name) {
  static const std::string root = [] {
    const fs::path p = fs::temp_directory_path() / ("rssm_spec_cuda_" + std::to_string(::getpid()));
    testing::NemotronDims nd;
    nd.N = 64;
    nd.hd = 48;
    testing::write_tiny_nemotron_h((p / "nemotron_h").string(), 31, "M*M-M", "F32", nd);
    testing::QwenDims qd;
    qd.dk = 64;
    qd.dv = 32;
    qd.hd = 64;
    testing::write_tiny_qwen3_next((p / "qwen3_next").string(), 32, "F32", qd);
    // 3 conv taps (the conv step's and rollback's one-value paths over a verify step's tokens).
    testing::write_tiny_nemotron_h((p / "nemotron_h_odd").string(), 33, "M*M-M", "F32",
                                   testing::odd_widths(nd));
    return p.string();
  }();
  static std::map<std::string, std::string> dirs;
  return dirs.try_emplace(name, root + "/" + name).first->second;
}

struct Opt {
  bool cuda = true, graphs = true;
  SsmMode mode = SsmMode::kReplay;
  int spec_T = 4, L = 16, slots = 4;
};

std::unique_ptr<Model> load(const std::string& arch, const Opt& o) {
  ModelOptions m;
  m.cuda = o.cuda;
  m.cuda_graphs = o.graphs;
  m.ssm = o.mode;
  m.ring_L = o.L;
  m.spec_T = o.spec_T;
  m.max_slots = o.slots;
  m.max_context = 1024;
  return Model::load(tiny_dir(arch), m);
}

double max_abs(const float* v, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(v[i])));
  return m;
}

/// One random verify step: a random subset of the slots in random order, each feeding 1..T
/// tokens, sometimes a pad row; and the counts a later accept keeps (0 now and then).
struct RandomStep {
  std::vector<int32_t> slots, ntok, tokens, accepted;
  int64_t total = 0;
};
RandomStep random_step(std::mt19937& rng, int num_slots, int T) {
  RandomStep s;
  std::vector<int32_t> all(num_slots);
  for (int i = 0; i < num_slots; ++i) all[i] = i;
  std::shuffle(all.begin(), all.end(), rng);
  const int rows = 1 + int(rng() % num_slots);
  for (int b = 0; b < rows; ++b) {
    if (rng() % 6 == 0) {  // a pad row
      s.slots.push_back(-1);
      s.ntok.push_back(0);
      s.accepted.push_back(0);
    }
    const int n = 1 + int(rng() % T);
    s.slots.push_back(all[b]);
    s.ntok.push_back(n);
    for (int t = 0; t < n; ++t) s.tokens.push_back(int32_t(rng() % kVocab));
    s.accepted.push_back(rng() % 10 == 0 ? 0 : 1 + int(rng() % n));
    s.total += n;
  }
  return s;
}

/// Runs the same random verify / accept steps (step i feeds up to T(i) tokens per row) on two
/// models and requires bit-identical logits at every step.
template <class TOfStep>
void expect_identical_steps(Model& a, Model& b, uint32_t seed, int steps, int slots,
                            TOfStep T) {
  std::mt19937 rng(seed);
  for (int step = 0; step < steps; ++step) {
    const RandomStep s = random_step(rng, slots, T(step));
    std::vector<float> x(s.total * kVocab), y(s.total * kVocab);
    a.verify(s.tokens, s.ntok, s.slots, x);
    b.verify(s.tokens, s.ntok, s.slots, y);
    ASSERT_EQ(x, y) << "step " << step;
    a.accept(s.accepted);
    b.accept(s.accepted);
  }
}

struct Case {
  std::string arch;
  SsmMode mode;
};
std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return i.param.arch + (i.param.mode == SsmMode::kReplay ? "_replay" : "_snapshot");
}
// gtest prints the parameter of a listed or skipped test: the name, not the struct's bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << case_name({c, 0}); }

class SpecCuda : public ::testing::TestWithParam<Case> {};

TEST_P(SpecCuda, VerifyMatchesCpuEngine) {
  RSSM_SKIP_WITHOUT_CUDA_DEVICE();
  Opt o;
  o.mode = GetParam().mode;
  o.L = 8;  // flushes often
  auto gpu = load(GetParam().arch, o);
  o.cuda = false;
  auto cpu = load(GetParam().arch, o);
  std::mt19937 rng(7);
  double worst_rel = 0, sum_d2 = 0, sum_a2 = 0;
  for (int step = 0; step < 80; ++step) {
    const RandomStep s = random_step(rng, o.slots, o.spec_T);
    std::vector<float> a(s.total * kVocab), b(s.total * kVocab, NAN);
    cpu->verify(s.tokens, s.ntok, s.slots, a);
    gpu->verify(s.tokens, s.ntok, s.slots, b);
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(b[i])) << "step " << step << " logit " << i;
      const double d = double(a[i]) - double(b[i]);
      worst = std::max(worst, std::fabs(d));
      sum_d2 += d * d;
      sum_a2 += double(a[i]) * a[i];
    }
    const double rel = worst / max_abs(a.data(), a.size());
    worst_rel = std::max(worst_rel, rel);
    EXPECT_LE(rel, 8e-2) << "step " << step;
    cpu->accept(s.accepted);
    gpu->accept(s.accepted);
    for (int32_t slot = 0; slot < o.slots; ++slot)
      ASSERT_EQ(gpu->position(slot), cpu->position(slot)) << "step " << step;
  }
  const double rms_rel = std::sqrt(sum_d2 / sum_a2);
  std::printf("[%s] CUDA vs CPU verify logits: max |diff| / max |logit| = %.2e, RMS = %.2e\n",
              case_name({GetParam(), 0}).c_str(), worst_rel, rms_rel);
  EXPECT_LE(rms_rel, 2.5e-2);
}

// The kept tokens' verify logits against a CUDA model decoding only the kept tokens, one per step
// (spec_T 0: the plain decode path; replay at the same L, or conventional for the snapshot case).
TEST_P(SpecCuda, AcceptedStreamEqualsSequentialDecode) {
  RSSM_SKIP_WITHOUT_CUDA_DEVICE();
  Opt o;
  o.mode = GetParam().mode;
  auto spec = load(GetParam().arch, o);
  o.spec_T = 0;
  auto seq = load(GetParam().arch, o);
  std::mt19937 rng(11);
  double worst_rel = 0;
  int64_t kept = 0, discarded_rows = 0;
  for (int step = 0; step < 250; ++step) {
    const RandomStep s = random_step(rng, o.slots, 4);
    std::vector<float> v(s.total * kVocab), l(kVocab);
    spec->verify(s.tokens, s.ntok, s.slots, v);
    spec->accept(s.accepted);
    int64_t off = 0;
    for (size_t b = 0; b < s.slots.size(); ++b) {
      if (s.slots[b] < 0) continue;
      discarded_rows += s.accepted[b] == 0;
      for (int t = 0; t < s.accepted[b]; ++t) {
        seq->step(std::vector<int32_t>{s.tokens[off + t]}, std::vector<int32_t>{s.slots[b]}, l);
        const float* got = &v[(off + t) * kVocab];
        double worst = 0;
        for (int i = 0; i < kVocab; ++i)
          worst = std::max(worst, std::fabs(double(got[i]) - double(l[i])));
        const double rel = worst / max_abs(l.data(), l.size());
        worst_rel = std::max(worst_rel, rel);
        ASSERT_LE(rel, 2e-2) << "step " << step << " row " << b << " token " << t;
        ++kept;
      }
      off += s.ntok[b];
      ASSERT_EQ(spec->position(s.slots[b]), seq->position(s.slots[b]));
    }
  }
  std::printf("[%s] %lld kept tokens (%lld discarded rows) vs sequential decoding: max |diff| / "
              "max |logit| = %.2e\n",
              case_name({GetParam(), 0}).c_str(), (long long)kept, (long long)discarded_rows,
              worst_rel);
}

// Captured verify steps replay the same kernels with the same arguments: bit for bit.
TEST_P(SpecCuda, GraphStepsEqualEagerSteps) {
  RSSM_SKIP_WITHOUT_CUDA_DEVICE();
  Opt o;
  o.mode = GetParam().mode;
  auto graphs = load(GetParam().arch, o);
  o.graphs = false;
  auto eager = load(GetParam().arch, o);
  // Shapes repeat, so that the verify and accept graphs are captured and replayed.
  expect_identical_steps(*graphs, *eager, 13, 60, o.slots, [](int step) { return step % 2 ? 4 : 2; });
}

// verify_greedy on CUDA (ids from the device) equals the host argmax of verify()'s logits over
// random steps (pad rows, 1..T tokens per row, discards), with graphs.
TEST_P(SpecCuda, VerifyGreedyIsTheArgmaxOfVerify) {
  RSSM_SKIP_WITHOUT_CUDA_DEVICE();
  Opt o;
  o.mode = GetParam().mode;
  auto a = load(GetParam().arch, o);
  auto g = load(GetParam().arch, o);
  std::mt19937 rng(21);
  for (int step = 0; step < 60; ++step) {
    const RandomStep s = random_step(rng, o.slots, o.spec_T);
    std::vector<float> logits(s.total * kVocab);
    std::vector<int32_t> next(s.total);
    a->verify(s.tokens, s.ntok, s.slots, logits);
    g->verify_greedy(s.tokens, s.ntok, s.slots, next);
    for (int64_t i = 0; i < s.total; ++i)
      ASSERT_EQ(next[i], greedy_token({logits.data() + i * kVocab, size_t(kVocab)}))
          << "step " << step << " token row " << i;
    a->accept(s.accepted);
    g->accept(s.accepted);
  }
}

// Bad counts and calls out of protocol raise and change nothing: the model then continues bit for
// bit like one that never saw them.
TEST_P(SpecCuda, BadInputRaisesAndChangesNothing) {
  RSSM_SKIP_WITHOUT_CUDA_DEVICE();
  Opt o;
  o.mode = GetParam().mode;
  o.graphs = false;
  auto m = load(GetParam().arch, o);
  auto twin = load(GetParam().arch, o);
  const std::vector<int32_t> slots{1, -1, 3}, ntok{3, 0, 2}, tokens{5, 6, 7, 8, 9};
  std::vector<float> a(5 * kVocab), b(5 * kVocab);
  EXPECT_THROW(m->accept(std::vector<int32_t>{1, 0, 1}), ProtocolError);
  m->verify(tokens, ntok, slots, a);
  twin->verify(tokens, ntok, slots, b);
  EXPECT_THROW(m->verify(tokens, ntok, slots, a), ProtocolError);
  EXPECT_THROW(m->step(std::vector<int32_t>{1}, std::vector<int32_t>{0}, a), ProtocolError);
  EXPECT_THROW(m->reset(std::vector<int32_t>{0}), ProtocolError);
  EXPECT_THROW(m->skip_to_position(std::vector<int32_t>{0}, 5), ProtocolError);
  EXPECT_THROW(m->time_verify(tokens, ntok, slots, std::vector<std::vector<int32_t>>{{1, 0, 1}}),
               ProtocolError);
  EXPECT_THROW(m->accept(std::vector<int32_t>{4, 0, 1}), SlotError);   // more than fed
  EXPECT_THROW(m->accept(std::vector<int32_t>{-1, 0, 1}), SlotError);  // negative
  EXPECT_THROW(m->accept(std::vector<int32_t>{1, 1, 1}), SlotError);   // pad row keeps one
  EXPECT_THROW(m->accept(std::vector<int32_t>{1, 0}), ShapeError);
  m->accept(std::vector<int32_t>{2, 0, 1});
  twin->accept(std::vector<int32_t>{2, 0, 1});
  EXPECT_THROW(m->verify(std::vector<int32_t>{1, 2}, std::vector<int32_t>{2, 0},
                         std::vector<int32_t>{0, 0}, a),
               SlotError);  // a real row with no tokens
  EXPECT_THROW(m->verify(std::vector<int32_t>{1, 2, 3, 4, 5}, std::vector<int32_t>{5},
                         std::vector<int32_t>{0}, a),
               SlotError);  // more than spec_T
  expect_identical_steps(*m, *twin, 17, 20, o.slots, [](int) { return 4; });
}

INSTANTIATE_TEST_SUITE_P(Tiny, SpecCuda,
                         ::testing::Values(Case{"nemotron_h", SsmMode::kReplay},
                                           Case{"nemotron_h", SsmMode::kConventional},
                                           Case{"qwen3_next", SsmMode::kReplay},
                                           Case{"qwen3_next", SsmMode::kConventional},
                                           Case{"nemotron_h_odd", SsmMode::kReplay}),
                         case_name);

// A verify step's token rows (max_slots x spec_T) are a kernel grid dimension: refused at load.
TEST(SpecCudaLoad, TokenRowsBeyondTheGridLimitAreRefused) {
  RSSM_SKIP_WITHOUT_CUDA_DEVICE();
  ModelOptions m;
  m.cuda = true;
  m.spec_T = 8;
  m.max_slots = 8192;  // 65536 token rows
  m.max_context = 64;
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), m), UnsupportedError);
}

// Greedy speculative serving (T 4; n-gram drafts, and the other bundled model as a draft model on
// the CUDA engine too) on the bundled models against greedy decoding on the same engine: the same
// tokens. The verify path runs other GEMM row counts and SSM kernels
// than the decode path, so a near-tie could flip a token in principle; on these trained models
// the margins are far above the engine's rounding (the README's demo agrees on 300 tokens).
TEST(SpecCudaServe, GreedySpeculativeEqualsGreedyDecoding) {
  RSSM_SKIP_WITHOUT_CUDA_DEVICE();
  const fs::path root = fs::path(RSSM_SOURCE_DIR) / "models";
  const char* texts[] = {"It was the best of times, it was the worst of times, it was the age of",
                         "the sea, the sea, the sea and the ship on the sea",
                         "Call me Ishmael."};
  std::vector<Request> reqs;
  for (const char* t : texts) reqs.push_back({byte_encode(t), 60});
  for (const char* name : {"nemotron-h-tiny", "qwen3-next-tiny"}) {
    ModelOptions o;
    o.cuda = true;
    o.max_slots = 3;
    o.max_context = 512;
    auto base = Model::load((root / name).string(), o);
    const auto want = serve(*base, reqs, 3, SamplingParams{});  // step_greedy: device argmax
    {  // the same tokens through step()'s logits and the host argmax, request by request
      auto logits_path = Model::load((root / name).string(), o);
      for (size_t i = 0; i < reqs.size(); ++i) {
        const std::vector<int32_t> slot{0};
        logits_path->reset(slot);
        std::vector<float> lg(logits_path->config().vocab_size);
        std::vector<int32_t> got;
        int32_t tok = 0;
        for (size_t k = 0; k < reqs[i].prompt.size() + 59; ++k) {
          tok = k < reqs[i].prompt.size() ? reqs[i].prompt[k] : got.back();
          logits_path->step(std::vector<int32_t>{tok}, slot, lg);
          if (k + 1 >= reqs[i].prompt.size()) got.push_back(greedy_token(lg));
        }
        EXPECT_EQ(got, want[i].tokens) << name << " request " << i << ": step_greedy vs logits";
      }
    }
    const std::string other =
        "model:" + (root / (std::string(name) == "nemotron-h-tiny" ? "qwen3-next-tiny"
                                                                   : "nemotron-h-tiny"))
                       .string();
    for (const SsmMode mode : {SsmMode::kReplay, SsmMode::kConventional}) {
      o.ssm = mode;
      o.spec_T = 4;
      auto m = Model::load((root / name).string(), o);
      for (const std::string& spec : {std::string("ngram"), other}) {
        auto drafter = make_drafter(spec, *m);
        SpecStats ss;
        const auto got = serve_speculative(*m, reqs, 3, SamplingParams{}, {4, drafter.get()},
                                           nullptr, &ss);
        for (size_t i = 0; i < reqs.size(); ++i)
          EXPECT_EQ(got[i].tokens, want[i].tokens)
              << name << " " << ssm_mode_name(mode) << " " << spec << " request " << i;
        EXPECT_GT(ss.drafted, 0);
        std::printf("[%s %s %s] greedy speculative on CUDA: mean accepted %.2f (drafts kept "
                    "%.0f%%)\n",
                    name, ssm_mode_name(mode), spec.substr(0, 5).c_str(), ss.mean_accepted(),
                    100 * ss.draft_acceptance());
      }
    }
  }
}

}  // namespace
}  // namespace replayssm::engine
