// UTF-8 decoding one character at a time, strict as Python's codec: no overlongs, no surrogates,
// nothing above U+10FFFF. The public helpers (sanitize_utf8, Utf8Stream) are in tokenizer.h.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace model {

struct Utf8Char {
  char32_t cp = 0;  // the code point, when ok
  size_t len = 1;   // bytes taken: the character, or its maximal invalid subpart (>= 1)
  bool ok = false;
  bool truncated = false;  // not ok only because the input ends where more bytes could complete it
};

// Decodes the character starting at bytes[i] (i < bytes.size()). An invalid sequence reports the
// length of its maximal subpart (Unicode's "U+FFFD substitution of maximal subparts"), which is
// what Python's errors="replace" turns into one U+FFFD.
Utf8Char decode_utf8(std::string_view bytes, size_t i);

void append_utf8(std::string& out, char32_t cp);

// "U+00E9"
std::string code_point_name(char32_t cp);

// Throws std::runtime_error "invalid UTF-8 at byte offset N (bytes ..)" unless `text` is valid.
void check_utf8(std::string_view text);

// Streams generated tokens' bytes to a terminal without ever splitting a UTF-8 character:
// push() returns the complete characters so far (invalid sequences as U+FFFD), finish() the rest.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string finish();

 private:
  std::string pending_;
};

// Replaces every invalid UTF-8 sequence with U+FFFD (one per maximal invalid subpart, as Python's
// bytes.decode(errors="replace") does).
std::string sanitize_utf8(std::string_view bytes);
// The byte offset of the first invalid UTF-8 sequence, or nullopt when the text is valid.
std::optional<size_t> find_invalid_utf8(std::string_view bytes);

}  // namespace model
