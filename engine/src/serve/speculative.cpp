#include "replayssm/engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "replayssm/engine/acceptance.h"
#include "replayssm/errors.h"
#include "serve/requests.h"

namespace replayssm::engine {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Active {
  size_t req;
  int32_t slot;
  size_t fed = 0;                // prompt tokens fed so far
  std::vector<int32_t> history;  // prompt + generated tokens (the last generated one is fed next)
  std::mt19937_64 rng;
};

}  // namespace

std::vector<Completion> serve_speculative(Model& model, const std::vector<Request>& requests,
                                          int32_t batch, const SamplingParams& sampling,
                                          const SpecParams& spec, ServeStats* stats,
                                          SpecStats* spec_stats, const TokenCallback& on_token,
                                          const StepCallback& on_step) {
  const int64_t V = model.config().vocab_size;
  check_requests(model, requests, batch, sampling);
  const int32_t T = spec.T;
  check<ConfigError>(T >= 1 && T <= 8, "speculative T is ", T, ", expected 1..8");
  check<ConfigError>(T <= model.options().spec_T, "speculative T is ", T,
                     ", above the model's spec_T ", model.options().spec_T);

  std::vector<Completion> out(requests.size());
  std::deque<size_t> queue;
  for (size_t i = 0; i < requests.size(); ++i) queue.push_back(i);
  std::vector<int32_t> free_slots;
  for (int32_t s = batch - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<Active> active;
  size_t finished = 0;
  ServeStats st;
  SpecStats ss;
  const auto t0 = Clock::now();

  std::vector<int32_t> tokens, ntok, slots, accepted;
  std::vector<DraftRow> draft_rows;
  std::vector<size_t> draft_of;  // active index -> index into draft_rows (or npos)
  std::vector<std::vector<int32_t>> drafts;
  std::vector<float> logits;
  std::vector<int32_t> greedy_ids;
  // Greedy acceptance needs only the argmax after each fed token: verify_greedy (on CUDA one id
  // per token row leaves the device instead of its logits).
  const bool greedy = sampling.temperature == 0.0;
  constexpr size_t npos = size_t(-1);
  while (!queue.empty() || !active.empty()) {
    std::vector<int32_t> fresh;
    while (!queue.empty() && !free_slots.empty()) {
      const size_t r = queue.front();
      queue.pop_front();
      if (requests[r].max_new_tokens == 0) { ++finished; continue; }
      Active a{r, free_slots.back(), 0, requests[r].prompt, request_rng(sampling, r)};
      free_slots.pop_back();
      fresh.push_back(a.slot);
      active.push_back(std::move(a));
    }
    if (!fresh.empty()) {
      model.reset(fresh);
      if (spec.drafter)
        for (int32_t s : fresh) spec.drafter->start(s);
    }
    if (active.empty()) break;

    // Drafts for decoding rows, at most what their budget can still emit (a step emits the
    // kept drafts plus one token).
    draft_rows.clear();
    draft_of.assign(active.size(), npos);
    for (size_t i = 0; i < active.size(); ++i) {
      const Active& a = active[i];
      const Request& r = requests[a.req];
      if (a.fed < r.prompt.size()) continue;
      const int32_t left = r.max_new_tokens - int32_t(out[a.req].tokens.size());
      const int32_t k = std::min(T - 1, left - 1);
      if (k <= 0 || !spec.drafter) continue;
      draft_of[i] = draft_rows.size();
      draft_rows.push_back({a.slot, a.history, k});
    }
    drafts.assign(draft_rows.size(), {});
    if (!draft_rows.empty()) {
      const auto td = Clock::now();
      spec.drafter->propose(draft_rows, drafts);
      ss.draft_seconds += since(td);
      for (size_t j = 0; j < drafts.size(); ++j) {
        check<Error>(int32_t(drafts[j].size()) <= draft_rows[j].max_drafts, "drafter ",
                     spec.drafter->name(), " proposed ", drafts[j].size(), " tokens, at most ",
                     draft_rows[j].max_drafts, " asked");
        for (int32_t t : drafts[j])
          check<Error>(t >= 0 && t < V, "drafter ", spec.drafter->name(), " proposed token ", t,
                       ", outside [0, ", V, ")");
      }
    }

    tokens.clear();
    ntok.clear();
    slots.clear();
    for (size_t i = 0; i < active.size(); ++i) {
      const Active& a = active[i];
      const Request& r = requests[a.req];
      slots.push_back(a.slot);
      if (a.fed < r.prompt.size()) {
        const size_t n = std::min<size_t>(T, r.prompt.size() - a.fed);
        tokens.insert(tokens.end(), r.prompt.begin() + a.fed, r.prompt.begin() + a.fed + n);
        ntok.push_back(int32_t(n));
        continue;
      }
      tokens.push_back(a.history.back());
      int32_t n = 1;
      if (draft_of[i] != npos) {
        const auto& d = drafts[draft_of[i]];
        tokens.insert(tokens.end(), d.begin(), d.end());
        n += int32_t(d.size());
      }
      ntok.push_back(n);
    }
    if (greedy) {
      greedy_ids.resize(tokens.size());
      model.verify_greedy(tokens, ntok, slots, greedy_ids);
    } else {
      logits.resize(tokens.size() * V);
      model.verify(tokens, ntok, slots, logits);
    }

    accepted.assign(active.size(), 0);
    std::vector<size_t> done;
    int64_t off = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      Active& a = active[i];
      const Request& r = requests[a.req];
      const int32_t n = ntok[i];
      std::span<const float> row;   // sampled: the logits after each fed token
      std::span<const int32_t> ids;  // greedy: the argmax after each fed token
      if (greedy)
        ids = {greedy_ids.data() + off, size_t(n)};
      else
        row = {logits.data() + off * V, size_t(n) * V};
      off += n;
      if (greedy) {
        for (int32_t j = 0; j < n; ++j)
          check_greedy_finite(ids[j], a.req, model.position(a.slot) + j);
      } else {
        check_logits_finite(row, a.req, model.position(a.slot) + n - 1);
      }
      std::vector<int32_t> emit;
      if (a.fed < r.prompt.size()) {
        accepted[i] = n;
        a.fed += n;
        st.prompt_tokens += n;
        if (a.fed < r.prompt.size()) continue;
        // The logits after the last prompt token give the first generated token.
        emit.push_back(greedy ? ids[n - 1]
                              : sample_token(row.subspan(size_t(n - 1) * V), sampling, a.rng));
      } else {
        const std::span<const int32_t> d(tokens.data() + (off - n) + 1, size_t(n - 1));
        const Verdict v =
            greedy ? accept_greedy(ids, d) : accept_drafts(row, V, d, {}, sampling, a.rng);
        accepted[i] = 1 + v.accepted;
        emit.assign(d.begin(), d.begin() + v.accepted);
        emit.push_back(v.next);
        ++ss.row_steps;
        ss.drafted += n - 1;
        ss.accepted_drafts += v.accepted;
        ++ss.accepted_hist[accepted[i]];
      }
      for (int32_t t : emit) {
        out[a.req].tokens.push_back(t);
        a.history.push_back(t);
        ++st.generated_tokens;
        if (on_token) on_token(a.req, t);
      }
      if (int32_t(out[a.req].tokens.size()) >= r.max_new_tokens) done.push_back(i);
    }
    model.accept(accepted);
    if (++st.steps == 1) {
      st.first_step_seconds = since(t0);
      st.first_step_tokens = st.prompt_tokens + st.generated_tokens;
    }

    std::vector<Active> still;
    size_t next_done = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      if (next_done < done.size() && done[next_done] == i) {
        ++next_done;
        free_slots.push_back(active[i].slot);
        ++finished;
        continue;
      }
      still.push_back(std::move(active[i]));
    }
    active = std::move(still);
    if (on_step) on_step(finished, requests.size());
  }
  st.seconds = since(t0);
  if (stats) *stats = st;
  if (spec_stats) *spec_stats = ss;
  return out;
}

}  // namespace replayssm::engine
