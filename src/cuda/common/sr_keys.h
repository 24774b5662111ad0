// The stochastic-rounding keys of a pool as kernel parameters (precision.h SrKeys): plain data,
// usable from host and device code. Kernels that write a float16 checkpoint round it
// stochastically when `seeds` is set (sr_store.cuh), else to nearest even.
#pragma once
#include <cstdint>

namespace replayssm::cuda {

struct SrKeysDev {
  const int64_t* seeds = nullptr;  ///< [slots] the slot's seed; null: no stochastic rounding
  const int32_t* steps = nullptr;  ///< [slots] the slot's SR writes so far (this write's step)
};

}  // namespace replayssm::cuda
