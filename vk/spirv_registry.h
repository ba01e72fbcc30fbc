// The SPIR-V modules compiled from shaders/*.comp at build time (cmake/shaders.cmake).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace vk {

struct EmbeddedSpirv {
  const char* name;  // shader file name without ".comp"
  const uint32_t* words;
  size_t count;
};

std::span<const EmbeddedSpirv> embedded_spirv();

// The module named `name`, or an empty span.
inline std::span<const uint32_t> find_spirv(std::string_view name) {
  for (const EmbeddedSpirv& m : embedded_spirv())
    if (name == m.name) return {m.words, m.count};
  return {};
}

}  // namespace vk
