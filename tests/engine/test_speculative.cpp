// Speculative decoding in the engine (issue 9 item 2): Model::verify + accept equal sequential
// steps for any accepted counts (ReplaySSM verify and the snapshot baseline, pad rows, discarded
// rows, ring flushes); greedy speculative serving is token-identical to greedy serving on the
// bundled models and an MoE fixture with both drafters; rejection sampling keeps the target
// distribution; bad values raise typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <ostream>
#include <random>

#include "engine/tiny_models.h"
#include "replayssm/engine/acceptance.h"
#include "replayssm/engine/drafter.h"
#include "replayssm/engine/errors.h"
#include "replayssm/engine/model.h"
#include "replayssm/engine/speculative.h"
#include "replayssm/engine/tokenizer.h"

namespace replayssm::engine {
namespace {

namespace fs = std::filesystem;

const std::string kRoot = RSSM_SOURCE_DIR;
const std::string kNemotron = kRoot + "/models/nemotron-h-tiny";
const std::string kQwen = kRoot + "/models/qwen3-next-tiny";
const std::string kDraft = kRoot + "/models/nemotron-h-draft";  // the small draft model
const std::string kMoe = kRoot + "/tests/fixtures/nemotron-h-moe-random";

/// Random-weight tiny checkpoints (tiny_models.h), written once per process.
std::string tiny_dir(const std::string& arch) {
  static const fs::path root = [] {
    const fs::path p = fs::temp_directory_path() / ("rssm_spec_" + std::to_string(::getpid()));
    testing::write_tiny_nemotron_h((p / "nemotron_h").string(), 21);
    testing::write_tiny_qwen3_next((p / "qwen3_next").string(), 22);
    testing::NemotronDims small;
    small.V = 128;
    testing::write_tiny_nemotron_h((p / "vocab128").string(), 23, "M*M-M", "F32", small);
    return p;
  }();
  return (root / arch).string();
}

std::unique_ptr<Model> load(const std::string& dir, SsmMode mode, int spec_T, int L = 16,
                            int slots = 4) {
  ModelOptions o;
  o.ssm = mode;
  o.ring_L = L;
  o.spec_T = spec_T;
  o.max_slots = slots;
  o.max_context = 512;
  return Model::load(dir, o);
}

// ---- Model::verify / accept against sequential steps ---------------------------------------

struct VerifyCase {
  std::string arch;
  SsmMode mode;
};

class VerifyMatchesSteps : public ::testing::TestWithParam<VerifyCase> {};

// Per step every row feeds a random 1..T tokens (or is a pad row, or is discarded with accept 0)
// and keeps a random prefix; the reference model steps the kept tokens one at a time. Each kept
// position's logits must match the reference (fp32: summation order only, far below the O(1)
// change a wrong record, cursor or conv window makes). L = 8 with T = 4 flushes every few steps.
TEST_P(VerifyMatchesSteps, AnyAcceptedCounts) {
  const VerifyCase c = GetParam();
  const int T = 4, V = 256;
  auto spec = load(tiny_dir(c.arch), c.mode, T, 8);
  auto ref = load(tiny_dir(c.arch), SsmMode::kConventional, 0);
  const std::vector<int32_t> all{0, 1, 2, 3};
  spec->reset(all);
  ref->reset(all);
  std::mt19937 rng(7);
  double worst = 0, scale = 0;
  int64_t kept_total = 0, discarded = 0;
  for (int step = 0; step < 120; ++step) {
    std::vector<int32_t> slots{3, -1, 0, 2}, ntok, tokens;
    if (step % 5 == 0) std::swap(slots[0], slots[2]);
    for (int32_t s : slots) {
      const int n = s < 0 ? 0 : 1 + int(rng() % T);
      ntok.push_back(n);
      for (int j = 0; j < n; ++j) tokens.push_back(int32_t(rng() % V));
    }
    std::vector<float> logits(tokens.size() * V);
    spec->verify(tokens, ntok, slots, logits);
    std::vector<int32_t> acc;
    for (size_t b = 0; b < slots.size(); ++b) {
      int n = slots[b] < 0 ? 0 : 1 + int(rng() % ntok[b]);
      if (slots[b] >= 0 && rng() % 11 == 0) n = 0, ++discarded;  // discard the row's step
      acc.push_back(n);
    }
    spec->accept(acc);
    size_t off = 0;
    std::vector<float> one(V);
    for (size_t b = 0; b < slots.size(); ++b) {
      for (int j = 0; j < acc[b]; ++j) {
        ref->step(std::vector<int32_t>{tokens[off + j]}, std::vector<int32_t>{slots[b]}, one);
        for (int v = 0; v < V; ++v) {
          const float x = logits[(off + j) * V + v];
          ASSERT_TRUE(std::isfinite(x));
          worst = std::max(worst, double(std::fabs(x - one[v])));
          scale = std::max(scale, double(std::fabs(one[v])));
        }
      }
      off += ntok[b];
      kept_total += acc[b];
      if (slots[b] >= 0) {
        ASSERT_EQ(spec->position(slots[b]), ref->position(slots[b])) << "step " << step;
      }
    }
  }
  EXPECT_GT(kept_total, 400);
  EXPECT_GT(discarded, 5);
  EXPECT_LT(worst, 1e-4 * scale) << c.arch << " " << ssm_mode_name(c.mode);
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, VerifyMatchesSteps,
    ::testing::Values(VerifyCase{"nemotron_h", SsmMode::kReplay},
                      VerifyCase{"nemotron_h", SsmMode::kConventional},
                      VerifyCase{"qwen3_next", SsmMode::kReplay},
                      VerifyCase{"qwen3_next", SsmMode::kConventional}),
    [](const auto& info) {
      return info.param.arch + (info.param.mode == SsmMode::kReplay ? "_replay" : "_snapshot");
    });

TEST(SpecModel, OutOfOrderCallsAndBadCountsAreTypedErrors) {
  auto m = load(tiny_dir("nemotron_h"), SsmMode::kReplay, 4);
  m->reset(std::vector<int32_t>{0, 1});
  std::vector<float> logits(3 * 256), l5(5 * 256), l1(256);
  EXPECT_THROW(m->accept(std::vector<int32_t>{1}), ProtocolError);
  // 5 tokens > spec_T 4; a pad row feeding tokens; a repeated slot.
  EXPECT_THROW(m->verify(std::vector<int32_t>(5, 1), std::vector<int32_t>{5}, std::vector<int32_t>{0}, l5),
               SlotError);
  EXPECT_THROW(m->verify(std::vector<int32_t>{1}, std::vector<int32_t>{1}, std::vector<int32_t>{-1}, l1),
               SlotError);
  m->verify(std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{2, 1}, std::vector<int32_t>{0, 1},
            logits);
  EXPECT_THROW(m->step(std::vector<int32_t>{1}, std::vector<int32_t>{0}, l1),
               ProtocolError);
  EXPECT_THROW(m->accept(std::vector<int32_t>{3, 1}), SlotError);   // row 0 fed 2
  EXPECT_THROW(m->accept(std::vector<int32_t>{1, -1}), SlotError);
  EXPECT_THROW(m->accept(std::vector<int32_t>{1}), ShapeError);
  m->accept(std::vector<int32_t>{2, 1});
  EXPECT_EQ(m->position(0), 2);
  EXPECT_EQ(m->position(1), 1);

  ModelOptions o;
  o.spec_T = 9;
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), o), ConfigError);
  o.spec_T = 8;
  o.ring_L = 8;  // L < 2T
  EXPECT_THROW(Model::load(tiny_dir("nemotron_h"), o), ConfigError);
  auto plain = load(tiny_dir("nemotron_h"), SsmMode::kReplay, 0);
  EXPECT_THROW(plain->verify(std::vector<int32_t>{1}, std::vector<int32_t>{1},
                             std::vector<int32_t>{0}, l1),
               UnsupportedError);
}

