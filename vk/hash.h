// FNV-1a, 64-bit: the pipeline cache file's checksum (vk/pipeline_cache.cpp) and a recording's
// signature (vk/recorder.cpp). Not for anything an attacker chooses to collide.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vk {

inline constexpr uint64_t kFnv1aOffset = 14695981039346656037ull;

// Hash `h` continued over `bytes` bytes at `data` (start from kFnv1aOffset).
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace vk
