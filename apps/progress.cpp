#include "apps/progress.h"

#include <algorithm>
#include <cmath>
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

std::string duration_text(double s) {
  char buf[32];
  if (!(s >= 0)) s = 0;                  // NaN too
  s = std::min(s, 9999.0 * 3600);         // infinite: no rate yet
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  return buf;
}

std::string scoring_line(uint64_t done, uint64_t total, double mean_nll, double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double left = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
  const std::string time = done >= total ? "took " + duration_text(seconds)
                           : rate > 0    ? "ETA " + duration_text(left)
                                         : "ETA ?";
  char buf[160];
  std::snprintf(buf, sizeof buf, "gpt2vk: %llu/%llu tokens scored | ppl %.3f | %.0f tok/s | %s",
                static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                std::exp(mean_nll), rate, time.c_str());
  return buf;
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
