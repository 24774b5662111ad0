#include "io/random_weights.h"

#include <cmath>

namespace replayssm::engine {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// What kind of value a tensor holds, from its Hugging Face name (models.md §2).
enum class Kind { kZero, kOne, kALog, kDtBias, kNormOne, kNormZero, kFanIn };

Kind kind_of(const std::string& name, bool qwen_norm) {
  if (ends_with(name, ".bias") || ends_with(name, "e_score_correction_bias")) return Kind::kZero;
  if (ends_with(name, ".A_log")) return Kind::kALog;
  if (ends_with(name, ".dt_bias")) return Kind::kDtBias;
  if (ends_with(name, ".D")) return Kind::kOne;
  if (ends_with(name, "norm.weight") || ends_with(name, "norm_f.weight") ||
      ends_with(name, "layernorm.weight"))
    return qwen_norm && name.find("linear_attn.norm") == std::string::npos ? Kind::kNormZero
                                                                           : Kind::kNormOne;
  return Kind::kFanIn;
}

}  // namespace

bool random_has(const std::string& name) {
  return !ends_with(name, "experts.gate_up_proj") && !ends_with(name, "experts.down_proj");
}

std::vector<float> random_tensor(const std::string& name, const std::vector<int64_t>& shape,
                                 uint64_t seed, bool qwen_norm) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  const int64_t fan_in = shape.empty() ? 1 : shape.back();
  const Kind kind = kind_of(name, qwen_norm);
  const uint64_t key = splitmix64(seed ^ fnv1a(name));
  // Uniform with std 1/sqrt(fan-in) (the last axis: a linear's `in`, an embedding's width, a
  // depthwise conv's taps): activations keep their scale from layer to layer.
  const float half_width = static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)));
  std::vector<float> out(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(splitmix64(key + static_cast<uint64_t>(i)) >> 11) *
                     (1.0 / 9007199254740992.0);  // [0, 1)
    double v = 0.0;
    switch (kind) {
      case Kind::kZero: v = 0.0; break;
      case Kind::kOne: v = 1.0; break;
      case Kind::kALog: v = std::log(1.0 + 15.0 * u); break;  // A = -exp(A_log) in [-16, -1]
      case Kind::kDtBias: {  // softplus(dt_bias) = dt, log-uniform in [0.001, 0.1]
        const double dt = std::exp(std::log(1e-3) + u * (std::log(1e-1) - std::log(1e-3)));
        v = dt + std::log(-std::expm1(-dt));
        break;
      }
      case Kind::kNormOne: v = 0.95 + 0.1 * u; break;
      case Kind::kNormZero: v = -0.05 + 0.1 * u; break;
      case Kind::kFanIn: v = half_width * (2.0 * u - 1.0); break;
    }
    out[static_cast<size_t>(i)] = static_cast<float>(v);
  }
  return out;
}

}  // namespace replayssm::engine
