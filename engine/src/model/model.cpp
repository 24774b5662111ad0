#include "replayssm/engine/model.h"

#include "model/cpu_model.h"

namespace replayssm::engine {

const char* ssm_mode_name(SsmMode m) {
  return m == SsmMode::kReplay ? "replay" : "conventional";
}

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
  check<UnsupportedError>(!options.cuda,
                          "the CUDA engine is not built yet: run generate with --device cpu");
  return std::make_unique<CpuModel>(dir, options);
}

}  // namespace replayssm::engine
