#include "model/weights.h"

namespace replayssm::engine {

cpu::Linear load_linear(const Checkpoint& ck, const std::string& name, int64_t out, int64_t in,
                        bool with_bias) {
  cpu::Linear l;
  l.out = out;
  l.in = in;
  l.w = ck.load(name + ".weight", {out, in});
  if (with_bias) l.bias = ck.load(name + ".bias", {out});
  return l;
}

std::vector<float> load_conv(const Checkpoint& ck, const std::string& name, int64_t C, int64_t k) {
  return ck.load(name, {C, 1, k});
}

}  // namespace replayssm::engine
