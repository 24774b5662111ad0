// Instantiations of the replay kernel with a f32 checkpoint: inputs float32 (ring float32) or
// bfloat16 (ring float32 or bfloat16).
#include "cuda/mamba2/launch.cuh"

namespace replayssm::cuda::mamba2 {
template void launch_replay<float, float, float>(const StepParams&, const LaunchShape&,
                                                 cudaStream_t);
template void launch_replay<bf16, float, float>(const StepParams&, const LaunchShape&,
                                                cudaStream_t);
template void launch_replay<bf16, float, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::mamba2
