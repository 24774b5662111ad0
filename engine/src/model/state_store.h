// Host memory of one SSM layer's state precision mode (precision.h, issue 6): the checkpoint in
// the recurrence format with its scales, the read copy with its scales, and the stochastic-rounding
// keys. fp32/fp32 allocates nothing here (the mixer's float32 state is used as before).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "replayssm/precision.h"
#include "replayssm/tensor.h"

namespace replayssm::engine {

/// The mode a ModelOptions::state name selects on the CPU engine: "fp32" (and the CUDA-only
/// 16-bit names "bf16" / "fp16") -> fp32/fp32, otherwise parse_state_mode (ConfigError naming an
/// unknown name).
StateMode engine_state_mode(const std::string& name);

/// A [slots, heads, rows, n] buffer of one format: values and scales (precision.h's table).
class FormatStore {
 public:
  void allocate(StateFormat f, int64_t slots, int64_t heads, int64_t rows, int64_t n);
  StateBuffer buffer();

 private:
  StateFormat f_ = StateFormat::kFp32;
  int64_t slots_ = 0, heads_ = 0, rows_ = 0, n_ = 0;
  std::vector<uint64_t> values_;  ///< raw bytes, 8-byte aligned
  std::vector<float> row_scales_, global_;
  std::vector<uint8_t> blocks_;
};

/// Everything a non-default mode adds to a layer's cache.
struct ModeStore {
  StateMode mode;
  FormatStore state, read;
  std::vector<int64_t> seeds;
  std::vector<int32_t> steps;
  /// Allocates for `mode` (nothing for fp32/fp32). SR seeds are drawn per (layer, slot) from
  /// `layer` so that no two layers or slots share random bits.
  void allocate(const StateMode& m, int64_t slots, int64_t heads, int64_t rows, int64_t n,
                int64_t layer);
  StateBuffer state_buffer() { return state.buffer(); }
  StateBuffer read_buffer() { return mode.has_read_copy() ? read.buffer() : StateBuffer{}; }
  SrKeys sr();
  /// Points a layer cache (mamba2::Cache or gdn::Cache) at this store for its mode; outside
  /// fp32/fp32 the mixer's own float32 state is released (the store holds the state then).
  template <class Cache>
  void bind(Cache& cache, std::vector<float>& fp32_state) {
    cache.mode = mode;
    if (mode.is_default()) return;
    fp32_state.clear();
    fp32_state.shrink_to_fit();
    const StateBuffer st = state_buffer();
    cache.state = st.values;
    cache.state_scales = st.scales;
    cache.read = read_buffer();
    cache.sr = sr();
  }
};

/// The SR seed of (layer, slot): splitmix64 of both, as int64.
int64_t sr_seed(int64_t layer, int64_t slot);

}  // namespace replayssm::engine
