// Test support for state precision modes (precision.h): guarded buffers of a [slots, heads, rows, n]
// state in any StateFormat, their float32 decoding through the public codecs, and per-format
// tolerances. Shared by the Mamba-2 and GDN/KDA mode tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/codec_math.h"
#include "replayssm/codecs.h"
#include "replayssm/precision.h"
#include "replayssm_ref.h"
#include "test_util.h"

namespace replayssm::testing::modes {

using ref::Vec;

/// One state buffer of a format, every tensor guarded; filled with garbage until reset.
struct FormatBuffer {
  StateFormat f;
  int64_t slots, heads, rows, n;
  GuardedBuffer values, row_scales, blocks, global;
  FormatBuffer(StateFormat f_, int64_t slots_, int64_t heads_, int64_t rows_, int64_t n_, uint64_t seed)
      : f(f_), slots(slots_), heads(heads_), rows(rows_), n(n_),
        values(dtype_of(f_), {slots_, heads_, rows_, f_ == StateFormat::kNvfp4 ? n_ / 2 : n_}, seed),
        row_scales(DType::kF32, {slots_, heads_, rows_}, seed + 1),
        blocks(DType::kU8, {slots_, heads_, rows_, std::max<int64_t>(n_ / 16, 1)}, seed + 2),
        global(DType::kF32, {slots_, heads_}, seed + 3) {}
  static DType dtype_of(StateFormat f) {
    switch (f) {
      case StateFormat::kFp32: return DType::kF32;
      case StateFormat::kBf16: return DType::kBF16;
      case StateFormat::kFp16: case StateFormat::kFp16Sr: return DType::kF16;
      default: return DType::kU8;
    }
  }
  TensorView view() const { return values.view(); }
  StateScales scales() const {
    StateScales s;
    if (f == StateFormat::kFp8) s.rows = row_scales.view();
    if (f == StateFormat::kNvfp4) s.blocks = blocks.view(), s.global = global.view();
    return s;
  }
  StateBuffer buffer() const { return StateBuffer{view(), scales()}; }
  /// Every byte of the values and scales, in that order.
  std::vector<uint8_t> all_bytes() const {
    std::vector<uint8_t> out;
    for (const GuardedBuffer* g : {&values, &row_scales, &blocks, &global}) {
      const std::vector<uint8_t> p = g->payload();
      out.insert(out.end(), p.begin(), p.end());
    }
    return out;
  }
  /// Fills the values and scales with random bytes (a copy nobody should write keeps them).
  void poison(Rng& rng) {
    for (GuardedBuffer* g : {&values, &row_scales, &blocks, &global}) {
      const size_t bytes = g->payload().size();
      for (size_t i = 0; i < bytes; ++i) g->data<uint8_t>()[i] = static_cast<uint8_t>(rng.integer(0, 255));
    }
  }
  /// The slot's state decoded to float (through the public codecs / codec_math), [heads*rows*n].
  std::vector<float> decode(int64_t slot) const {
    const int64_t m = heads * rows * n;
    std::vector<float> out(m);
    const int64_t hr = heads * rows;
    switch (f) {
      case StateFormat::kFp32:
        std::memcpy(out.data(), values.data<float>() + slot * m, m * 4);
        break;
      case StateFormat::kBf16:
        for (int64_t i = 0; i < m; ++i) out[i] = bf16_to_f32(values.data<uint16_t>()[slot * m + i]);
        break;
      case StateFormat::kFp16: case StateFormat::kFp16Sr:
        for (int64_t i = 0; i < m; ++i) out[i] = codec::f16_decode(values.data<uint16_t>()[slot * m + i]);
        break;
      case StateFormat::kFp8: {
        codecs::Fp8Rows q{make_view(const_cast<uint8_t*>(values.data<uint8_t>()) + slot * m, DType::kU8, {hr, n}),
                          make_view(const_cast<float*>(row_scales.data<float>()) + slot * hr, DType::kF32, {hr})};
        codecs::fp8_decode(q, make_view(out.data(), DType::kF32, {hr, n}));
        break;
      }
      case StateFormat::kNvfp4: {
        codecs::Nvfp4 q{make_view(const_cast<uint8_t*>(values.data<uint8_t>()) + slot * m / 2, DType::kU8, {hr, n / 2}),
                        make_view(const_cast<uint8_t*>(blocks.data<uint8_t>()) + slot * m / 16, DType::kU8, {hr, n / 16}),
                        make_view(const_cast<float*>(global.data<float>()) + slot * heads, DType::kF32, {heads}), rows};
        codecs::nvfp4_decode(q, make_view(out.data(), DType::kF32, {hr, n}));
        break;
      }
    }
    return out;
  }
  /// Encodes x [heads*rows*n] into the slot (through the public codecs / codec_math; the 16-bit
  /// formats round to nearest even: kFp16Sr is not encoded here).
  void encode(int64_t slot, std::vector<float> x) {
    const int64_t m = heads * rows * n, hr = heads * rows;
    switch (f) {
      case StateFormat::kFp32:
        std::memcpy(values.data<float>() + slot * m, x.data(), m * 4);
        break;
      case StateFormat::kBf16:
        for (int64_t i = 0; i < m; ++i) values.data<uint16_t>()[slot * m + i] = f32_to_bf16(x[i]);
        break;
      case StateFormat::kFp16:
        for (int64_t i = 0; i < m; ++i) values.data<uint16_t>()[slot * m + i] = codec::f16_rne(x[i]);
        break;
      case StateFormat::kFp16Sr:
        ADD_FAILURE() << "FormatBuffer::encode: fp16sr (stochastic rounding) is not encoded here";
        break;
      case StateFormat::kFp8:
        codecs::fp8_encode(make_view(x.data(), DType::kF32, {hr, n}),
                           codecs::Fp8Rows{make_view(values.data<uint8_t>() + slot * m, DType::kU8, {hr, n}),
                                           make_view(row_scales.data<float>() + slot * hr, DType::kF32, {hr})});
        break;
      case StateFormat::kNvfp4:
        codecs::nvfp4_encode(make_view(x.data(), DType::kF32, {hr, n}),
                             codecs::Nvfp4{make_view(values.data<uint8_t>() + slot * m / 2, DType::kU8, {hr, n / 2}),
                                           make_view(blocks.data<uint8_t>() + slot * m / 16, DType::kU8, {hr, n / 16}),
                                           make_view(global.data<float>() + slot * heads, DType::kF32, {heads}), rows});
        break;
    }
  }
  /// The slot's bytes of every tensor (used_only: only those the format uses).
  std::vector<uint8_t> slot_bytes(int64_t slot, bool used_only = false) const {
    std::vector<uint8_t> out;
    for (const GuardedBuffer* b : {&values, &row_scales, &blocks, &global}) {
      if (used_only && b != &values &&
          !(f == StateFormat::kFp8 && b == &row_scales) &&
          !(f == StateFormat::kNvfp4 && (b == &blocks || b == &global)))
        continue;
      const auto p = b->payload();
      const size_t per = p.size() / slots;
      out.insert(out.end(), p.begin() + slot * per, p.begin() + (slot + 1) * per);
    }
    return out;
  }
  bool guards_intact() const {
    return values.guards_intact() && row_scales.guards_intact() && blocks.guards_intact() &&
           global.guards_intact();
  }
};

/// Everything a mode adds to a cache: the state (mode.state_format()), the read copy, SR keys.
struct ModeBuffers {
  StateMode mode;
  FormatBuffer state, read;
  GuardedBuffer seeds, steps;
  ModeBuffers(const StateMode& m, int64_t slots, int64_t heads, int64_t rows, int64_t n, uint64_t seed)
      : mode(m), state(m.state_format(), slots, heads, rows, n, seed),
        read(m.has_read_copy() ? m.read : StateFormat::kFp32, slots, heads, rows, n, seed + 10),
        seeds(DType::kI64, {slots}, seed + 20), steps(DType::kI32, {slots}, seed + 21) {
    for (int64_t s = 0; s < slots; ++s) seeds.data<int64_t>()[s] = static_cast<int64_t>(seed * 1000 + 17 * s);
  }
  StateBuffer read_buffer() const { return mode.has_read_copy() ? read.buffer() : StateBuffer{}; }
  SrKeys sr() const { return mode.uses_sr() ? SrKeys{seeds.view(), steps.view()} : SrKeys{}; }
  /// The decoded read copy ordinary steps see (fp16sr/fp16sr: the checkpoint).
  std::vector<float> read_of(int64_t slot) const {
    return mode.has_read_copy() ? read.decode(slot) : state.decode(slot);
  }
  std::vector<uint8_t> slot_bytes(int64_t slot) const {
    std::vector<uint8_t> out = state.slot_bytes(slot), r = read.slot_bytes(slot);
    out.insert(out.end(), r.begin(), r.end());
    out.push_back(static_cast<uint8_t>(steps.data<int32_t>()[slot]));
    return out;
  }
  bool guards_intact() const {
    return state.guards_intact() && read.guards_intact() && seeds.guards_intact() && steps.guards_intact();
  }
};

/// "" when a slot's read copy holds exactly the encoding of its checkpoint as stored (precision.h:
/// a flush derives the copy from the checkpoint it wrote), else a message.
inline std::string copy_of_checkpoint(const ModeBuffers& mb, int64_t slot) {
  FormatBuffer again(mb.mode.read, 1, mb.read.heads, mb.read.rows, mb.read.n, 0);
  again.encode(0, mb.state.decode(slot));
  if (again.slot_bytes(0, true) == mb.read.slot_bytes(slot, true)) return "";
  return "read copy of slot " + std::to_string(slot) + " is not the " +
         state_format_name(mb.mode.read) + " encoding of its checkpoint";
}

inline Vec to_vec(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

/// Tolerance, relative to the head's largest magnitude, of two encodings of nearly the same
/// float state (float32 vs float64 folds): one quantum of the format, generously.
inline double format_tol(StateFormat f) {
  switch (f) {
    case StateFormat::kFp32: return 5e-5;
    case StateFormat::kBf16: return 0x1p-7;
    case StateFormat::kFp16: case StateFormat::kFp16Sr: return 0x1p-9;
    case StateFormat::kFp8: return 0x1p-3;
    case StateFormat::kNvfp4: return 0.35;
  }
  return 0;
}

/// "" when |a - b| <= tol * max|b| within each head of `per` elements, else a message.
inline std::string per_head_close(const Vec& a, const Vec& b, int64_t per, double tol) {
  for (size_t h0 = 0; h0 < b.size(); h0 += per) {
    double m = 1e-30;
    for (int64_t i = 0; i < per; ++i) m = std::max(m, std::abs(b[h0 + i]));
    for (int64_t i = 0; i < per; ++i) {
      const double d = std::abs(a[h0 + i] - b[h0 + i]);
      if (!(d <= tol * m + 1e-30))
        return "element " + std::to_string(h0 + i) + ": " + std::to_string(a[h0 + i]) + " vs " +
               std::to_string(b[h0 + i]) + " (head max " + std::to_string(m) + ", tol " +
               std::to_string(tol) + ")";
    }
  }
  return "";
}

}  // namespace replayssm::testing::modes
