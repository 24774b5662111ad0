// Loads and stores of one (slot, head) of a state buffer in any StateFormat (precision.h), shared
// by the Mamba-2 and GDN/KDA CPU backends. Every conversion is the codecs' own: nvfp4 and fp8 go
// through codecs::nvfp4_encode/decode and fp8_encode/decode on views of the head, float16
// through codec_math.h (f16_rne, f16_sr with the Philox words of sr_block), bfloat16 through
// dtype.h. Arguments were validated by the host API; nothing here checks or throws.
#pragma once
#include <cstdint>

#include "replayssm/precision.h"

namespace replayssm::cpu::state_io {

/// Geometry of a [slots, heads, rows, n] state buffer.
struct Geo {
  int64_t heads, rows, n;
  int64_t head_elems() const { return rows * n; }
};

/// The stochastic-rounding key of one write: the slot's seed and its current step counter.
struct SrDraw {
  uint64_t seed = 0;
  uint32_t step = 0;
};

/// Decodes head (slot, h) of `buf` (format f) to float32 out[rows * n].
void decode_head(StateFormat f, const StateBuffer& buf, const Geo& g, int64_t slot, int64_t h,
                 float* out);
/// Encodes x[rows * n] into head (slot, h) of `buf`. fp16sr: element (r, c) draws the Philox word
/// of index (h * rows + r) * n + c with key (sr.seed, slot, sr.step) (precision.h).
void encode_head(StateFormat f, const StateBuffer& buf, const Geo& g, int64_t slot, int64_t h,
                 const float* x, SrDraw sr);
/// A split mode's flush store of head (slot, h): encodes x into the checkpoint `ckpt` (format
/// mode.recurrence), then derives the read copy `read` (mode.read, when the mode has one) from the
/// checkpoint as stored — x is overwritten with the decoded checkpoint first when the recurrence
/// rounds (fp16sr, fp8), so the copy is a function of the checkpoint alone (precision.h).
/// `ring_L` 1 (every step flushes, so no step reads the copy) writes the checkpoint alone, as the
/// CUDA kernels do: encoding a never-read NVFP4 copy every step tripled the CPU step's cost.
void store_split_head(const StateMode& mode, const StateBuffer& ckpt, const StateBuffer& read,
                      const Geo& g, int64_t slot, int64_t h, float* x, SrDraw sr, int32_t ring_L);
/// Sets every value and scale of the slot to zero (decodes to +0).
void zero_slot(StateFormat f, const StateBuffer& buf, const Geo& g, int64_t slot);

/// The SR key of a slot's next write (seed and step counter from `keys`).
SrDraw sr_draw(const SrKeys& keys, int64_t slot);
/// Advances the slot's step counter after an SR write.
void sr_advance(const SrKeys& keys, int64_t slot);
/// Sets the slot's step counter to 0 (reset).
void sr_reset(const SrKeys& keys, int64_t slot);

}  // namespace replayssm::cpu::state_io
