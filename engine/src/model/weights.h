// Loading float32 parameters from a checkpoint with their expected shapes.
#pragma once
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "replayssm/engine/checkpoint.h"

namespace replayssm::engine {

/// nn.Linear weight `name` [out, in] (+ `bias_name` [out] when with_bias).
cpu::Linear load_linear(const Checkpoint& ck, const std::string& name, int64_t out, int64_t in,
                        bool with_bias = false);
/// A depthwise conv1d weight [C, 1, k] stored as [C, k].
std::vector<float> load_conv(const Checkpoint& ck, const std::string& name, int64_t C, int64_t k);

}  // namespace replayssm::engine
