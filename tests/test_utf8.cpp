// UTF-8 helpers: sanitize_utf8 and find_invalid_utf8 against Python's codec, Utf8Stream never
// splitting a character.
#include <doctest/doctest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/tokenizer.h"
#include "model/text/utf8.h"

using namespace std::literals;

namespace {

struct PythonCase {
  std::string_view bytes;
  std::string_view replaced;          // bytes.decode("utf-8", errors="replace").encode("utf-8")
  std::optional<size_t> first_error;  // UnicodeDecodeError.start of bytes.decode("utf-8")
};

// Generated once with Python 3.11 (the expressions in PythonCase) and committed as literals:
// overlongs, surrogates, > U+10FFFF, truncated and interrupted sequences, stray continuations.
const PythonCase kPython[] = {
    {"abc"sv, "abc"sv, std::nullopt},
    {""sv, ""sv, std::nullopt},
    {"\xFF"sv, "\xEF\xBF\xBD"sv, 0},
    {"\x80"sv, "\xEF\xBF\xBD"sv, 0},
    {"\x80\x80\x80"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xC3"sv, "\xEF\xBF\xBD"sv, 0},
    {"\xC3("sv, "\xEF\xBF\xBD("sv, 0},
    {"\xC3\xA9"sv, "\xC3\xA9"sv, std::nullopt},
    {"\xE2\x82"sv, "\xEF\xBF\xBD"sv, 0},
    {"\xE2\x82("sv, "\xEF\xBF\xBD("sv, 0},
    {"\xE2(\xA1"sv, "\xEF\xBF\xBD(\xEF\xBF\xBD"sv, 0},
    {"\xE2\x82\xAC"sv, "\xE2\x82\xAC"sv, std::nullopt},
    {"\xF0\x9F\x98"sv, "\xEF\xBF\xBD"sv, 0},
    {"\xF0\x9F\x98\x80"sv, "\xF0\x9F\x98\x80"sv, std::nullopt},
    {"\xF0\x9F\x98("sv, "\xEF\xBF\xBD("sv, 0},
    {"\xC0\xAF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xC1\xBF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xE0\x80\xAF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xE0\x9F\xBF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xE0\xA0\x80"sv, "\xE0\xA0\x80"sv, std::nullopt},
    {"\xED\xA0\x80"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xED\xBF\xBF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xED\x9F\xBF"sv, "\xED\x9F\xBF"sv, std::nullopt},
    {"\xF0\x80\x80\x80"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xF0\x8F\xBF\xBF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xF4\x90\x80\x80"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xF4\x8F\xBF\xBF"sv, "\xF4\x8F\xBF\xBF"sv, std::nullopt},
    {"\xF5\x80\x80\x80"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xF8\x88\x80\x80\x80"sv, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"\xFE\xFF"sv, "\xEF\xBF\xBD\xEF\xBF\xBD"sv, 0},
    {"a\xF1\x80\x80\xE1\x80\xC2"
     "b\x80"sv,
     "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
     "b\xEF\xBF\xBD"sv,
     1},
    {"\xEF\xBF\xBD"sv, "\xEF\xBF\xBD"sv, std::nullopt},
    {"\x00x"sv, "\x00x"sv, std::nullopt},
    {"\xF0\x9F\x98\x80\xF0\x9F"sv, "\xF0\x9F\x98\x80\xEF\xBF\xBD"sv, 4},
    {"\xE1\x80\xE2\xF0\x91\x92\xF1\xBF"
     "A"sv,
     "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
     "A"sv,
     0},
};

std::string hex(std::string_view s) {
  std::string out;
  for (char c : s) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02X ", static_cast<unsigned char>(c));
    out += buf;
  }
  return out;
}

}  // namespace

TEST_CASE("sanitize_utf8 replaces maximal invalid subparts as Python does") {
  for (const PythonCase& c : kPython) {
    CAPTURE(hex(c.bytes));
    CHECK(hex(model::sanitize_utf8(c.bytes)) == hex(c.replaced));
  }
}

TEST_CASE("find_invalid_utf8 gives Python's offset of the first error") {
  for (const PythonCase& c : kPython) {
    CAPTURE(hex(c.bytes));
    CHECK(model::find_invalid_utf8(c.bytes) == c.first_error);
  }
  CHECK(model::find_invalid_utf8("plain ASCII then caf\xC3\xA9 and \xF0\x9F\x98\x80"sv) ==
        std::nullopt);
  CHECK(model::find_invalid_utf8("0123456789\xC3"sv) == 10u);
}

TEST_CASE("Utf8Stream holds back a character split across pushes") {
  model::Utf8Stream s;
  CHECK(s.push("a\xF0\x9F"sv) == "a");
  CHECK(s.push("\x98"sv).empty());
  CHECK(s.push("\x80\xE2\x82"sv) == "\xF0\x9F\x98\x80");
  CHECK(s.push("\xAC!"sv) == "\xE2\x82\xAC!");
  CHECK(s.finish().empty());
}

TEST_CASE("Utf8Stream turns an interrupted or unfinished character into U+FFFD") {
  model::Utf8Stream s;
  CHECK(s.push("\xF0\x9F"sv).empty());
  CHECK(s.push("A"sv) == "\uFFFDA");          // the interruption is known only now
  CHECK(s.push("\x80"sv) == "\xEF\xBF\xBD");  // a stray continuation byte is invalid at once
  CHECK(s.push("\xE2\x82"sv).empty());
  CHECK(s.finish() == "\xEF\xBF\xBD");  // the text ended inside a character
  CHECK(s.finish().empty());
  CHECK(s.push("ok"sv) == "ok");  // usable again after finish()
}

TEST_CASE("Utf8Stream, fed any split of the bytes, prints what sanitize_utf8 gives for the whole") {
  std::vector<std::string_view> texts = {
      "caf\xC3\xA9 \xF0\x9F\x98\x80\xE2\x82\xAC \xE4\xBD\xA0\xE5\xA5\xBD"sv};
  for (const PythonCase& c : kPython) texts.push_back(c.bytes);
  for (std::string_view text : texts) {
    CAPTURE(hex(text));
    const std::string whole = model::sanitize_utf8(text);
    // One byte per push: every output must be whole characters (valid UTF-8 on its own).
    model::Utf8Stream bytewise;
    std::string out;
    for (char c : text) {
      const std::string piece = bytewise.push(std::string_view(&c, 1));
      CHECK(!model::find_invalid_utf8(piece));
      out += piece;
    }
    out += bytewise.finish();
    CHECK(hex(out) == hex(whole));
    // Two pushes at every cut.
    for (size_t cut = 0; cut <= text.size(); cut++) {
      model::Utf8Stream two;
      std::string a = two.push(text.substr(0, cut));
      a += two.push(text.substr(cut));
      a += two.finish();
      CHECK(hex(a) == hex(whole));
    }
  }
}
