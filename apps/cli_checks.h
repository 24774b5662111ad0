// Option validators shared by the subcommands.
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <type_traits>

namespace replayssm::cli {

/// Whether s is, in full, a decimal number of type T (no hex, no trailing characters).
template <class T>
bool parse_decimal(const std::string& s, T& x) {
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, x);
  return !s.empty() && ec == std::errc() && ptr == end;
}

/// CLI::Range(lo, hi) (same help text), but a value that is not a decimal number of the option's
/// kind says so ("'abc' is not a whole number") instead of CLI11's "Value abc not in range"; NaN
/// and hexadecimal are rejected too.
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
        if (!parse_decimal(s, x)) {
          // Decimal digits too many for T are out of range, not "not a whole number" (but "1e3"
          // is not a whole number as written).
          const size_t d0 = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
          if (std::is_integral_v<T> && s.size() > d0 &&
              s.find_first_not_of("0123456789", d0) == std::string::npos)
            return "value " + s + " not in range " + text(lo) + " to " + text(hi);
          return "'" + s + "' is not " + (std::is_integral_v<T> ? "a whole number" : "a number");
        }
        if (!(x >= lo && x <= hi))  // NaN fails too
          return "value " + s + " not in range " + text(lo) + " to " + text(hi);
        return std::string();
      },
      CLI::Range(lo, hi).get_description());
  return v;
}

/// A finite number > 0 ("expected a number > 0"; NaN and infinity are rejected).
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double x = 0;
        if (!parse_decimal(s, x)) return "'" + s + "' is not a number";
        if (!std::isfinite(x) || !(x > 0)) return "value " + s + " is not a finite number > 0";
        return std::string();
      },
      "NUMBER > 0");
}

/// A non-empty value (an output path, say).
inline CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return s.empty() ? std::string("an empty value, expected a path") : std::string();
      },
      "");
}

/// A drafter: "ngram" (prompt lookup) or "model:DIR" with DIR a folder holding config.json,
/// checked while parsing so that the error names the option.
inline CLI::Validator drafter_spec() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s == "ngram") return std::string();
        if (s.rfind("model:", 0) != 0) return "'" + s + "': expected ngram or model:DIR";
        const std::filesystem::path dir = s.substr(6);
        if (!std::filesystem::is_directory(dir))
          return "'" + dir.string() + "': no such directory (model:DIR)";
        if (!std::filesystem::is_regular_file(dir / "config.json"))
          return "'" + dir.string() + "': no config.json, not a checkpoint (model:DIR)";
        return std::string();
      },
      "ngram|model:DIR");
}

/// A seed: a whole number 0 .. 2^64 - 1, written in decimal digits.
inline CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        const char* end = s.data() + s.size();
        const auto [ptr, ec] = std::from_chars(s.data(), end, v);
        if (s.empty() || ec == std::errc::invalid_argument || ptr != end)
          return "'" + s + "' is not a whole number >= 0";
        if (ec == std::errc::result_out_of_range)
          return "seed " + s + " is larger than 2^64 - 1 = 18446744073709551615";
        return std::string();
      },
      "UINT in [0 - 2^64-1]");
}

}  // namespace replayssm::cli
