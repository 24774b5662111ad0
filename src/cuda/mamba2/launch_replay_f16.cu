// Instantiations of the replay kernel with a f16 checkpoint: inputs float32 (ring float32) or
// bfloat16 (ring float32 or bfloat16).
#include "cuda/mamba2/launch.cuh"

namespace replayssm::cuda::mamba2 {
template void launch_replay<float, f16, float>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, f16, float>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, f16, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::mamba2
