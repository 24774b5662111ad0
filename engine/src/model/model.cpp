#include "replayssm/engine/model.h"

#include "model/checks.h"
#include "model/cpu_model.h"
#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/sampling.h"
#ifdef RSSM_WITH_CUDA
#include "cuda/cuda_model.h"
#endif

namespace replayssm::engine {
namespace {
/// next[i] = greedy_token of row i of logits [next.size(), V].
void greedy_of_rows(const std::vector<float>& logits, int64_t V, std::span<int32_t> next) {
  for (size_t i = 0; i < next.size(); ++i)
    next[i] = greedy_token({logits.data() + i * V, static_cast<size_t>(V)});
}
}  // namespace

void Model::step_greedy(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                        std::span<int32_t> next) {
  const int64_t V = config().vocab_size;
  check<ShapeError>(next.size() == slots.size(), "step_greedy: next has ", next.size(),
                    " entries, expected one per row (", slots.size(), ")");
  std::vector<float> logits(slots.size() * static_cast<size_t>(V));
  step(tokens, slots, logits);
  greedy_of_rows(logits, V, next);
}

void Model::verify_greedy(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                          std::span<const int32_t> slots, std::span<int32_t> next) {
  const int64_t V = config().vocab_size;
  check<ShapeError>(next.size() == tokens.size(), "verify_greedy: next has ", next.size(),
                    " entries, expected one per fed token (", tokens.size(), ")");
  std::vector<float> logits(tokens.size() * static_cast<size_t>(V));
  verify(tokens, num_tokens, slots, logits);
  greedy_of_rows(logits, V, next);
}

const char* ssm_mode_name(SsmMode m) {
  return m == SsmMode::kReplay ? "replay" : "conventional";
}

namespace {
[[maybe_unused]] void check_cuda_build(const ModelOptions& options) {
  check<UnsupportedError>(!options.cuda,
                          "this build has no CUDA backend (configured without nvcc, or with "
                          "-DRSSM_CUDA=OFF): run generate with --device cpu");
}
}

void validate_options(const ModelConfig& cfg, const ModelOptions& options) {
  const ModelOptions o = resolve_options(cfg, options);
#ifdef RSSM_WITH_CUDA
  if (o.cuda) check_cuda_model(cfg, o);
#else
  check_cuda_build(options);
#endif
}

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
#ifndef RSSM_WITH_CUDA
  check_cuda_build(options);  // before reading any file
#endif
  return load(Checkpoint::open(dir), options);
}

std::unique_ptr<Model> Model::load(const Checkpoint& ck, const ModelOptions& options) {
#ifdef RSSM_WITH_CUDA
  if (options.cuda) return make_cuda_model(ck, options);
#else
  check_cuda_build(options);
#endif
  return std::make_unique<CpuModel>(ck, options);
}

}  // namespace replayssm::engine
