#include "replayssm/engine/tokenizer.h"

namespace replayssm::engine {

std::vector<int32_t> byte_encode(const std::string& text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string byte_decode(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t t : ids)
    if (t >= 0 && t < 256) s.push_back(static_cast<char>(t));
  return s;
}

}  // namespace replayssm::engine