TEST(SpecModel, DrafterChoicesAreChecked) {
  auto m = load(tiny_dir("nemotron_h"), SsmMode::kReplay, 4);
  EXPECT_THROW(make_drafter("eagle", *m), ConfigError);
  EXPECT_THROW(make_drafter("model:", *m), ConfigError);
  try {
    make_drafter("model:" + tiny_dir("vocab128"), *m);
    ADD_FAILURE() << "a 128-token draft model for a 256-token target was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("vocab mismatch"), std::string::npos) << e.what();
  }
  EXPECT_EQ(make_drafter("ngram", *m)->name(), "ngram");
}

// ---- Serving: greedy speculative == greedy ------------------------------------------------

std::vector<Request> prompts(int n_new) {
  const char* texts[] = {
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was",
      "Call me Ishmael.",
      "the sea, the sea, the sea and the ship on the sea",
  };
  std::vector<Request> r;
  for (const char* t : texts) r.push_back({byte_encode(t), n_new});
  return r;
}

struct ServeCase {
  std::string model, drafter;  // drafter: "ngram" or a model directory
};
// Test names show the case, not its bytes.
void PrintTo(const ServeCase& c, std::ostream* os) { *os << c.model << " + " << c.drafter; }

class GreedySpeculative : public ::testing::TestWithParam<ServeCase> {};

