// The loader's progress line. Drawing itself only happens on a terminal; the text is checked here.
#include <doctest/doctest.h>

#include <cmath>

#include "apps/progress.h"

TEST_CASE("progress line: bar, bytes done of total, rate") {
  CHECK(app::Progress::line("loading", 0, 200'000'000, 0) ==
        "loading [..............................]  0.0/200.0 MB  0.0 MB/s");
  CHECK(app::Progress::line("loading", 100'000'000, 200'000'000, 2.0) ==
        "loading [###############...............]  100.0/200.0 MB  50.0 MB/s");
  CHECK(app::Progress::line("w", 200'000'000, 200'000'000, 0.5) ==
        "w [##############################]  200.0/200.0 MB  400.0 MB/s");
  // More than announced, or nothing announced: a full bar, never past it.
  CHECK(app::Progress::line("w", 300, 200, 1.0).find("[##############################]") !=
        std::string::npos);
  CHECK(app::Progress::line("w", 0, 0, 1.0).find("[##############################]") !=
        std::string::npos);
}

TEST_CASE("progress: advancing and finishing are safe in any order") {
  app::Progress p("test", 100);
  p.advance(40);
  p.advance(60);
  p.finish();
  p.finish();
  p.advance(1);  // after finish: ignored
}

TEST_CASE("durations: seconds under an hour, minutes past it; nonsense as zero") {
  CHECK(app::duration_text(8.9) == "0m08s");
  CHECK(app::duration_text(750) == "12m30s");
  CHECK(app::duration_text(7500) == "2h05m");
  CHECK(app::duration_text(-1) == "0m00s");
  CHECK(app::duration_text(1.0 / 0.0) == "9999h00m");
}

TEST_CASE("perplexity's line: tokens, the perplexity so far, rate, ETA then the time taken") {
  // 1200 of 4800 in 3 s: 400 tok/s, 3600 left take 9 s; mean NLL log(3.217).
  CHECK(app::scoring_line(1200, 4800, std::log(3.217), 3.0) ==
        "gpt2vk: 1200/4800 tokens scored | ppl 3.217 | 400 tok/s | ETA 0m09s");
  CHECK(app::scoring_line(4800, 4800, std::log(2.5), 12.0) ==
        "gpt2vk: 4800/4800 tokens scored | ppl 2.500 | 400 tok/s | took 0m12s");
  // No time yet: no rate to estimate from.
  CHECK(app::scoring_line(1, 10, 0.0, 0.0) ==
        "gpt2vk: 1/10 tokens scored | ppl 1.000 | 0 tok/s | ETA ?");
}
