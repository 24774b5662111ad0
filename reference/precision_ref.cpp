// The oracle of the state formats (include/replayssm/precision.h): the storage rounding of a
// float64 state, written from the format definitions with the codec oracle (codec_ref.h). A value
// is first rounded to float32 (what every backend holds before it encodes), then encoded and
// decoded. The float16 round-to-nearest-even is written here from its definition (nearest multiple
// of the binade's spacing, ties to the even multiple, saturating at 65504).
#include <cmath>
#include <limits>

#include "codec_ref.h"
#include "replayssm_ref.h"

namespace replayssm::ref {
namespace {

/// Round to bfloat16, nearest even, computed from the value (8 significant bits).
double bf16_round(float f) {
  const double x = f;
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  const int e = std::ilogb(x);
  const double ulp = std::ldexp(1.0, e - 7);
  return std::nearbyint(x / ulp) * ulp;  // exact quotient; nearbyint rounds ties to even
}

}  // namespace

double f16_round(double x) {
  if (std::isnan(x)) return x;
  const double a = std::fabs(x);
  if (std::isinf(a)) return std::copysign(65504.0, x);
  const int e = a >= 0x1p-14 ? std::ilogb(a) : -14;
  const double ulp = std::ldexp(1.0, e - 10);
  return std::copysign(std::fmin(std::nearbyint(a / ulp) * ulp, 65504.0), x);
}

Vec quantize_state(StateFormat f, const Vec& S, int64_t heads, int64_t rows, int64_t n,
                   const SrKeyRef& key) {
  Vec out(S.size());
  const int64_t per_head = rows * n;
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<float> x(S.begin() + h * per_head, S.begin() + (h + 1) * per_head);
    for (int64_t i = 0; i < per_head; ++i) x[i] = static_cast<float>(S[h * per_head + i]);
    double* o = &out[h * per_head];
    switch (f) {
      case StateFormat::kFp32:
        for (int64_t i = 0; i < per_head; ++i) o[i] = x[i];
        break;
      case StateFormat::kBf16:
        for (int64_t i = 0; i < per_head; ++i) o[i] = bf16_round(x[i]);
        break;
      case StateFormat::kFp16:
        for (int64_t i = 0; i < per_head; ++i) o[i] = f16_round(x[i]);
        break;
      case StateFormat::kFp16Sr:
        for (int64_t i = 0; i < per_head; ++i) {
          const uint64_t e = static_cast<uint64_t>(h * per_head + i);  // index within the slot
          o[i] = codec::f16_sr(x[i], codec::sr_word(key.seed, key.slot, key.step, e) >> 19);
        }
        break;
      case StateFormat::kFp8:
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
          const Vec d = codec::fp8_decode(codec::fp8_encode(row));
          for (int64_t c = 0; c < n; ++c) o[r * n + c] = d[c];
        }
        break;
      case StateFormat::kNvfp4: {
        const Vec d = codec::nvfp4_decode(codec::nvfp4_encode(x));  // one group per head
        for (int64_t i = 0; i < per_head; ++i) o[i] = d[i];
        break;
      }
    }
  }
  return out;
}

}  // namespace replayssm::ref
