#include "replayssm/engine/model.h"

#include "model/cpu_model.h"
#ifdef RSSM_WITH_CUDA
#include "cuda/cuda_model.h"
#endif

namespace replayssm::engine {

const char* ssm_mode_name(SsmMode m) {
  return m == SsmMode::kReplay ? "replay" : "conventional";
}

namespace {
// The SSM verify kernels exist on CUDA (mamba2::verify, gdn::verify); the CUDA model does not
// run multi-token steps yet (attention, convolution and MLP over T tokens; issue 9).
constexpr const char* kNoCudaVerify =
    "speculative decoding is not wired into the CUDA model yet: run it with --device cpu";
}

// Backends without verify steps (the CUDA model) inherit these.
void Model::verify(std::span<const int32_t>, std::span<const int32_t>, std::span<const int32_t>,
                   std::span<float>) {
  throw UnsupportedError(kNoCudaVerify);
}
void Model::accept(std::span<const int32_t>) { throw UnsupportedError(kNoCudaVerify); }

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
  check<UnsupportedError>(!(options.cuda && options.spec_T != 0), kNoCudaVerify);
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
