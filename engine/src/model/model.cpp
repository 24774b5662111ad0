#include "replayssm/engine/model.h"

#include "model/checks.h"
#include "model/cpu_model.h"
#include "replayssm/engine/checkpoint.h"
#ifdef RSSM_WITH_CUDA
#include "cuda/cuda_model.h"
#endif

namespace replayssm::engine {

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