TEST_P(GreedySpeculative, TokenIdenticalToGreedy) {
  const ServeCase c = GetParam();
  const auto reqs = prompts(40);
  auto base = load(c.model, SsmMode::kReplay, 0, 16, 2);
  const auto want = serve(*base, reqs, 2, SamplingParams{});
  for (SsmMode mode : {SsmMode::kReplay, SsmMode::kConventional}) {
    for (int T : {2, 4, 8}) {
      auto m = load(c.model, mode, T, 16, 2);
      auto drafter = make_drafter(c.drafter == "ngram" ? "ngram" : "model:" + c.drafter, *m);
      SpecStats ss;
      ServeStats st;
      const auto got =
          serve_speculative(*m, reqs, 2, SamplingParams{}, {T, drafter.get()}, &st, &ss);
      const std::string what = c.model + " drafter " + c.drafter + " T " + std::to_string(T) +
                               (mode == SsmMode::kReplay ? " replay" : " snapshot");
      for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(got[i].tokens, want[i].tokens) << what << " request " << i;
      EXPECT_EQ(st.generated_tokens, 3 * 40) << what;
      int64_t rows = 0;
      for (int n = 0; n <= 8; ++n) {
        if (n < 1 || n > T) {
          EXPECT_EQ(ss.accepted_hist[n], 0) << what << ": a step committed " << n << " tokens";
        }
        rows += ss.accepted_hist[n];
      }
      EXPECT_EQ(rows, ss.row_steps) << what;
      EXPECT_GT(ss.drafted, 0) << what;
      EXPECT_GE(ss.mean_accepted(), 1.0) << what;
      std::printf("  %-40s T %d %-8s mean accepted %.2f (drafts kept %.0f%%)\n",
                  c.drafter.substr(c.drafter.find_last_of('/') + 1).c_str(), T,
                  mode == SsmMode::kReplay ? "replay" : "snapshot", ss.mean_accepted(),
                  100 * ss.draft_acceptance());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GreedySpeculative,
                         ::testing::Values(ServeCase{kNemotron, "ngram"},
                                           ServeCase{kNemotron, kQwen},
                                           ServeCase{kNemotron, kDraft},
                                           ServeCase{kQwen, kDraft},
                                           ServeCase{kQwen, "ngram"},
                                           ServeCase{kQwen, kNemotron},
                                           ServeCase{kMoe, "ngram"},
                                           ServeCase{kMoe, kMoe}),
                         [](const auto& info) {
                           const auto tail = [](const std::string& p) {
                             std::string s = p.substr(p.find_last_of('/') + 1);
                             for (char& ch : s) if (ch == '-') ch = '_';
                             return s;
                           };
                           return tail(info.param.model) + "_" + tail(info.param.drafter);
                         });

// A model drafting for itself proposes exactly the target's greedy tokens: every draft must be
// kept (a verify or drafter fault shows up as rejections here even though the output would
// still be right).
TEST(GreedySpeculativeSelf, SelfDraftingKeepsEveryDraft) {
  const auto reqs = prompts(33);
  auto m = load(kNemotron, SsmMode::kReplay, 4, 16, 3);
  auto drafter = make_drafter("model:" + kNemotron, *m);
  SpecStats ss;
  serve_speculative(*m, reqs, 3, SamplingParams{}, {4, drafter.get()}, nullptr, &ss);
  EXPECT_GE(ss.draft_acceptance(), 0.97) << "kept " << ss.accepted_drafts << " of " << ss.drafted;
  EXPECT_GT(ss.mean_accepted(), 3.0);
}

// Continuous batching: more requests than rows, so slots are reused by the drafter and target.
TEST(GreedySpeculativeSelf, SlotReuseAndBatchOne) {
  auto reqs = prompts(17);
  reqs.push_back({byte_encode("a"), 9});
  auto base = load(kQwen, SsmMode::kReplay, 0, 16, 1);
  const auto want = serve(*base, reqs, 1, SamplingParams{});
  auto m = load(kQwen, SsmMode::kReplay, 3, 16, 2);
  auto drafter = make_drafter("model:" + kNemotron, *m);
  for (int batch : {1, 2}) {
    const auto got = serve_speculative(*m, reqs, batch, SamplingParams{}, {3, drafter.get()});
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "batch " << batch << " request " << i;
  }
}

// ---- Rejection sampling --------------------------------------------------------------------

std::vector<float> random_logits(int rows, int V, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> l(rows * V);
  for (auto& x : l) x = d(g);
  return l;
}

int32_t draw_from(const std::vector<double>& p, std::mt19937_64& g) {
  std::discrete_distribution<int32_t> d(p.begin(), p.end());
  return d(g);
}

// With q = p (a drafter drawing from the target's own distribution) p/q = 1: every draft kept.
TEST(RejectionSampling, DrafterWithTheTargetDistributionIsAlwaysAccepted) {
  const int V = 6, d = 3;
  const SamplingParams p{0.8, 0, 1.0, 0};
  const auto logits = random_logits(d + 1, V, 3);
  std::vector<std::vector<double>> q;
  for (int i = 0; i < d; ++i) q.push_back(token_probs({logits.data() + i * V, size_t(V)}, p));
  std::mt19937_64 rng(1), g(2);
  int64_t kept = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> drafts;
    for (int i = 0; i < d; ++i) drafts.push_back(draw_from(q[i], g));
    kept += accept_drafts(logits, V, drafts, q, p, rng).accepted;
  }
  EXPECT_EQ(kept, 2000 * d);
}

/// Pearson chi-square of counts against probabilities.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double x2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * double(n);
    if (e > 0) x2 += (counts[i] - e) * (counts[i] - e) / e;
    else EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
  }
  return x2;
}

