// What a result file records about the run (DESIGN.md §4: commit, date, GPU / CPU), and the
// up-front check of an output path, shared by the commands that write JSON (eval, bench).
#pragma once
#include <string>

namespace replayssm::cli {

/// The commit of the working directory's git checkout, or "unknown".
std::string git_commit();
/// The current UTC time, ISO 8601 ("2026-12-01T04:05:06Z").
std::string utc_now();
/// /proc/cpuinfo's first "model name", or "unknown".
std::string cpu_name();
/// Fails early (ConfigError naming `flag`) when `path` cannot be written: creates its folder and
/// probes the file without leaving one behind, so hours of work do not end in a write error.
void check_writable(const std::string& path, const char* flag);

}  // namespace replayssm::cli
