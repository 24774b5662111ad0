#include "spec_served.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "bench_common.h"
#include "replayssm/engine/drafter.h"
#include "replayssm/engine/errors.h"
#include "replayssm/engine/speculative.h"
#include "replayssm/engine/tokenizer.h"

namespace replayssm::cli {

std::vector<engine::Request> served_requests(const std::string& prompts_file, int64_t batch,
                                             int prompt_len, int new_tokens) {
  std::ifstream f(prompts_file);
  check<ConfigError>(f.good(), "--prompts: cannot read '", prompts_file, "'");
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);)
    if (static_cast<int>(line.size()) >= prompt_len) lines.push_back(line.substr(0, prompt_len));
  check<ConfigError>(!lines.empty(), "--prompts: '", prompts_file, "' has no line of at least ",
                     prompt_len, " bytes (--prompt-len)");
  std::vector<engine::Request> reqs;
  for (int64_t i = 0; i < batch; ++i)
    reqs.push_back({engine::byte_encode(lines[static_cast<size_t>(i) % lines.size()]), new_tokens});
  return reqs;
}

ServedPoint time_served(engine::Model& model, const std::vector<engine::Request>& requests, int T,
                        const std::string& drafter) {
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> at;  // after each step
  const auto on_step = [&](size_t, size_t) { at.push_back(Clock::now()); };
  const int32_t batch = static_cast<int32_t>(requests.size());
  const int64_t P = static_cast<int64_t>(requests.at(0).prompt.size());
  engine::ServeStats stats;
  engine::SpecStats spec;
  if (T == 0) {
    engine::serve(model, requests, batch, engine::SamplingParams{}, &stats, {}, on_step);
  } else {
    const auto d = engine::make_drafter(drafter, model);
    engine::serve_speculative(model, requests, batch, engine::SamplingParams{}, {T, d.get()},
                              &stats, &spec, {}, on_step);
  }
  // The step that feeds the prompts' last tokens also samples every row's first token.
  const int64_t k0 = T == 0 ? P - 1 : (P + T - 1) / T - 1;
  check<Error>(static_cast<int64_t>(at.size()) > k0 + 1, "bench spec: the serving loop ran ",
               at.size(), " steps, too few for a decode phase after ", k0 + 1, " prompt steps");
  ServedPoint p;
  std::vector<double> ms;
  for (size_t i = static_cast<size_t>(k0) + 1; i < at.size(); ++i)
    ms.push_back(std::chrono::duration<double, std::milli>(at[i] - at[i - 1]).count());
  const double seconds = std::chrono::duration<double>(at.back() - at[k0]).count();
  p.tokens_per_s = static_cast<double>(stats.generated_tokens - batch) / seconds;
  p.ms = percentile(ms, 0.5);
  if (T > 0) {
    p.mean_accepted = spec.mean_accepted();
    p.draft_acceptance = spec.draft_acceptance();
  }
  return p;
}

}  // namespace replayssm::cli
