// A one-line progress bar on stderr where stderr is a terminal (drawn from the start, at 0); in a
// log, a plain "label: n/total, s" line at a tick at most every 30 s, so a short run adds nothing
// (a log hears of a unit of work only when it ends: ticks are the caller's units).
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace replayssm::cli {

class Progress {
 public:
  Progress(std::string label, long total)
      : label_(std::move(label)), total_(total), tty_(isatty(fileno(stderr)) != 0),
        start_(std::chrono::steady_clock::now()), last_(start_) {
    if (tty_) draw(start_);
  }
  ~Progress() { done(); }
  void tick(long n = 1) {
    current_ += n;
    const auto now = std::chrono::steady_clock::now();
    if (!tty_) {
      if (now - last_ < std::chrono::seconds(30)) return;
      last_ = now;
      std::fprintf(stderr, "%s: %ld/%ld, %.0f s\n", label_.c_str(), current_, total_,
                   std::chrono::duration<double>(now - start_).count());
      return;
    }
    if (current_ < total_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    draw(now);
  }
  void done() {
    if (tty_ && !finished_) std::fprintf(stderr, "\r\033[K");
    finished_ = true;
  }

 private:
  void draw(std::chrono::steady_clock::time_point now) {
    const int width = 30;
    const int fill = total_ > 0 ? static_cast<int>(width * current_ / total_) : width;
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r%s [%s%s] %ld/%ld %.1fs", label_.c_str(), std::string(fill, '#').c_str(),
                 std::string(width - fill, ' ').c_str(), current_, total_, secs);
    std::fflush(stderr);
  }

  std::string label_;
  long total_, current_ = 0;
  bool tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_{};
};

}  // namespace replayssm::cli
