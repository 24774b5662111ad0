#include "replayssm/engine/model.h"

#include "model/cpu_model.h"
#ifdef RSSM_WITH_CUDA
#include "cuda/cuda_model.h"
#endif

namespace replayssm::engine {

const char* ssm_mode_name(SsmMode m) {
  return m == SsmMode::kReplay ? "replay" : "conventional";
}

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
#ifdef RSSM_WITH_CUDA
  if (options.cuda) return make_cuda_model(dir, options);
#else
  check<UnsupportedError>(!options.cuda,
                          "this build has no CUDA backend (configured without nvcc, or with "
                          "-DRSSM_CUDA=OFF): run generate with --device cpu");
#endif
  return std::make_unique<CpuModel>(dir, options);
}

}  // namespace replayssm::engine
