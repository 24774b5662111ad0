// Loads and stores of state buffers in every StateFormat; see state_io.h.
#include "cpu/state_io.h"

#include <cstring>

#include "common/codec_math.h"
#include "common/dtype.h"
#include "replayssm/codecs.h"

namespace replayssm::cpu::state_io {
namespace {

using F = StateFormat;

/// Index of the head's first element in the slot-major buffer (in elements).
int64_t head_base(const Geo& g, int64_t slot, int64_t h) { return (slot * g.heads + h) * g.head_elems(); }
int64_t head_index(const Geo& g, int64_t slot, int64_t h) { return slot * g.heads + h; }

codecs::Nvfp4 nvfp4_view(const StateBuffer& buf, const Geo& g, int64_t slot, int64_t h) {
  const int64_t hi = head_index(g, slot, h);
  codecs::Nvfp4 q;
  q.codes = make_view(buf.values.ptr<uint8_t>() + head_base(g, slot, h) / 2, DType::kU8, {g.rows, g.n / 2});
  q.block_scales = make_view(buf.scales.blocks.ptr<uint8_t>() + hi * g.rows * (g.n / 16), DType::kU8,
                             {g.rows, g.n / 16});
  q.global_scales = make_view(buf.scales.global.ptr<float>() + hi, DType::kF32, {1});
  q.group_rows = g.rows;
  return q;
}

codecs::Fp8Rows fp8_view(const StateBuffer& buf, const Geo& g, int64_t slot, int64_t h) {
  codecs::Fp8Rows q;
  q.codes = make_view(buf.values.ptr<uint8_t>() + head_base(g, slot, h), DType::kU8, {g.rows, g.n});
  q.scales = make_view(buf.scales.rows.ptr<float>() + head_index(g, slot, h) * g.rows, DType::kF32, {g.rows});
  return q;
}

}  // namespace

void decode_head(StateFormat f, const StateBuffer& buf, const Geo& g, int64_t slot, int64_t h,
                 float* out) {
  const int64_t m = g.head_elems(), base = head_base(g, slot, h);
  switch (f) {
    case F::kFp32:
      std::memcpy(out, buf.values.ptr<const float>() + base, m * sizeof(float));
      return;
    case F::kBf16: {
      const uint16_t* v = buf.values.ptr<const uint16_t>() + base;
      for (int64_t i = 0; i < m; ++i) out[i] = bf16_to_f32(v[i]);
      return;
    }
    case F::kFp16:
    case F::kFp16Sr: {
      const uint16_t* v = buf.values.ptr<const uint16_t>() + base;
      for (int64_t i = 0; i < m; ++i) out[i] = codec::f16_decode(v[i]);
      return;
    }
    case F::kFp8:
      codecs::fp8_decode(fp8_view(buf, g, slot, h), make_view(out, DType::kF32, {g.rows, g.n}));
      return;
    case F::kNvfp4:
      codecs::nvfp4_decode(nvfp4_view(buf, g, slot, h), make_view(out, DType::kF32, {g.rows, g.n}));
      return;
  }
}

void encode_head(StateFormat f, const StateBuffer& buf, const Geo& g, int64_t slot, int64_t h,
                 const float* x, SrDraw sr) {
  const int64_t m = g.head_elems(), base = head_base(g, slot, h);
  float* xin = const_cast<float*>(x);  // the codecs take views; they only read x
  switch (f) {
    case F::kFp32:
      std::memcpy(buf.values.ptr<float>() + base, x, m * sizeof(float));
      return;
    case F::kBf16: {
      uint16_t* v = buf.values.ptr<uint16_t>() + base;
      for (int64_t i = 0; i < m; ++i) v[i] = f32_to_bf16(x[i]);
      return;
    }
    case F::kFp16: {
      uint16_t* v = buf.values.ptr<uint16_t>() + base;
      for (int64_t i = 0; i < m; ++i) v[i] = codec::f16_rne(x[i]);
      return;
    }
    case F::kFp16Sr: {
      // The slot's state is one SR row: element index e = (h * rows + r) * n + c = base - slot
      // offset + i; words come four at a time from one Philox block.
      uint16_t* v = buf.values.ptr<uint16_t>() + base;
      const uint64_t first = static_cast<uint64_t>(h * m);
      codec::Philox4 w{};
      uint64_t block = ~uint64_t{0};
      for (int64_t i = 0; i < m; ++i) {
        const uint64_t e = first + static_cast<uint64_t>(i);
        if ((e >> 2) != block) {
          block = e >> 2;
          w = codec::sr_block(sr.seed, static_cast<uint32_t>(slot), sr.step, block);
        }
        v[i] = codec::f16_sr(x[i], codec::philox_word(w, static_cast<int>(e & 3)));
      }
      return;
    }
    case F::kFp8:
      codecs::fp8_encode(make_view(xin, DType::kF32, {g.rows, g.n}), fp8_view(buf, g, slot, h));
      return;
    case F::kNvfp4:
      codecs::nvfp4_encode(make_view(xin, DType::kF32, {g.rows, g.n}), nvfp4_view(buf, g, slot, h));
      return;
  }
}

void store_split_head(const StateMode& mode, const StateBuffer& ckpt, const StateBuffer& read,
                      const Geo& g, int64_t slot, int64_t h, float* x, SrDraw sr,
                      int32_t ring_L) {
  encode_head(mode.recurrence, ckpt, g, slot, h, x, sr);
  if (!mode.has_read_copy() || ring_L == 1) return;
  if (mode.recurrence != F::kFp32) decode_head(mode.recurrence, ckpt, g, slot, h, x);
  encode_head(mode.read, read, g, slot, h, x, sr);
}

void zero_slot(StateFormat f, const StateBuffer& buf, const Geo& g, int64_t slot) {
  const int64_t m = g.heads * g.head_elems();
  const int64_t vbytes = f == F::kFp32 ? 4 * m : f == F::kFp8 ? m : f == F::kNvfp4 ? m / 2 : 2 * m;
  std::memset(static_cast<uint8_t*>(buf.values.data) + slot * vbytes, 0, vbytes);
  if (f == F::kFp8)
    std::memset(buf.scales.rows.ptr<float>() + slot * g.heads * g.rows, 0, g.heads * g.rows * 4);
  if (f == F::kNvfp4) {
    std::memset(buf.scales.blocks.ptr<uint8_t>() + slot * m / 16, 0, m / 16);
    std::memset(buf.scales.global.ptr<float>() + slot * g.heads, 0, g.heads * 4);
  }
}

SrDraw sr_draw(const SrKeys& keys, int64_t slot) {
  return SrDraw{static_cast<uint64_t>(keys.seeds.ptr<const int64_t>()[slot]),
                static_cast<uint32_t>(keys.steps.ptr<const int32_t>()[slot])};
}

void sr_advance(const SrKeys& keys, int64_t slot) {
  int32_t& s = keys.steps.ptr<int32_t>()[slot];
  s = static_cast<int32_t>(static_cast<uint32_t>(s) + 1u);
}

void sr_reset(const SrKeys& keys, int64_t slot) { keys.steps.ptr<int32_t>()[slot] = 0; }

}  // namespace replayssm::cpu::state_io
