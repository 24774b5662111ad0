// Typed errors raised by the host API. Kernels never throw; the host layer validates every
// argument before any work starts, so a raised error means nothing was modified.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace replayssm {

/// Base of every error the library raises. what() names the argument, the actual value and the
/// expected value, e.g. "mamba2 x: shape[2] is 48, expected headdim 64".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A tensor has the wrong rank or size along some axis.
class ShapeError : public Error { using Error::Error; };
/// A tensor has a dtype the op does not accept.
class DTypeError : public Error { using Error::Error; };
/// A tensor has strides the op cannot address (e.g. non-unit innermost stride).
class StrideError : public Error { using Error::Error; };
/// A slot id is out of range, duplicated within one batch, or a per-row count is out of range.
class SlotError : public Error { using Error::Error; };
/// A configuration value is invalid (e.g. ring length L < 2T, ngroups not dividing nheads).
class ConfigError : public Error { using Error::Error; };
/// The chosen backend cannot run this point (dtype, size or device); another backend may.
class UnsupportedError : public Error { using Error::Error; };
/// A device (CUDA) call failed.
class DeviceError : public Error { using Error::Error; };

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

/// Throws E with the concatenated message parts when cond is false.
template <class E, class... Parts>
inline void check(bool cond, const Parts&... parts) {
  if (!cond) throw E(detail::concat(parts...));
}

}  // namespace replayssm