// The first emitted token (the draft if kept, else the residual draw) must follow p, for a
// deterministic drafter (q one-hot) and for a drafter sampling from an unrelated q. V = 5, 4
// degrees of freedom: chi-square above 18.47 has probability 0.001 under the right distribution;
// a sampler that skips the residual correction lands near chi-square ~ 1000 here.
TEST(RejectionSampling, EmittedTokensFollowTheTargetDistribution) {
  const int V = 5, N = 40000;
  const SamplingParams p{1.0, 0, 1.0, 0};
  const auto logits = random_logits(2, V, 11);
  const auto target = token_probs({logits.data(), size_t(V)}, p);
  std::vector<double> q{0.05, 0.5, 0.1, 0.3, 0.05};
  for (bool one_hot : {true, false}) {
    std::mt19937_64 rng(5), g(6);
    std::vector<int64_t> counts(V, 0);
    int64_t kept = 0;
    for (int trial = 0; trial < N; ++trial) {
      const int32_t x = one_hot ? 1 : draw_from(q, g);
      const std::vector<int32_t> drafts{x};
      const Verdict v = one_hot ? accept_drafts(logits, V, drafts, {}, p, rng)
                                : accept_drafts(logits, V, drafts,
                                                std::vector<std::vector<double>>{q}, p, rng);
      ++counts[v.accepted ? x : v.next];
      kept += v.accepted;
    }
    EXPECT_LT(chi_square(counts, target), 18.47) << (one_hot ? "one-hot q" : "sampled q");
    if (one_hot) {  // P(keep the draft) = p(x)
      EXPECT_NEAR(double(kept) / N, target[1], 4 * std::sqrt(target[1] / N));
    }
  }
}

// Greedy acceptance stops at the first draft that differs from the argmax and emits the argmax.
TEST(RejectionSampling, GreedyKeepsTheArgmaxPrefix) {
  const int V = 4;
  std::vector<float> logits{0, 3, 1, 2,   5, 0, 0, 0,   0, 0, 0, 9};
  std::mt19937_64 rng(0);
  const SamplingParams greedy{};
  Verdict v = accept_drafts(logits, V, std::vector<int32_t>{1, 0}, {}, greedy, rng);
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.next, 3);
  v = accept_drafts(logits, V, std::vector<int32_t>{1, 2}, {}, greedy, rng);
  EXPECT_EQ(v.accepted, 1);
  EXPECT_EQ(v.next, 0);
  v = accept_drafts(logits, V, std::vector<int32_t>{3, 0}, {}, greedy, rng);
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.next, 1);
  EXPECT_THROW(accept_drafts(logits, V, std::vector<int32_t>{1}, {}, greedy, rng), ShapeError);
}

