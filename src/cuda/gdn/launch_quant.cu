// Instantiations of the GDN/KDA replay group kernel over a quantised read copy (the ordinary
// launch of the split modes fp32/fp8 and fp32/nvfp4): inputs float32 or bfloat16.
#include "cuda/gdn/launch.cuh"

namespace replayssm::cuda::gdn {
template void launch_replay<float, nvfp4x2>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, nvfp4x2>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<float, e4m3>(const StepParams&, const LaunchShape&, cudaStream_t);
template void launch_replay<bf16, e4m3>(const StepParams&, const LaunchShape&, cudaStream_t);
}  // namespace replayssm::cuda::gdn
