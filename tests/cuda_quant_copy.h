// A quantised read copy (split modes fp32/nvfp4, fp32/fp8; precision.h layout) of a
// [slots, heads, rows, n] state on the device, with what the GPU tests check it against: the CPU
// codec's encoding and decoding of one slot. Mamba-2: heads H, rows P, n N; GDN/KDA: HV, V, K.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda_test_util.h"
#include "replayssm/codecs.h"
#include "replayssm/precision.h"
#include "replayssm/tensor.h"

namespace replayssm::testing::cuda_test {

struct DevCopy {
  StateFormat f;
  int64_t slots, heads, rows, n;
  DeviceBuffer values, scales, global;  // fp8: scales = rows [slots, heads, rows] f32; nvfp4: blocks
  DevCopy(StateFormat f_, int64_t slots_, int64_t heads_, int64_t rows_, int64_t n_)
      : f(f_), slots(slots_), heads(heads_), rows(rows_), n(n_),
        values(DType::kU8, {slots_, heads_, rows_, nvfp4() ? n_ / 2 : n_}, 71),
        scales(nvfp4() ? DType::kU8 : DType::kF32,
               nvfp4() ? std::vector<int64_t>{slots_, heads_, rows_, n_ / 16}
                       : std::vector<int64_t>{slots_, heads_, rows_},
               72),
        global(DType::kF32, {slots_, heads_}, 73) {}
  bool nvfp4() const { return f == StateFormat::kNvfp4; }
  StateBuffer buffer() const {
    StateBuffer b;
    b.values = values.view();
    if (nvfp4())
      b.scales.blocks = scales.view(), b.scales.global = global.view();
    else
      b.scales.rows = scales.view();
    return b;
  }
  /// Every byte the format uses, per tensor.
  std::vector<std::vector<uint8_t>> download() const {
    std::vector<std::vector<uint8_t>> out{values.download(), scales.download()};
    if (nvfp4()) out.push_back(global.download());
    return out;
  }
  /// One slot's part of each tensor of `all`.
  std::vector<std::vector<uint8_t>> slot_of(const std::vector<std::vector<uint8_t>>& all,
                                            int64_t slot) const {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& t : all) {
      const size_t per = t.size() / static_cast<size_t>(slots);
      out.emplace_back(t.begin() + slot * per, t.begin() + (slot + 1) * per);
    }
    return out;
  }
  /// The CPU codec's encoding of one slot's float32 state [heads * rows * n], as slot_of lays it
  /// out.
  std::vector<std::vector<uint8_t>> encode(std::vector<float> x) const {
    const int64_t hr = heads * rows;
    if (nvfp4()) {
      std::vector<uint8_t> codes(hr * n / 2), blocks(hr * n / 16), g(heads * 4);
      codecs::Nvfp4 q{make_view(codes.data(), DType::kU8, {hr, n / 2}),
                      make_view(blocks.data(), DType::kU8, {hr, n / 16}),
                      make_view(g.data(), DType::kF32, {heads}), rows};
      codecs::nvfp4_encode(make_view(x.data(), DType::kF32, {hr, n}), q);
      return {codes, blocks, g};
    }
    std::vector<uint8_t> codes(hr * n), row_scales(hr * 4);
    codecs::Fp8Rows q{make_view(codes.data(), DType::kU8, {hr, n}),
                      make_view(row_scales.data(), DType::kF32, {hr})};
    codecs::fp8_encode(make_view(x.data(), DType::kF32, {hr, n}), q);
    return {codes, row_scales};
  }
  /// The CPU codec's decoding of one slot (slot_of layout) to doubles [heads * rows * n].
  std::vector<double> decode_slot(std::vector<std::vector<uint8_t>> t) const {
    const int64_t hr = heads * rows;
    std::vector<float> y(hr * n);
    if (nvfp4()) {
      codecs::Nvfp4 q{make_view(t[0].data(), DType::kU8, {hr, n / 2}),
                      make_view(t[1].data(), DType::kU8, {hr, n / 16}),
                      make_view(t[2].data(), DType::kF32, {heads}), rows};
      codecs::nvfp4_decode(q, make_view(y.data(), DType::kF32, {hr, n}));
    } else {
      codecs::Fp8Rows q{make_view(t[0].data(), DType::kU8, {hr, n}),
                        make_view(t[1].data(), DType::kF32, {hr})};
      codecs::fp8_decode(q, make_view(y.data(), DType::kF32, {hr, n}));
    }
    return std::vector<double>(y.begin(), y.end());
  }
  bool guards_intact() const {
    return values.guards_intact() && scales.guards_intact() && global.guards_intact();
  }
};

/// `t` moved `bytes` bytes on (a misaligned view for the alignment checks).
inline TensorView shifted(TensorView t, int bytes) {
  t.data = static_cast<uint8_t*>(t.data) + bytes;
  return t;
}

}  // namespace replayssm::testing::cuda_test
