#include "slot_pool.h"

#include <algorithm>
#include <numeric>

namespace replayssm::bench {
namespace {
constexpr DType kI32 = DType::kI32, kI8 = DType::kI8;
}  // namespace

TensorView device_view(const DeviceMemory& m, int64_t offset_bytes, DType t,
                       std::initializer_list<int64_t> shape) {
  return make_view(static_cast<char*>(m.get()) + offset_bytes, t, shape, Device::kCUDA);
}

SlotPool::SlotPool(int64_t batch, int calls, std::mt19937_64& rng, cudaStream_t stream,
                   bool dense)
    : batch_(batch), calls_(calls), slots_(batch * calls), rng_(rng), stream_(stream) {
  // Slot ids: a random permutation of the pool (or the identity), call r takes the r-th run of
  // `batch` of them. Dense runs draw the permutation too, so that the cursors drawn after it are
  // those of a random run with the same seed.
  std::vector<int32_t> perm(static_cast<size_t>(slots_));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int32_t> drawn = perm;
  std::shuffle(drawn.begin(), drawn.end(), rng_);
  if (!dense) perm = std::move(drawn);
  ids_ = DeviceMemory(nbytes(slots_, kI32));
  upload(ids_, perm, stream);
  ones_ = DeviceMemory(nbytes(slots_, kI32));
  upload(ones_, std::vector<int32_t>(static_cast<size_t>(slots_), 1), stream);
  origin_ = DeviceMemory(nbytes(slots_, kI32));
  h_ = DeviceMemory(nbytes(slots_, kI32));
  flush_ = DeviceMemory(nbytes(slots_, kI8));
}

void SlotPool::set_L(int L) {
  L_ = L;
  set_cursors_fixed(0);
}

void SlotPool::upload_cursors(const std::vector<int32_t>& h) {
  if (L_ < 1) throw BenchError("SlotPool: set the ring before setting cursors");
  std::uniform_int_distribution<int32_t> uorigin(0, L_ - 1);
  std::vector<int32_t> origin(h.size());
  std::vector<int8_t> flush(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    if (h[i] < 0 || h[i] > L_ - 1) throw BenchError("SlotPool: cursor h out of 0..L-1");
    origin[i] = uorigin(rng_);
    // The decode-mode rule of ring.h with T = 1: a row flushes when h + 2 > L.
    flush[i] = h[i] + 2 > L_ ? 1 : 0;
  }
  upload(origin_, origin, stream_);
  upload(h_, h, stream_);
  upload(flush_, flush, stream_);
}

void SlotPool::set_cursors_fixed(int h) {
  upload_cursors(std::vector<int32_t>(static_cast<size_t>(slots_), h));
}

void SlotPool::set_cursors_mixed() {
  std::vector<int32_t> h(static_cast<size_t>(slots_));
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int32_t>(i % static_cast<size_t>(L_));
  std::shuffle(h.begin(), h.end(), rng_);
  upload_cursors(h);
}

Rows SlotPool::rows(int r, cudaStream_t s) const {
  Rows rows;
  rows.slot_ids = device_view(ids_, static_cast<int64_t>(r) * batch_ * 4, kI32, {batch_});
  rows.pad_slot_id = -1;
  rows.stream = s;
  rows.check_device_ids = false;  // ids are a permutation by construction; no host round trip
  return rows;
}

RingCursors SlotPool::cursors() const {
  RingCursors c;
  c.origin = device_view(origin_, 0, kI32, {slots_});
  c.h = device_view(h_, 0, kI32, {slots_});
  c.is_flush = device_view(flush_, 0, kI8, {slots_});
  c.config = RingConfig{L_, 1, RingMode::kDecode};
  return c;
}

void SlotPool::commit_all(cudaStream_t s) const {
  Rows all;
  all.slot_ids = device_view(ids_, 0, kI32, {slots_});
  all.pad_slot_id = -1;
  all.stream = s;
  all.check_device_ids = false;
  const TensorView accepted = device_view(ones_, 0, kI32, {slots_});
  RingCursors c = cursors();
  replayssm::commit(c, all, accepted);
}

}  // namespace replayssm::bench
