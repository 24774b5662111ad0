// Device queries of the CUDA backend (answer "no device" when built without CUDA).
#pragma once
#include <string>

namespace replayssm::cuda {
/// Number of usable CUDA devices (0 without a driver, a device, or the CUDA backend).
int device_count();
/// One line: the device name and memory, or why there is none.
std::string device_summary();
}  // namespace replayssm::cuda
