// Option validators shared by the subcommands.
#pragma once
#include <CLI/CLI.hpp>

#include <sstream>
#include <string>
#include <type_traits>

namespace replayssm::cli {

/// CLI::Range(lo, hi) (same help text), but a value that is not a number of the option's kind says
/// so ("'abc' is not a whole number") instead of CLI11's "Value abc not in range".
template <class T>
CLI::Validator in_range(T lo, T hi) {
  auto text = [](T v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  CLI::Validator v(
      [lo, hi, text](std::string& s) -> std::string {
        T x{};
        if (!CLI::detail::lexical_cast(s, x))
          return "'" + s + "' is not " + (std::is_integral_v<T> ? "a whole number" : "a number");
        if (x < lo || x > hi) return "value " + s + " not in range " + text(lo) + " to " + text(hi);
        return std::string();
      },
      CLI::Range(lo, hi).get_description());
  return v;
}

}  // namespace replayssm::cli
