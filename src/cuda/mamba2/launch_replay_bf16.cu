// Instantiations of the replay kernel with a bf16 checkpoint: inputs float32 (ring float32) or
// bfloat16 (ring float32 or bfloat16).
#include "cuda/mamba2/launch.cuh"

namespace replayssm::cuda::mamba2 {
template void launch_replay<float, bf16, float>(const StepParams&, const LaunchShape&,
                                                cudaStream_t);
template void launch_replay<bf16, bf16, float>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, bf16, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::mamba2