// accept_greedy (the argmax ids alone, as verify_greedy returns them) decides as accept_drafts
// at temperature 0 on the logits: random logits with ties, drafts that follow the argmax for a
// random prefix then leave it.
TEST(RejectionSampling, AcceptGreedyEqualsAcceptDraftsAtTemperatureZero) {
  std::mt19937_64 rng(11);
  const SamplingParams greedy{};
  const int V = 7;
  for (int trial = 0; trial < 500; ++trial) {
    const int d = int(rng() % 8);
    std::vector<float> logits((d + 1) * V);
    for (float& x : logits) x = float(rng() % 5);  // many ties
    std::vector<int32_t> ids(d + 1), drafts(d);
    for (int i = 0; i <= d; ++i) ids[i] = greedy_token({logits.data() + i * V, size_t(V)});
    const int follow = d == 0 ? 0 : int(rng() % (d + 1));
    for (int i = 0; i < d; ++i) drafts[i] = i < follow ? ids[i] : int32_t(rng() % V);
    const Verdict a = accept_drafts(logits, V, drafts, {}, greedy, rng);
    const Verdict b = accept_greedy(ids, drafts);
    ASSERT_EQ(a.accepted, b.accepted) << "trial " << trial;
    ASSERT_EQ(a.next, b.next) << "trial " << trial;
  }
  EXPECT_THROW(accept_greedy(std::vector<int32_t>{1}, std::vector<int32_t>{1}), ShapeError);
}

// verify_greedy gives the argmax of verify()'s logits for every fed token, pad rows and varying
// counts included (two models of the same weights fed the same steps); a wrong size raises and
// leaves no verify pending.
TEST(SpecModel, VerifyGreedyIsTheArgmaxOfVerify) {
  auto a = load(tiny_dir("nemotron_h"), SsmMode::kReplay, 4, 8);
  auto g = load(tiny_dir("nemotron_h"), SsmMode::kReplay, 4, 8);
  std::mt19937 rng(9);
  for (int step = 0; step < 30; ++step) {
    const std::vector<int32_t> slots{2, -1, 0, 3};
    std::vector<int32_t> ntok{1 + int32_t(rng() % 4), 0, 1 + int32_t(rng() % 4),
                              1 + int32_t(rng() % 4)};
    std::vector<int32_t> tokens;
    for (int32_t n : ntok)
      for (int t = 0; t < n; ++t) tokens.push_back(int32_t(rng() % 256));
    std::vector<float> logits(tokens.size() * 256);
    std::vector<int32_t> next(tokens.size());
    a->verify(tokens, ntok, slots, logits);
    g->verify_greedy(tokens, ntok, slots, next);
    for (size_t i = 0; i < tokens.size(); ++i)
      ASSERT_EQ(next[i], greedy_token({logits.data() + i * 256, 256})) << "step " << step;
    std::vector<int32_t> acc(ntok.size());
    for (size_t b = 0; b < ntok.size(); ++b)
      acc[b] = ntok[b] == 0 ? 0 : 1 + int32_t(rng() % ntok[b]);
    a->accept(acc);
    g->accept(acc);
  }
  std::vector<int32_t> short_next(1);
  EXPECT_THROW(g->verify_greedy(std::vector<int32_t>{1, 2}, std::vector<int32_t>{2},
                                std::vector<int32_t>{0}, short_next),
               ShapeError);
  std::vector<int32_t> one(1);
  g->verify_greedy(std::vector<int32_t>{1}, std::vector<int32_t>{1}, std::vector<int32_t>{0}, one);
  g->accept(std::vector<int32_t>{1});  // nothing was pending from the refused call
}

// temperature > 0 through the serving loop: every request gets its budget, and the result does
// not depend on the batch (each request samples and accepts from its own seeded stream).
TEST(RejectionSampling, SampledServingKeepsBudgetAndSeeds) {
  const auto reqs = prompts(24);
  auto m = load(kNemotron, SsmMode::kReplay, 4, 16, 3);
  auto drafter = make_drafter("ngram", *m);
  const SamplingParams p{0.7, 20, 0.95, 42};
  SpecStats ss;
  const auto a = serve_speculative(*m, reqs, 3, p, {4, drafter.get()}, nullptr, &ss);
  const auto b = serve_speculative(*m, reqs, 2, p, {4, drafter.get()});
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(a[i].tokens.size(), 24u);
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "per-request streams: batching must not matter";
  }
  EXPECT_GE(ss.mean_accepted(), 1.0);
}

}  // namespace
}  // namespace replayssm::engine
