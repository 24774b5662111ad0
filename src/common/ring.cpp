// Ring configuration checks and the host (CPU) implementation of commit/reset.
#include "replayssm/ring.h"

#include <string>

#include "replayssm/errors.h"
#include "validate.h"
#ifdef RSSM_WITH_CUDA
#include "cuda/common/ring_device.h"
#endif

namespace replayssm {

const char* ring_mode_name(RingMode m) {
  return m == RingMode::kDecode ? "decode" : "speculative";
}

void RingConfig::validate() const {
  check<ConfigError>(T >= 1 && T <= 8, "ring: T = ", T, ", expected 1 <= T <= 8");
  check<ConfigError>(L >= 1 && L <= 1024, "ring: L = ", L, ", expected 1 <= L <= 1024");
  if (mode == RingMode::kDecode) {
    check<ConfigError>(T == 1, "ring: decode mode needs T = 1, got T = ", T,
                       " (use speculative mode for verify steps)");
  } else {
    check<ConfigError>(L >= 2 * T, "ring: L = ", L, " < 2T = ", 2 * T,
                       " (speculative mode needs room for T records after an early flush)");
  }
}

namespace {

Cursor load(const RingCursors& c, int32_t slot) {
  return Cursor{c.origin.ptr<int32_t>()[slot], c.h.ptr<int32_t>()[slot],
                c.is_flush.ptr<int8_t>()[slot] != 0};
}

void store(const RingCursors& c, int32_t slot, const Cursor& v) {
  c.origin.ptr<int32_t>()[slot] = v.origin;
  c.h.ptr<int32_t>()[slot] = v.h;
  c.is_flush.ptr<int8_t>()[slot] = v.is_flush ? 1 : 0;
}

void require_cpu(const RingCursors& c, const char* op) {
  check<UnsupportedError>(c.h.device == Device::kCPU, op,
                          ": cursors on CUDA are not supported by this build yet");
}

}  // namespace

void commit(RingCursors& cursors, const Rows& rows, const TensorView& num_accepted) {
  const char* op = "ring.commit";
#ifdef RSSM_WITH_CUDA
  if (cursors.h.device == Device::kCUDA) return cuda::ring_commit(cursors, rows, num_accepted);
#endif
  require_cpu(cursors, op);
  const int64_t slots = cursors.h.shape[0];
  validate::cursors(cursors, slots, cursors.config.mode, Device::kCPU, op);
  const int64_t batch = rows.slot_ids.shape[0];
  const std::vector<int32_t> ids = validate::slot_ids(rows, batch, slots, op);
  const std::vector<int32_t> fed = validate::num_tokens(rows, ids, cursors.config.T, op);
  validate::expect(num_accepted, "ring.commit num_accepted", {batch}, {DType::kI32}, Device::kCPU);
  const int32_t* n = num_accepted.ptr<int32_t>();
  // Validate every row before touching any cursor: an error leaves all cursors as they were.
  for (int64_t b = 0; b < batch; ++b) {
    if (ids[b] == rows.pad_slot_id) continue;
    check<SlotError>(n[b] >= 1 && n[b] <= fed[b], op, ": num_accepted[", b, "] = ", n[b],
                     ", expected 1..", fed[b], " (tokens fed to that row)");
    // The cursor the step ran with must have addressed the ring (as the ops require).
    const int32_t s = ids[b], R = cursors.config.rows();
    const int32_t origin = cursors.origin.ptr<int32_t>()[s], h = cursors.h.ptr<int32_t>()[s];
    const int8_t f = cursors.is_flush.ptr<int8_t>()[s];
    check<SlotError>(origin >= 0 && origin < R, op, ": cursors.origin[", s, "] = ", origin,
                     ", expected 0..", R - 1);
    check<SlotError>(h >= 0 && h <= R - fed[b], op, ": cursors.h[", s, "] = ", h, ", expected 0..",
                     R - fed[b], " (room for the ", fed[b], " record(s) fed)");
    check<SlotError>(f == 0 || f == 1, op, ": cursors.is_flush[", s, "] = ", int(f),
                     ", expected 0 or 1");
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (ids[b] == rows.pad_slot_id) continue;
    store(cursors, ids[b], commit_cursor(load(cursors, ids[b]), n[b], cursors.config));
  }
}

void reset(RingCursors& cursors, const Rows& rows) {
  const char* op = "ring.reset";
#ifdef RSSM_WITH_CUDA
  if (cursors.h.device == Device::kCUDA) return cuda::ring_reset(cursors, rows);
#endif
  require_cpu(cursors, op);
  const int64_t slots = cursors.h.shape[0];
  validate::cursors(cursors, slots, cursors.config.mode, Device::kCPU, op);
  const std::vector<int32_t> ids = validate::slot_ids(rows, rows.slot_ids.shape[0], slots, op);
  for (int32_t s : ids)
    if (s != rows.pad_slot_id) store(cursors, s, reset_cursor(cursors.config));
}

}  // namespace replayssm
