// Stop strings as a stream: the text up to the first one, and text that could begin one held
// back until it cannot (model/generation/stop_strings.h).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/generation/stop_strings.h"

TEST_CASE("stop_strings: the text ends right before the first stop string") {
  model::StopStrings s({"LORD", "\n\n"});
  CHECK(s.push("And the ") == "And the ");
  CHECK(s.push("L") == "");  // could begin LORD
  CHECK(s.push("OR") == "");
  CHECK_FALSE(s.stopped());
  CHECK(s.push("D said") == "");  // LORD complete: nothing of it, nor after it
  CHECK(s.stopped());
  CHECK(s.push("more") == "");
  CHECK(s.finish() == "");
  // Two in one piece: the first wins, whichever string it is.
  model::StopStrings two({"cd", "b"});
  CHECK(two.push("xabcd") == "xa");
  CHECK(two.stopped());
}

TEST_CASE("stop_strings: a partial match that turns out not to be one is sent in full") {
  model::StopStrings s({"LORD GOD"});
  CHECK(s.push("the LORD ") == "the ");  // "LORD " may go on to "LORD GOD"
  CHECK(s.push("sa") == "LORD sa");      // it did not: all of it, in order
  CHECK(s.push("id, LORD G") == "id, ");
  CHECK(s.finish() == "LORD G");  // the end came first: what was held goes out
  CHECK_FALSE(s.stopped());
  // A held ending that overlaps itself: "aa" of "aab" held, then "xaaab" ends at "xa".
  model::StopStrings o({"aab"});
  CHECK(o.push("xaa") == "x");
  CHECK(o.push("ab") == "a");
  CHECK(o.stopped());
}

TEST_CASE("stop_strings: none is a pass-through; an empty one is refused") {
  model::StopStrings none({});
  CHECK(none.push("anything") == "anything");
  CHECK(none.finish() == "");
  CHECK_THROWS_WITH(model::StopStrings({"a", ""}), doctest::Contains("may not be empty"));
}
