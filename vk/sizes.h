// Integer rounding every layer shares (group counts, alignments, block padding).
#pragma once
#include <cstdint>

namespace vk {

constexpr uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}
constexpr uint64_t align_up(uint64_t n, uint64_t a) {
  return ceil_div(n, a) * a;
}

}  // namespace vk
