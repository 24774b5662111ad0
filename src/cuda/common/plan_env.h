// Tuning runs only: a launch plan's fields overridden from an environment variable of
// "key=value" pairs separated by commas (e.g. RSSM_MAMBA2_REPLAY_PLAN="rpt=8,hpb=4"), read at
// every launch (host side, a few hundred ns); the family's resolver checks the result like a
// forced plan.
#pragma once
#include <cstdlib>
#include <sstream>
#include <string>

namespace replayssm::cuda {

/// Calls fn(key, integer value) for every "key=value" pair of the variable `name` (none if unset).
/// Pairs without '=' are skipped.
template <class Fn>
void for_each_plan_override(const char* name, Fn&& fn) {
  const char* e = std::getenv(name);
  if (!e) return;
  std::stringstream ss{std::string(e)};
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    fn(kv.substr(0, eq), std::atoi(kv.c_str() + eq + 1));
  }
}

}  // namespace replayssm::cuda
