// Helpers shared by the JSON readers of model/ (config.json, the safetensors header). Included
// only from .cpp files: nlohmann_json is a private dependency of the model library.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace model::json_util {

// Parses untrusted text; throws std::runtime_error "<where>: invalid JSON ...", naming the
// parser's position (line, column and byte offset) and reason.
nlohmann::json parse(std::string_view text, const std::string& where);

// A string from a file, fit for a one-line message: as is when it is short and has no control
// characters, otherwise JSON-quoted (escaped) and cut to `max_bytes`.
std::string show(std::string_view s, size_t max_bytes = 120);

// a * b into *out, or true (and *out untouched) where it would not fit in 64 bits. Portable
// where __builtin_mul_overflow is not (MSVC).
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > UINT64_MAX / a) return true;
  *out = a * b;
  return false;
}

// "[a, b, c]" for a shape.
template <class Dims>
std::string shape_str(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < std::size(dims); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace model::json_util
