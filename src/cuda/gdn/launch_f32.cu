// Instantiations of the GDN/KDA kernels with a f32 state/checkpoint: inputs float32 or bfloat16.
#include "cuda/gdn/launch.cuh"

namespace replayssm::cuda::gdn {
template void launch_conventional<float, float>(const StepParams&, const LaunchShape&,
                                                cudaStream_t);
template void launch_conventional<bf16, float>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<float, float>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, float>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::gdn
