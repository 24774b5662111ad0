// Validation of state modes and their buffers; see state_check.h.
#include "state_check.h"

#include <string>

#include "replayssm/errors.h"
#include "validate.h"

namespace replayssm::validate {
namespace {

std::string arg(const char* op, const char* name, const char* part) {
  return std::string(op) + " " + name + part;
}

}  // namespace

void state_mode_runs(const StateMode& mode, StateOp op, Device device, const char* op_name,
                     bool cuda_split16, bool cuda_quant) {
  if (mode.is_default()) return;
  const bool fp32 = mode.is_split() && mode.recurrence == StateFormat::kFp32;
  const bool sr16 = mode.is_split() && mode.recurrence == StateFormat::kFp16Sr &&
                    mode.read == StateFormat::kFp16Sr;  // the float16 checkpoint read as it is
  const bool split16 =
      sr16 || (fp32 && (mode.read == StateFormat::kBf16 || mode.read == StateFormat::kFp16));
  const bool quant = (fp32 && (mode.read == StateFormat::kFp8 || mode.read == StateFormat::kNvfp4)) ||
                     (mode.is_split() && mode.recurrence == StateFormat::kFp16Sr &&
                      mode.read == StateFormat::kNvfp4);  // fp16sr/nvfp4
  const bool cuda_ok = ((cuda_split16 && split16) || (cuda_quant && quant)) &&
                       (op == StateOp::kReplay || op == StateOp::kReset);
  check<UnsupportedError>(device != Device::kCUDA || cuda_ok, op_name, ": state mode '",
                          mode.name(),
                          "' is not supported by the CUDA backend yet (it runs fp32/fp32, "
                          "float16/bfloat16 state dtypes and, for replay, fp32/bf16, "
                          "fp32/fp16", cuda_quant ? ", fp16sr/fp16sr, fp32/fp8, fp32/nvfp4 and "
                                                    "fp16sr/nvfp4"
                                                  : " and fp16sr/fp16sr",
                          "); use CPU tensors");
  check<UnsupportedError>(op != StateOp::kVerify, op_name, ": state mode '", mode.name(),
                          "' is not built for verify yet, expected fp32/fp32");
  check<ConfigError>(op != StateOp::kConventional || mode.shared, op_name, ": state mode '",
                     mode.name(),
                     "' is a ReplaySSM split mode, expected fp32/fp32 or a shared-* baseline in "
                     "the conventional step (split modes run through replay_step)");
  check<ConfigError>(op != StateOp::kReplay || !mode.shared, op_name, ": state mode '",
                     mode.name(),
                     "' is a shared baseline, which runs through conventional_step only");
}

void state_buffer(StateFormat f, const TensorView& values, const StateScales& scales, int64_t slots,
                  int64_t heads, int64_t rows, int64_t n, Device device, const char* op,
                  const char* name) {
  const std::string fmt = std::string(" (") + state_format_name(f) + ")";
  const std::string what = arg(op, name, fmt.c_str());
  switch (f) {
    case StateFormat::kFp32:
      expect(values, what.c_str(), {slots, heads, rows, n}, {DType::kF32}, device);
      return;
    case StateFormat::kBf16:
      expect(values, what.c_str(), {slots, heads, rows, n}, {DType::kBF16}, device);
      return;
    case StateFormat::kFp16:
    case StateFormat::kFp16Sr:
      expect(values, what.c_str(), {slots, heads, rows, n}, {DType::kF16}, device);
      return;
    case StateFormat::kFp8:
      expect(values, what.c_str(), {slots, heads, rows, n}, {DType::kU8}, device);
      expect(scales.rows, arg(op, name, " scales.rows (fp8)").c_str(), {slots, heads, rows},
             {DType::kF32}, device);
      return;
    case StateFormat::kNvfp4:
      check<ShapeError>(n % 16 == 0, what, ": row length ", n,
                        ", expected a multiple of 16 (the NVFP4 block)");
      expect(values, what.c_str(), {slots, heads, rows, n / 2}, {DType::kU8}, device);
      expect(scales.blocks, arg(op, name, " scales.blocks (nvfp4)").c_str(),
             {slots, heads, rows, n / 16}, {DType::kU8}, device);
      expect(scales.global, arg(op, name, " scales.global (nvfp4)").c_str(), {slots, heads},
             {DType::kF32}, device);
      return;
  }
}

int64_t state_buffers(const StateMode& mode, const TensorView& state, const StateScales& state_scales,
                      const StateBuffer& read, const SrKeys& sr, int64_t heads, int64_t rows,
                      int64_t n, Device device, const char* op) {
  check<ShapeError>(!state.empty() && state.ndim == 4, op, " state: ",
                    state.empty() ? std::string("missing") : state.describe(),
                    ", expected [slots, ", heads, ", ", rows, ", ...]");
  const int64_t slots = state.shape[0];
  state_buffer(mode.state_format(), state, state_scales, slots, heads, rows, n, device, op, "state");
  if (mode.has_read_copy())
    state_buffer(mode.read, read.values, read.scales, slots, heads, rows, n, device, op, "read");
  if (mode.uses_sr()) {
    expect(sr.seeds, (std::string(op) + " sr.seeds").c_str(), {slots}, {DType::kI64}, device);
    expect(sr.steps, (std::string(op) + " sr.steps").c_str(), {slots}, {DType::kI32}, device);
  }
  return slots;
}

}  // namespace replayssm::validate
