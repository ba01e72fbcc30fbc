#include "model/formats/json_util.h"

#include <stdexcept>

namespace model::json_util {

namespace {

// nlohmann's messages start with "[json.exception.parse_error.101] " and may quote raw input
// ("last read: ..."), which can hold bytes that are not valid UTF-8: keep ASCII only.
std::string clean_reason(std::string_view what) {
  const size_t close = what.find("] ");
  if (what.starts_with("[json.exception.") && close != std::string_view::npos)
    what.remove_prefix(close + 2);
  std::string out;
  for (char c : what) {
    const auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  return out;
}

}  // namespace

nlohmann::json parse(std::string_view text, const std::string& where) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(where + ": invalid JSON at byte " + std::to_string(e.byte) + ": " +
                             clean_reason(e.what()));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    throw std::runtime_error(where + ": invalid JSON: " + clean_reason(e.what()));
  }
}

std::string show(std::string_view s, size_t max_bytes) {
  bool plain = s.size() <= max_bytes && !s.empty();
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '"') plain = false;
  }
  if (plain) return std::string(s);
  const bool cut = s.size() > max_bytes;
  // The replace handler turns a UTF-8 sequence split by the cut into U+FFFD instead of throwing.
  std::string quoted = nlohmann::json(std::string(s.substr(0, max_bytes)))
                           .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return cut ? quoted + "..." : quoted;
}

}  // namespace model::json_util
