#include "run_info.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "replayssm/errors.h"

namespace replayssm::cli {

std::string git_commit() {
  std::string out;
  if (FILE* p = popen("git rev-parse HEAD 2>/dev/null", "r")) {
    char buf[64];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.size() == 40 ? out : "unknown";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
      return line.substr(line.find(':') + 2);
  return "unknown";
}

void check_writable(const std::string& file, const char* flag) {
  std::error_code ec;
  const std::filesystem::path path(file);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  check<ConfigError>(!ec, flag, ": cannot create the folder of '", file, "': ", ec.message());
  check<ConfigError>(!std::filesystem::is_directory(path, ec), flag, ": '", file,
                     "' is a folder, expected a file name");
  const bool existed = std::filesystem::exists(path, ec);
  check<ConfigError>(std::ofstream(path, std::ios::app).good(), flag, ": cannot write '", file,
                     "'");
  if (!existed) std::filesystem::remove(path, ec);
}

}  // namespace replayssm::cli
