// Checks shared by the fp16sr GPU tests (fp16sr/fp16sr and fp16sr/nvfp4;
// test_mamba2_cuda_sr16.cpp, test_gdn_cuda_sr16.cpp): a CUDA pool and a CPU twin set to what the
// GPU held run the same step; their float16 checkpoints are compared element by element, and
// fp16sr/nvfp4's read copy against the CPU codec. Only compiled with the CUDA backend.
#pragma once
#ifdef RSSM_WITH_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/codec_math.h"
#include "cuda_quant_copy.h"
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

/// A CPU twin of a device NVFP4 read copy (codes, block scales, global scales): host copies of
/// its bytes, viewed as the CPU backend's read copy.
struct HostNvfp4 {
  HostCopy values, blocks, global;
  explicit HostNvfp4(const DevCopy& c) : values(c.values), blocks(c.scales), global(c.global) {}
  StateBuffer buffer() const {
    StateBuffer b;
    b.values = values.view;
    b.scales.blocks = blocks.view;
    b.scales.global = global.view;
    return b;
  }
};

/// fp16sr/nvfp4's read copy after a step, one slot: a flushed slot's copy (codes, block and
/// global scales) is byte for byte the CPU codec's encoding of the GPU's new float16 checkpoint
/// `ckpt` (n elements, widened exactly: the copy is derived from the checkpoint as stored,
/// precision.h); any other slot's copy keeps every byte.
inline void expect_nvfp4_copy(const DevCopy& copy, const std::vector<std::vector<uint8_t>>& before,
                              const std::vector<std::vector<uint8_t>>& after, const uint16_t* ckpt,
                              int64_t n, int32_t slot, bool flushed) {
  const auto got = copy.slot_of(after, slot);
  if (!flushed) {
    ASSERT_EQ(got, copy.slot_of(before, slot)) << "read copy of slot " << slot
                                               << " changed without a flush";
    return;
  }
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = codec::f16_decode(ckpt[i]);
  const auto want = copy.encode(x);
  for (size_t t = 0; t < want.size(); ++t)
    for (size_t i = 0; i < want[t].size(); ++i)
      ASSERT_EQ(got[t][i], want[t][i]) << "slot " << slot << " read copy tensor " << t << " byte "
                                       << i << " is not the codec's encoding of the checkpoint";
}

/// The SR seeds of a pool: int64 [slots], slot s's seed base * 1000 + 17 s.
inline DeviceBuffer sr_seeds(int64_t slots, uint64_t base) {
  DeviceBuffer seeds(DType::kI64, {slots}, 81);
  std::vector<int64_t> sv(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) sv[s] = static_cast<int64_t>(base * 1000 + 17 * s);
  std::vector<uint8_t> raw(sv.size() * 8);  // (set_values takes doubles: uploaded as bytes)
  std::memcpy(raw.data(), sv.data(), raw.size());
  seeds.upload(raw);
  return seeds;
}

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
/// terms: within 2^-18 of the slot's largest magnitude, 1/256 of a float16 step there — two
/// float32 folds of up to 16 records whose terms reach that magnitude differ by up to ~16 · 2^-24
/// of it each, and one H200 run of L = 16 saw 2^-19.7).
inline void expect_sr16_slot(const uint16_t* gpu, const uint16_t* cpu, const uint16_t* before,
                             int64_t n, int32_t slot, bool flushed) {
  if (!flushed) {
    ASSERT_EQ(std::memcmp(gpu, before, n * 2), 0)
        << "checkpoint of slot " << slot << " (no flush this step) changed";
    return;
  }
  double largest = 0.0;
  for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::abs(double(f16_to_f32(cpu[i]))));
  const double floor = std::ldexp(largest, -18);
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

/// The step's outputs [batch, per_row]: pad rows (ids < 0) exactly 0; real rows equal to the CPU
/// twin's `cpu` within float32 reordering (both read the same float16 checkpoint and ring:
/// 2e-4 of the step's largest |output| + 1e-5). Each real row is counted into `flush_rows` when
/// flushed(slot), else `ordinary_rows`.
template <class Flushed>
void expect_sr16_outputs(const std::vector<double>& gpu, const std::vector<double>& cpu,
                         const std::vector<int32_t>& ids, int64_t per_row, Flushed&& flushed,
                         int& flush_rows, int& ordinary_rows) {
  const int64_t batch = static_cast<int64_t>(ids.size());
  double scale = 0.0;
  for (int64_t i = 0; i < batch * per_row; ++i)
    if (ids[i / per_row] >= 0) scale = std::max(scale, std::abs(cpu[i]));
  for (int64_t b = 0; b < batch; ++b) {
    if (ids[b] < 0) {
      for (int64_t i = 0; i < per_row; ++i) ASSERT_EQ(gpu[b * per_row + i], 0.0) << "pad row " << b;
      continue;
    }
    (flushed(ids[b]) ? flush_rows : ordinary_rows)++;
    for (int64_t i = 0; i < per_row; ++i)
      ASSERT_NEAR(gpu[b * per_row + i], cpu[b * per_row + i], 2e-4 * scale + 1e-5)
          << "row " << b << " (slot " << ids[b] << ") output " << i;
  }
}

}  // namespace replayssm::testing::cuda_test
#endif  // RSSM_WITH_CUDA
