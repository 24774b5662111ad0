#pragma once
namespace replayssm {
inline constexpr const char* kVersion = "0.1.0";
}
