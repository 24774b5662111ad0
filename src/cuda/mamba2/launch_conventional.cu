// Instantiations of the conventional kernel: inputs float32 / bfloat16 x state fp32 / fp16 / bf16.
#include "cuda/mamba2/launch.cuh"

namespace replayssm::cuda::mamba2 {
template void launch_conventional<float, float>(const StepParams&, const LaunchShape&,
                                                cudaStream_t);
template void launch_conventional<float, f16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_conventional<float, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_conventional<bf16, float>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_conventional<bf16, f16>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_conventional<bf16, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::mamba2
