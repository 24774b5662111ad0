// Instantiations of the replay group kernel over a quantised read copy (the ordinary launch of the
// split modes fp32/nvfp4 and fp32/fp8): inputs float32 (ring float32) or bfloat16 (ring float32
// or bfloat16).
#include "cuda/mamba2/launch.cuh"

namespace replayssm::cuda::mamba2 {
template void launch_replay<float, nvfp4x2, float>(const StepParams&, const LaunchShape&,
                                                   cudaStream_t);
template void launch_replay<bf16, nvfp4x2, float>(const StepParams&, const LaunchShape&,
                                                  cudaStream_t);
template void launch_replay<bf16, nvfp4x2, bf16>(const StepParams&, const LaunchShape&,
                                                 cudaStream_t);
template void launch_replay<float, e4m3, float>(const StepParams&, const LaunchShape&,
                                                cudaStream_t);
template void launch_replay<bf16, e4m3, float>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, e4m3, bf16>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::mamba2
