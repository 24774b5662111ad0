// Instantiations of the GDN/KDA kernels with a f16 state/checkpoint: inputs float32 or bfloat16.
#include "cuda/gdn/launch.cuh"

namespace replayssm::cuda::gdn {
template void launch_conventional<float, f16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_conventional<bf16, f16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<float, f16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, f16>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::gdn
