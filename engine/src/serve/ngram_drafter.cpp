// N-gram prompt lookup drafting (no extra model): match the history's last n tokens against its
// earlier tokens and propose the continuation of the most recent match.
#include <algorithm>

#include "replayssm/engine/drafter.h"
#include "replayssm/errors.h"

namespace replayssm::engine {
namespace {

class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(int32_t max_n, int32_t min_n) : max_n_(max_n), min_n_(min_n) {}
  std::string name() const override { return "ngram"; }

  void propose(std::span<const DraftRow> rows,
               std::vector<std::vector<int32_t>>& drafts) override {
    drafts.assign(rows.size(), {});
    for (size_t b = 0; b < rows.size(); ++b) lookup(rows[b], drafts[b]);
  }

 private:
  void lookup(const DraftRow& r, std::vector<int32_t>& out) const {
    const auto& h = r.history;
    const int64_t m = static_cast<int64_t>(h.size());
    if (r.max_drafts <= 0) return;
    for (int64_t n = std::min<int64_t>(max_n_, m - 1); n >= min_n_; --n) {
      const auto tail = h.subspan(m - n);
      for (int64_t i = m - n - 1; i >= 0; --i) {  // most recent earlier occurrence first
        if (!std::equal(tail.begin(), tail.end(), h.begin() + i)) continue;
        const int64_t from = i + n, to = std::min<int64_t>(m, from + r.max_drafts);
        out.assign(h.begin() + from, h.begin() + to);
        return;
      }
    }
  }

  int32_t max_n_, min_n_;
};

}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter(int32_t max_n, int32_t min_n) {
  check<ConfigError>(min_n >= 1 && min_n <= max_n, "ngram drafter: n range ", min_n, "..", max_n,
                     ", expected 1 <= min_n <= max_n");
  return std::make_unique<NgramDrafter>(max_n, min_n);
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec, const Model& target) {
  if (spec == "ngram") return make_ngram_drafter();
  if (spec.rfind("model:", 0) == 0 && spec.size() > 6)
    return make_model_drafter(spec.substr(6), target.config().vocab_size,
                              target.options().max_slots, target.options().max_context,
                              target.options().cuda);
  throw ConfigError("unknown drafter '" + spec + "', expected ngram or model:DIR");
}

}  // namespace replayssm::engine
