#include "replayssm/dispatch.h"

#include <algorithm>

#include "replayssm/errors.h"

namespace replayssm {

const char* ssm_family_name(SsmFamily f) {
  switch (f) {
    case SsmFamily::kMamba2: return "mamba2";
    case SsmFamily::kGdn: return "gdn";
    case SsmFamily::kKda: return "kda";
  }
  return "?";
}

int32_t recommended_ring_length(SsmFamily family, int64_t batch, int32_t requested,
                                StateFormat read, int64_t state_bytes) {
  check<ConfigError>(requested >= 1, "requested ring length is ", requested, ", expected >= 1");
  check<ConfigError>(batch >= 0, "batch is ", batch, ", expected >= 0");
  check<ConfigError>(state_bytes >= 0, "state_bytes is ", state_bytes, ", expected >= 0");
  // fp16sr/fp16sr: at L = 1 every step writes its checkpoint with stochastic rounding.
  const bool sr16 = read == StateFormat::kFp16Sr;
  const bool copy = read != StateFormat::kFp32 && !sr16;
  const bool quant = read == StateFormat::kFp8 || read == StateFormat::kNvfp4;
  switch (family) {
    case SsmFamily::kMamba2: {
      // NVFP4 copies (fp32/nvfp4, fp16sr/nvfp4) from 32: H200 Nano-4B mixed phases 57.4 / 61.0
      // µs against their L = 1 steps' 71.4 / 76.0 at batch 32 (bench/NOTES.md "Session 30").
      const int64_t from = sr16 ? 8 : read == StateFormat::kNvfp4 ? 32 : copy ? 64 : 16;
      return batch >= from ? std::min<int32_t>(requested, 16) : 1;
    }
    case SsmFamily::kGdn: {
      const bool big = state_bytes >= (int64_t{4} << 20);
      // NVFP4 copies since session 31's encode from 64, or 32 where a sequence's state is >= 4
      // MiB (bench/NOTES.md "Session 31"); FP8 from 128.
      const int64_t from = sr16                         ? 8
                           : read == StateFormat::kNvfp4 ? (big ? 32 : 64)
                           : quant                       ? 128
                           : copy                        ? (big ? 8 : 32)
                                                         : (big ? 8 : 16);
      return batch >= from ? std::min<int32_t>(requested, 16) : 1;
    }
    case SsmFamily::kKda:
      if (quant) return 1;
      return batch >= (copy ? 64 : 32) ? std::min<int32_t>(requested, 8) : 1;
  }
  return 1;
}

}  // namespace replayssm
