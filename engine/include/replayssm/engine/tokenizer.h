// The byte-level tokenizer of the project's own models: token id = byte value (vocab 256).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace replayssm::engine {

std::vector<int32_t> byte_encode(const std::string& text);
/// Ids outside [0, 256) are skipped; the bytes are emitted as they are (UTF-8 passes through).
std::string byte_decode(const std::vector<int32_t>& ids);

}  // namespace replayssm::engine
