// StateEmulation (state_emulation.h): which rounding passes each emulated mode runs around the
// library's step.
#include "cuda/state_emulation.h"

#include <vector>

#include "cuda/launch_check.h"
#include "model/checks.h"
#include "model/state_store.h"

namespace replayssm::engine::cuda {

using F = StateFormat;

StateEmulation::StateEmulation(const StateMode& mode, SsmFamilyKind family, DeviceArena& arena,
                               int64_t slots, int64_t heads, int64_t rows, int64_t n,
                               int64_t layer)
    : active_(!cuda_mode_native(mode)),
      mode_(mode),
      family_(family),
      slots_(slots),
      heads_(heads),
      rows_(rows),
      n_(n) {
  if (!active_) return;
  if (mode.is_split() && family == SsmFamilyKind::kMamba2)
    master_ = arena.alloc_n<float>(slots * heads * rows * n);
  if (mode.uses_sr()) {
    const SrKeys keys = alloc_sr_keys(arena, slots, layer);
    seeds_ = keys.seeds.ptr<int64_t>();
    steps_ = keys.steps.ptr<int32_t>();
  }
}

SrKeys alloc_sr_keys(DeviceArena& a, int64_t S, int64_t layer) {
  std::vector<int64_t> seeds(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) seeds[static_cast<size_t>(s)] = sr_seed(layer, s);
  int64_t* d_seeds = a.alloc_n<int64_t>(S);
  int32_t* d_steps = a.alloc_n<int32_t>(S);
  check_cuda(cudaMemcpy(d_seeds, seeds.data(), seeds.size() * sizeof(int64_t),
                        cudaMemcpyHostToDevice),
             "upload SR seeds");
  check_cuda(cudaMemset(d_steps, 0, static_cast<size_t>(S) * sizeof(int32_t)), "zero SR steps");
  return SrKeys{device_view(d_seeds, DType::kI64, {S}), device_view(d_steps, DType::kI32, {S})};
}

StateMode StateEmulation::library_mode() const {
  if (!active_) return mode_;
  if (mode_.is_split() && family_ == SsmFamilyKind::kGdn) return StateMode{F::kFp32, F::kFp16, false};
  return StateMode{};
}

SlotRounding StateEmulation::pass(const float* src, float* dst, uint16_t* dst16, StateFormat f,
                                  const int32_t* slot_ids, int64_t batch, const int8_t* mask) const {
  SlotRounding p;
  p.src = src, p.dst = dst, p.dst16 = dst16, p.format = f;
  p.slot_ids = slot_ids, p.batch = batch, p.num_slots = static_cast<int32_t>(slots_);
  p.only_flush = mask;
  p.heads = heads_, p.rows = rows_, p.n = n_;
  p.sr_seeds = seeds_, p.sr_steps = steps_;
  return p;
}

void StateEmulation::before_step(float* state, const int32_t* slot_ids, int64_t batch,
                                 const int8_t* is_flush, cudaStream_t s) const {
  if (!master_) return;  // only the Mamba-2 split modes swap the checkpoint in
  round_slots(pass(master_, state, nullptr, F::kFp32, slot_ids, batch, is_flush), s);
}

void StateEmulation::after_step(float* state, uint16_t* copy16, const int32_t* slot_ids,
                                int64_t batch, const int8_t* is_flush, cudaStream_t s) const {
  if (!active_) return;
  if (mode_.shared) {  // the one low-precision state, re-encoded every step
    round_slots(pass(state, state, nullptr, mode_.read, slot_ids, batch, nullptr), s);
    return;
  }
  // (Every emulated split mode has a read copy of its own: fp16sr/fp16sr runs natively.)
  if (family_ == SsmFamilyKind::kMamba2) {
    // state holds the flushed slots' new fp32 state: the checkpoint first, then what ordinary
    // rows read, derived from the checkpoint as stored (precision.h).
    round_slots(pass(state, master_, nullptr, mode_.recurrence, slot_ids, batch, is_flush), s);
    round_slots(pass(master_, state, nullptr, mode_.read, slot_ids, batch, is_flush), s);
    return;
  }
  // GDN: the checkpoint in its own format, then the copy from it.
  if (mode_.recurrence != F::kFp32)
    round_slots(pass(state, state, nullptr, mode_.recurrence, slot_ids, batch, is_flush), s);
  round_slots(pass(state, nullptr, copy16, mode_.read, slot_ids, batch, is_flush), s);
}

void StateEmulation::reset(const int32_t* slot_ids, int64_t batch, cudaStream_t s) const {
  const int32_t S = static_cast<int32_t>(slots_);
  if (master_)
    zero_slot_rows(master_, heads_ * rows_ * n_ * static_cast<int64_t>(sizeof(float)), slot_ids,
                   batch, S, s);
  if (steps_) zero_slot_rows(steps_, sizeof(int32_t), slot_ids, batch, S, s);
}

}  // namespace replayssm::engine::cuda
