// Host-side validation of the state-mode part of a cache (precision.h): whether an op runs a mode
// on a device, and the tensors of a mode's state buffers. Typed errors name the op, the argument,
// the actual and the expected value, like validate.h.
#pragma once
#include <cstdint>

#include "replayssm/precision.h"
#include "replayssm/tensor.h"

namespace replayssm::validate {

enum class StateOp { kConventional, kReplay, kVerify, kReset };

/// Throws when `op` cannot run `mode` on `device`: UnsupportedError for any mode other than
/// fp32/fp32 on CUDA (kernels not written yet; with cuda_split16, the fp32/bf16, fp32/fp16 and
/// fp16sr/fp16sr replay and reset of the CUDA kernels are allowed, with cuda_quant fp32/fp8,
/// fp32/nvfp4 and fp16sr/nvfp4) and for verify outside fp32/fp32; ConfigError for a split mode in the conventional
/// step or a shared baseline in a replay step.
void state_mode_runs(const StateMode& mode, StateOp op, Device device, const char* op_name,
                     bool cuda_split16 = false, bool cuda_quant = false);

/// Checks one [slots, heads, rows, n] buffer in format f: values (dtype and shape of the format)
/// and the scales the format needs. `name` names the buffer in messages ("state", "read").
void state_buffer(StateFormat f, const TensorView& values, const StateScales& scales, int64_t slots,
                  int64_t heads, int64_t rows, int64_t n, Device device, const char* op,
                  const char* name);

/// Checks everything a non-default mode uses: the state in mode.state_format(), the read copy
/// (has_read_copy()) and the SR keys (uses_sr()); returns the number of slots.
int64_t state_buffers(const StateMode& mode, const TensorView& state, const StateScales& state_scales,
                      const StateBuffer& read, const SrKeys& sr, int64_t heads, int64_t rows,
                      int64_t n, Device device, const char* op);

}  // namespace replayssm::validate
