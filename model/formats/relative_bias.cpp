#include "model/formats/relative_bias.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace model {

uint32_t relative_bucket(int64_t rel, bool bidirectional, uint32_t buckets, uint32_t max_distance) {
  uint32_t bucket = 0;
  int64_t n = 0;
  if (bidirectional) {
    buckets /= 2;
    if (rel > 0) bucket = buckets;
    n = rel < 0 ? -rel : rel;
  } else {
    n = std::max<int64_t>(-rel, 0);
  }
  const uint32_t exact = buckets / 2;
  if (n < exact) return bucket + static_cast<uint32_t>(n);
  // float32 throughout: log(n / exact) / log(max_distance / exact) * (buckets - exact), the
  // divisor a Python float that torch rounds to float32.
  const float ratio = static_cast<float>(n) / static_cast<float>(exact);
  const auto divisor = static_cast<float>(std::log(static_cast<double>(max_distance) / exact));
  const float v = std::log(ratio) / divisor * static_cast<float>(buckets - exact);
  const int64_t large = std::min<int64_t>(exact + static_cast<int64_t>(v), buckets - 1);
  return bucket + static_cast<uint32_t>(large);
}

uint32_t relative_bias_span(const Config& c) {
  return 2 * c.n_ctx - 1;
}

std::vector<float> relative_bias_rows(const Config& c, std::span<const float> table) {
  const uint32_t H = c.n_head, B = c.relative_buckets, span = relative_bias_span(c);
  if (table.size() != size_t{B} * H)
    throw std::invalid_argument("relative_bias_rows: a table of " + std::to_string(table.size()) +
                                " floats, not buckets x heads " + std::to_string(size_t{B} * H));
  const bool bidirectional = !c.causal;
  std::vector<float> rows(size_t{H} * span);
  for (uint32_t i = 0; i < span; i++) {
    const int64_t rel = int64_t{i} - (c.n_ctx - 1);
    const uint32_t b = relative_bucket(rel, bidirectional, B, c.relative_max_distance);
    for (uint32_t h = 0; h < H; h++) rows[size_t{h} * span + i] = table[size_t{b} * H + h];
  }
  return rows;
}

}  // namespace model
