// State precision modes: names, parsing and byte counts (include/replayssm/precision.h).
#include "replayssm/precision.h"

#include <string>

namespace replayssm {
namespace {

using F = StateFormat;

constexpr StateMode split(F rec, F read) { return StateMode{rec, read, false}; }
constexpr StateMode shared(F f) { return StateMode{f, f, true}; }

}  // namespace

const char* state_format_name(StateFormat f) {
  switch (f) {
    case F::kFp32: return "fp32";
    case F::kBf16: return "bf16";
    case F::kFp16: return "fp16";
    case F::kFp16Sr: return "fp16sr";
    case F::kFp8: return "fp8";
    case F::kNvfp4: return "nvfp4";
  }
  return "?";
}

std::string StateMode::name() const {
  if (shared) return std::string("shared-") + state_format_name(read);
  return std::string(state_format_name(recurrence)) + "/" + state_format_name(read);
}

const std::vector<StateMode>& state_modes() {
  static const std::vector<StateMode> modes = {
      split(F::kFp32, F::kFp32),     split(F::kFp32, F::kBf16),  split(F::kFp32, F::kFp16),
      split(F::kFp16Sr, F::kFp16Sr), split(F::kFp32, F::kNvfp4), split(F::kFp16Sr, F::kNvfp4),
      split(F::kFp8, F::kNvfp4),     split(F::kFp32, F::kFp8),   shared(F::kFp16),
      shared(F::kBf16),              shared(F::kFp8),            shared(F::kNvfp4)};
  return modes;
}

StateMode parse_state_mode(std::string_view name) {
  if (name == "fp32") return StateMode{};
  std::string valid;
  for (const StateMode& m : state_modes()) {
    const std::string n = m.name();
    if (n == name) return m;
    valid += (valid.empty() ? "" : ", ") + n;
  }
  throw ConfigError("state mode '" + std::string(name) +
                    "' is not a supported mode, expected fp32 or one of " + valid);
}

int64_t state_format_bytes(StateFormat f, int64_t heads, int64_t rows, int64_t n) {
  const int64_t elems = heads * rows * n;
  switch (f) {
    case F::kFp32: return 4 * elems;
    case F::kBf16: case F::kFp16: case F::kFp16Sr: return 2 * elems;
    case F::kFp8: return elems + 4 * heads * rows;                    // codes + row scales
    case F::kNvfp4: return elems / 2 + elems / 16 + 4 * heads;        // codes + blocks + global
  }
  return 0;
}

StateBytes state_bytes(const StateMode& mode, int64_t heads, int64_t rows, int64_t n) {
  StateBytes b;
  b.checkpoint = state_format_bytes(mode.state_format(), heads, rows, n);
  if (mode.has_read_copy()) b.read_copy = state_format_bytes(mode.read, heads, rows, n);
  if (mode.uses_sr()) b.sr_keys = 8 + 4;
  return b;
}

}  // namespace replayssm
