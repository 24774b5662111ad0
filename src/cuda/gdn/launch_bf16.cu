// Instantiations of the GDN/KDA kernels with a bf16 state/checkpoint: inputs float32 or bfloat16.
#include "cuda/gdn/launch.cuh"

namespace replayssm::cuda::gdn {
template void launch_conventional<float, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_conventional<bf16, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<float, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::gdn
