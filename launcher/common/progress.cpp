#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace csp::cli {

Progress::Progress(std::string phase, std::uint64_t total, bool enabled)
    : phase_(std::move(phase)),
      total_(total),
      enabled_(enabled),
      terminal_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      lastLine_(start_) {}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(std::uint64_t done) {
  if (!enabled_ || finished_) return;
  const int percent = total_ ? static_cast<int>(done * 100 / total_) : 100;
  if (terminal_) {
    if (percent == lastPercent_) return;
    constexpr int kWidth = 30;
    const int filled = percent * kWidth / 100;
    fmt::print(stderr, "\r{:<24} [{:=<{}}{:<{}}] {:3}% {}/{}", phase_, "", filled, "", kWidth - filled, percent, done,
               total_);
    std::fflush(stderr);
  } else {
    // One line every 10 % or every 30 s, whichever comes first.
    const auto now = std::chrono::steady_clock::now();
    if (percent / 10 == lastPercent_ / 10 && now - lastLine_ < std::chrono::seconds(30)) return;
    lastLine_ = now;
    fmt::print(stderr, "{}: {}/{} ({}%)\n", phase_, done, total_, percent);
  }
  lastPercent_ = percent;
}

void Progress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (terminal_) fmt::print(stderr, "\r\033[K");
  fmt::print(stderr, "{}: {} done in {:.2f} s\n", phase_, total_, seconds());
}

}  // namespace csp::cli
