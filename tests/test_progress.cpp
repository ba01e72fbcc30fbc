// The loader's progress line. Drawing itself only happens on a terminal; the text is checked here.
#include <doctest/doctest.h>

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
