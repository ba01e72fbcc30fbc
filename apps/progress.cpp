#include "apps/progress.h"

#include <cstdio>

#if defined(_WIN32)
#include <io.h>
#define GPT2VK_ISATTY_STDERR() (_isatty(2) != 0)
#else
#include <unistd.h>
#define GPT2VK_ISATTY_STDERR() (isatty(STDERR_FILENO) != 0)
#endif

namespace app {

namespace {

constexpr auto kDelay = std::chrono::milliseconds(300);   // quicker loads draw nothing
constexpr auto kPeriod = std::chrono::milliseconds(100);  // at most ~10 redraws a second
constexpr int kBarWidth = 30;

}  // namespace

bool stderr_is_terminal() {
  return GPT2VK_ISATTY_STDERR();
}

Progress::Progress(std::string what, uint64_t total_bytes)
    : what_(std::move(what)),
      total_(total_bytes),
      start_(Clock::now()),
      tty_(GPT2VK_ISATTY_STDERR()) {}

Progress::~Progress() {
  finish();
}

std::string Progress::line(std::string_view what, uint64_t done, uint64_t total, double seconds) {
  const double fraction =
      total == 0 ? 1.0
                 : static_cast<double>(done < total ? done : total) / static_cast<double>(total);
  const auto filled = static_cast<int>(fraction * kBarWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBarWidth - filled), '.');
  const double mb = static_cast<double>(done) / 1e6;
  const double rate = seconds > 0 ? mb / seconds : 0.0;
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "%.1f/%.1f MB  %.1f MB/s", mb,
                static_cast<double>(total) / 1e6, rate);
  return std::string(what) + " [" + bar + "]  " + numbers;
}

void Progress::draw() {
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  // "\r" returns to the line's start; "\033[K" clears what a longer earlier line left.
  std::fprintf(stderr, "\r%s\033[K", line(what_, done_, total_, seconds).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::advance(uint64_t bytes) {
  done_ += bytes;
  if (!tty_ || finished_) return;
  const auto now = Clock::now();
  if (now - start_ < kDelay || (drawn_ && now - last_draw_ < kPeriod)) return;
  last_draw_ = now;
  draw();
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!drawn_) return;
  draw();
  std::fputc('\n', stderr);
}

}  // namespace app
