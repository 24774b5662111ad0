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
// The SSM verify kernels exist on CUDA (mamba2::verify, gdn::verify); the CUDA model does not
// run multi-token steps yet (attention, convolution and MLP over T tokens; issue 9).
constexpr const char* kNoCudaVerify =
    "speculative decoding is not wired into the CUDA model yet: run it with --device cpu";

[[maybe_unused]] void check_cuda_build(const ModelOptions& options) {
  check<UnsupportedError>(!options.cuda,
                          "this build has no CUDA backend (configured without nvcc, or with "
                          "-DRSSM_CUDA=OFF): run generate with --device cpu");
}
}

// Backends without verify steps (the CUDA model) inherit these.
void Model::verify(std::span<const int32_t>, std::span<const int32_t>, std::span<const int32_t>,
                   std::span<float>) {
  throw UnsupportedError(kNoCudaVerify);
}
void Model::accept(std::span<const int32_t>) { throw UnsupportedError(kNoCudaVerify); }

void validate_options(const ModelConfig& cfg, const ModelOptions& options) {
  check<UnsupportedError>(!(options.cuda && options.spec_T != 0), kNoCudaVerify);
  const ModelOptions o = resolve_options(cfg, options);
#ifdef RSSM_WITH_CUDA
  if (o.cuda) check_cuda_model(cfg, o);
#else
  check_cuda_build(options);
#endif
}

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
  check<UnsupportedError>(!(options.cuda && options.spec_T != 0), kNoCudaVerify);
#ifndef RSSM_WITH_CUDA
  check_cuda_build(options);  // before reading any file
#endif
  return load(Checkpoint::open(dir), options);
}

std::unique_ptr<Model> Model::load(const Checkpoint& ck, const ModelOptions& options) {
  check<UnsupportedError>(!(options.cuda && options.spec_T != 0), kNoCudaVerify);
#ifdef RSSM_WITH_CUDA
  if (options.cuda) return make_cuda_model(ck, options);
#else
  check_cuda_build(options);
#endif
  return std::make_unique<CpuModel>(ck, options);
}

}  // namespace replayssm::engine
