// Built when the CUDA backend is not: the device queries answer "no device".
#include "cuda/device.h"

namespace replayssm::cuda {
int device_count() { return 0; }
std::string device_summary() { return "replayssm was built without the CUDA backend"; }
}  // namespace replayssm::cuda
