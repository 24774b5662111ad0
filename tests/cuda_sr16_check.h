// Checks shared by the fp16sr/fp16sr GPU tests (test_mamba2_cuda_sr16.cpp,
// test_gdn_cuda_sr16.cpp): a CUDA pool and a CPU twin set to what the GPU held run the same step;
// their float16 checkpoints are compared element by element. Only compiled with the CUDA backend.
#pragma once
#ifdef RSSM_WITH_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_test_util.h"

namespace replayssm::testing::cuda_test {

/// A host copy of a device buffer's payload, viewed as a CPU tensor of the same shape and dtype.
struct HostCopy {
  std::vector<uint8_t> bytes;
  TensorView view;
  explicit HostCopy(const DeviceBuffer& d) : bytes(d.download()), view(d.view()) {
    view.data = bytes.data();
    view.device = Device::kCPU;
  }
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;
};

/// |a - b| in float16 steps (0 when equal; the codes ordered as the values they encode).
inline int f16_steps(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t h) {
    return (h & 0x8000) ? -static_cast<int>(h & 0x7fff) : static_cast<int>(h);
  };
  return std::abs(ordered(a) - ordered(b));
}

/// One slot's float16 checkpoint after a step, n elements: unchanged from `before` unless
/// `flushed`; else the GPU's stochastically rounded elements against the CPU backend's. The two
/// draw the same random word per element and round with the same rule, so they differ only where
/// their float32 values (sums of the same terms in another order) straddle the word's threshold:
/// in at most 1% of the elements (a wrong key or element index would move about a third of them),
/// by one float16 step, or by more only where the element is tiny against the slot (cancelling
/// terms: within 2^-20 of the slot's largest magnitude, 1/1024 of a float16 step there).
inline void expect_sr16_slot(const uint16_t* gpu, const uint16_t* cpu, const uint16_t* before,
                             int64_t n, int32_t slot, bool flushed) {
  if (!flushed) {
    ASSERT_EQ(std::memcmp(gpu, before, n * 2), 0)
        << "checkpoint of slot " << slot << " (no flush this step) changed";
    return;
  }
  double largest = 0.0;
  for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::abs(double(f16_to_f32(cpu[i]))));
  const double floor = std::ldexp(largest, -20);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (gpu[i] == cpu[i]) continue;
    ++differ;
    const double a = f16_to_f32(gpu[i]), b = f16_to_f32(cpu[i]);
    ASSERT_TRUE(f16_steps(gpu[i], cpu[i]) <= 1 || std::abs(a - b) <= floor)
        << "slot " << slot << " element " << i << ": GPU 0x" << std::hex << gpu[i] << " ("
        << a << "), CPU 0x" << cpu[i] << " (" << b << "), slot's largest |value| " << largest;
  }
  EXPECT_LE(differ, n / 100) << "slot " << slot << ": " << differ << " of " << n
                             << " stochastically rounded elements differ from the CPU's";
}

}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
