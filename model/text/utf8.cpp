#include "model/text/utf8.h"

#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "model/text/tokenizer.h"

namespace model {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}

Utf8Char decode_utf8(std::string_view bytes, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(bytes[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return {b0, 1, true, false};
  // Unicode's table of well-formed sequences: the lead byte fixes the length and the allowed
  // range of the second byte, which excludes overlongs (E0, F0), surrogates (ED) and > U+10FFFF
  // (F4).
  size_t need = 0;
  char32_t cp = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 1, false, false};  // a continuation byte, C0, C1 or F5..FF
  }
  for (size_t k = 1; k <= need; k++) {
    if (i + k >= bytes.size()) return {0, k, false, true};
    const uint8_t b = byte(i + k);
    if (b < lo || b > hi) return {0, k, false, false};
    cp = (cp << 6) | (b & 0x3Fu);
    lo = 0x80;
    hi = 0xBF;
  }
  return {cp, need + 1, true, false};
}

void append_utf8(std::string& out, char32_t cp) {
  const auto put = [&](uint32_t v) { out.push_back(static_cast<char>(static_cast<uint8_t>(v))); };
  const uint32_t c = cp;
  if (c < 0x80) {
    put(c);
  } else if (c < 0x800) {
    put(0xC0 | (c >> 6));
    put(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    put(0xE0 | (c >> 12));
    put(0x80 | ((c >> 6) & 0x3F));
    put(0x80 | (c & 0x3F));
  } else {
    put(0xF0 | (c >> 18));
    put(0x80 | ((c >> 12) & 0x3F));
    put(0x80 | ((c >> 6) & 0x3F));
    put(0x80 | (c & 0x3F));
  }
}

std::string code_point_name(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

void check_utf8(std::string_view text) {
  const std::optional<size_t> bad = find_invalid_utf8(text);
  if (!bad) return;
  std::string shown;
  for (size_t i = *bad; i < text.size() && i < *bad + 4; i++) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%s%02X", shown.empty() ? "" : " ",
                  static_cast<uint8_t>(text[i]));
    shown += buf;
  }
  throw std::runtime_error("invalid UTF-8 at byte offset " + std::to_string(*bad) + " (bytes " +
                           shown + ")");
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Char c = decode_utf8(bytes, i);
    if (c.ok) {
      out.append(bytes.substr(i, c.len));
    } else {
      out.append(kReplacement);
    }
    i += c.len;
  }
  return out;
}

std::optional<size_t> find_invalid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    // ASCII runs are the common case: skip them without decoding.
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      i++;
      continue;
    }
    const Utf8Char c = decode_utf8(bytes, i);
    if (!c.ok) return i;
    i += c.len;
  }
  return std::nullopt;
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Char c = decode_utf8(pending_, i);
    if (c.truncated) break;  // the rest of this character may come with the next push
    if (c.ok) {
      out.append(pending_, i, c.len);
    } else {
      out.append(kReplacement);
    }
    i += c.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace model
