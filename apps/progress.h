// A one-line progress bar on stderr for long loads (bytes done / total, MB/s). It draws only
// when stderr is a terminal and only once the work has taken ~0.3 s, so quick loads and logs
// stay clean; it redraws at most ~10 times a second.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace app {

bool stderr_is_terminal();

// A time left or taken, to the minute or second: "0m08s", "12m30s", "2h05m".
std::string duration_text(double seconds);

// `gpt2vk perplexity`'s line: tokens scored of the total, the perplexity of those so far
// (exp of their mean NLL), the rate, and the time left at that rate, or once all are scored
// the time taken: "gpt2vk: 1200/4800 tokens scored | ppl 3.217 | 410 tok/s | ETA 0m08s".
std::string scoring_line(uint64_t done, uint64_t total, double mean_nll, double seconds);

class Progress {
 public:
  Progress(std::string what, uint64_t total_bytes);
  ~Progress();  // finish()es
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(uint64_t bytes);
  void finish();  // draws the final state and ends the line, if anything was drawn

  // The text of the line: "<what> [#####.....]  12.3/45.6 MB  78.9 MB/s" (MB = 10^6 bytes).
  static std::string line(std::string_view what, uint64_t done, uint64_t total, double seconds);

 private:
  using Clock = std::chrono::steady_clock;
  void draw();

  std::string what_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  bool tty_ = false;
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace app
