// A draft model proposing tokens greedily. Its own state only ever holds accepted history:
// propose() first commits the history it has not consumed yet (verify steps of up to kT tokens,
// all kept), taking the first draft from the last of them; the further drafts come from verify
// steps feeding the drafts so far that are then discarded (accept 0), so nothing has to be rolled
// back when the target rejects them. The steps are verify_greedy (on CUDA only the greedy ids
// leave the device); a row whose draft model's logits are not finite (id -1) stops drafting there.
#include <algorithm>

#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/drafter.h"
#include "replayssm/errors.h"

namespace replayssm::engine {
namespace {

constexpr int32_t kT = 8;  // the draft model's verify width (ring L 16 = 2T)

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(const std::string& dir, std::unique_ptr<Model> m)
      : dir_(dir), m_(std::move(m)), consumed_(m_->options().max_slots, 0) {}
  std::string name() const override { return "model:" + dir_; }

  void start(int32_t slot) override {
    m_->reset(std::vector<int32_t>{slot});
    consumed_.at(slot) = 0;
  }

  void propose(std::span<const DraftRow> rows,
               std::vector<std::vector<int32_t>>& drafts) override {
    drafts.assign(rows.size(), {});
    std::vector<size_t> live;
    for (size_t b = 0; b < rows.size(); ++b)
      if (rows[b].max_drafts > 0) live.push_back(b);
    if (live.empty()) return;
    // 1. Catch up: commit the unconsumed history; the greedy token after its last gives draft 1.
    for (;;) {
      std::vector<size_t> feed;
      for (size_t b : live)
        if (size_t(consumed_[rows[b].slot]) < rows[b].history.size()) feed.push_back(b);
      if (feed.empty()) break;
      clear();
      for (size_t b : feed) {
        const auto& h = rows[b].history;
        const int64_t from = consumed_[rows[b].slot];
        const int64_t n = std::min<int64_t>(kT, int64_t(h.size()) - from);
        add(rows[b].slot, h.subspan(from, n));
      }
      run();
      for (size_t i = 0; i < feed.size(); ++i) {
        const DraftRow& r = rows[feed[i]];
        consumed_[r.slot] += ntok_[i];
        if (size_t(consumed_[r.slot]) == r.history.size() && next_of(i) >= 0)
          drafts[feed[i]].push_back(next_of(i));
      }
      m_->accept(ntok_);
    }
    // 2. Draft j + 1 from a discarded verify step feeding drafts 1..j (rows that stopped
    // drafting have fewer than j).
    for (int32_t j = 1;; ++j) {
      std::vector<size_t> feed;
      for (size_t b : live)
        if (rows[b].max_drafts > j && drafts[b].size() == size_t(j)) feed.push_back(b);
      if (feed.empty()) break;
      clear();
      for (size_t b : feed) add(rows[b].slot, drafts[b]);
      run();
      for (size_t i = 0; i < feed.size(); ++i)
        if (next_of(i) >= 0) drafts[feed[i]].push_back(next_of(i));
      m_->accept(std::vector<int32_t>(feed.size(), 0));
    }
  }

 private:
  void clear() {
    tokens_.clear();
    ntok_.clear();
    slots_.clear();
  }
  void add(int32_t slot, std::span<const int32_t> toks) {
    slots_.push_back(slot);
    ntok_.push_back(static_cast<int32_t>(toks.size()));
    tokens_.insert(tokens_.end(), toks.begin(), toks.end());
    last_.resize(ntok_.size());
    last_.back() = static_cast<int64_t>(tokens_.size()) - 1;
  }
  void run() {
    next_.resize(tokens_.size());
    m_->verify_greedy(tokens_, ntok_, slots_, next_);
  }
  /// Greedy token after the last token fed to row i of the last verify step (-1: not finite).
  int32_t next_of(size_t i) const { return next_[static_cast<size_t>(last_[i])]; }

  std::string dir_;
  std::unique_ptr<Model> m_;
  std::vector<int64_t> consumed_;  // history tokens committed per slot
  std::vector<int32_t> tokens_, ntok_, slots_;
  std::vector<int64_t> last_;
  std::vector<int32_t> next_;
};

}  // namespace

std::unique_ptr<Drafter> make_model_drafter(const std::string& dir, int64_t target_vocab,
                                            int32_t max_slots, int32_t max_context,
                                            bool cuda) {
  const int64_t vocab = parse_config_of(Checkpoint::open(dir)).vocab_size;
  check<ConfigError>(vocab == target_vocab, "drafter vocab mismatch: draft model ", dir,
                     " has vocab ", vocab, ", the target has ", target_vocab);
  ModelOptions o;
  o.cuda = cuda;
  o.ssm = SsmMode::kReplay;
  o.ring_L = 2 * kT;
  o.spec_T = kT;
  o.max_slots = max_slots;
  o.max_context = max_context;
  return std::make_unique<ModelDrafter>(dir, Model::load(dir, o));
}

}  // namespace replayssm::engine
