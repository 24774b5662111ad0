// The CUDA backend's device query. GPU tests skip, with the reason, where no device is present.
#include <gtest/gtest.h>

#include "cuda/device.h"

namespace replayssm {
namespace {

TEST(CudaDevice, SummaryNamesTheDeviceOrWhyThereIsNone) {
  const std::string s = cuda::device_summary();
  EXPECT_FALSE(s.empty());
  if (cuda::device_count() == 0) GTEST_SKIP() << s;  // "no CUDA device: <why>"
  // A present device is described by name and compute capability.
  EXPECT_NE(s.find("sm_"), std::string::npos) << s;
}

}  // namespace
}  // namespace replayssm
