#include "validate.h"

#include <climits>
#include <string>

namespace replayssm::validate {
namespace {

std::string shape_str(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  int i = 0;
  for (int64_t d : shape) s += (i++ ? ", " : "") + (d == kAny ? std::string("*") : std::to_string(d));
  return s + "]";
}

std::string dtypes_str(std::initializer_list<DType> dtypes) {
  std::string s;
  int i = 0;
  for (DType d : dtypes) s += (i++ ? " or " : "") + std::string(dtype_name(d));
  return s;
}

}  // namespace

void expect(const TensorView& t, const char* what, std::initializer_list<int64_t> shape,
            std::initializer_list<DType> dtypes, Device device) {
  // Messages are only formatted on failure (describe()/shape_str() cost more than the checks).
  if (t.empty()) check<ShapeError>(false, what, ": missing, expected ", shape_str(shape));
  if (t.ndim != static_cast<int>(shape.size()))
    check<ShapeError>(false, what, ": rank ", t.ndim, " (", t.describe(), "), expected rank ",
                      shape.size(), " ", shape_str(shape));
  int i = 0;
  for (int64_t d : shape) {
    if (d != kAny && t.shape[i] != d)
      check<ShapeError>(false, what, ": shape[", i, "] is ", t.shape[i], ", expected ", d, " (",
                        t.describe(), " vs ", shape_str(shape), ")");
    check<ShapeError>(t.shape[i] >= 0, what, ": negative size ", t.shape[i], " at dim ", i);
    ++i;
  }
  bool ok = false;
  for (DType d : dtypes) ok = ok || d == t.dtype;
  if (!ok) check<DTypeError>(false, what, ": dtype ", dtype_name(t.dtype), ", expected ", dtypes_str(dtypes));
  check<Error>(t.device == device, what, ": on ", device_name(t.device), ", expected ",
               device_name(device));
  if (!t.is_contiguous())
    check<StrideError>(false, what, ": strides are not contiguous row-major (", t.describe(),
                       "); pass a contiguous tensor");
}

void expect_optional(const TensorView& t, const char* what, std::initializer_list<int64_t> shape,
                     std::initializer_list<DType> dtypes, Device device) {
  if (!t.empty()) expect(t, what, shape, dtypes, device);
}

TensorView with_token_axis(const TensorView& t, int rank_with_t) {
  if (!t.empty() && t.ndim == rank_with_t - 1) return t.unsqueeze(1);
  return t;
}

std::vector<int32_t> slot_ids(const Rows& rows, int64_t batch, int64_t slots, const char* op) {
  const std::string what = std::string(op) + " slot_ids";
  check<ShapeError>(slots <= INT32_MAX, op, ": the pool has ", slots,
                    " slots, expected at most 2^31 - 1 (slot ids are int32)");
  expect(rows.slot_ids, what.c_str(), {batch}, {DType::kI32}, Device::kCPU);
  check<SlotError>(rows.pad_slot_id < 0 || rows.pad_slot_id >= slots, op, ": pad_slot_id ",
                   rows.pad_slot_id, " is a real slot, expected a value outside [0, ", slots, ")");
  const int32_t* ids = rows.slot_ids.ptr<int32_t>();
  std::vector<int32_t> out(ids, ids + batch);
  std::vector<bool> seen(static_cast<size_t>(slots), false);
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t s = out[b];
    if (s == rows.pad_slot_id) continue;
    check<SlotError>(s >= 0 && s < slots, op, ": slot_ids[", b, "] = ", s,
                     " is out of range, expected 0 <= id < ", slots, " or pad ", rows.pad_slot_id);
    check<SlotError>(!seen[s], op, ": slot ", s, " appears twice in slot_ids (row ", b, ")");
    seen[s] = true;
  }
  return out;
}

std::vector<int32_t> num_tokens(const Rows& rows, const std::vector<int32_t>& ids, int64_t T_max,
                                const char* op) {
  const int64_t batch = static_cast<int64_t>(ids.size());
  std::vector<int32_t> out(ids.size(), static_cast<int32_t>(T_max));
  if (rows.num_tokens.empty()) return out;
  const std::string what = std::string(op) + " num_tokens";
  expect(rows.num_tokens, what.c_str(), {batch}, {DType::kI32}, Device::kCPU);
  const int32_t* n = rows.num_tokens.ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    if (ids[b] == rows.pad_slot_id) continue;
    check<SlotError>(n[b] >= 1 && n[b] <= T_max, op, ": num_tokens[", b, "] = ", n[b],
                     ", expected 1..", T_max);
    out[b] = n[b];
  }
  return out;
}

void cursors(const RingCursors& c, int64_t slots, RingMode mode, Device device, const char* op) {
  c.config.validate();
  check<ConfigError>(c.config.mode == mode, op, ": ring mode is ", ring_mode_name(c.config.mode),
                     ", expected ", ring_mode_name(mode));
  const std::string o = std::string(op) + " cursors.origin";
  const std::string h = std::string(op) + " cursors.h";
  const std::string f = std::string(op) + " cursors.is_flush";
  expect(c.origin, o.c_str(), {slots}, {DType::kI32}, device);
  expect(c.h, h.c_str(), {slots}, {DType::kI32}, device);
  expect(c.is_flush, f.c_str(), {slots}, {DType::kI8}, device);
}

Device common_device(std::initializer_list<const TensorView*> views, const char* op) {
  Device d = Device::kCPU;
  bool first = true;
  for (const TensorView* v : views) {
    if (v->empty()) continue;
    if (first) d = v->device;
    check<Error>(v->device == d, op, ": tensors on different devices (", device_name(d), " and ",
                 device_name(v->device), ")");
    first = false;
  }
  return d;
}

}  // namespace replayssm::validate
