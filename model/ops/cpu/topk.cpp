#include "model/ops/cpu/topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace model::cpu {

void topk(int32_t* ids, float* values, const float* logits, size_t V, size_t k) {
  // The value each logit is ranked and reported by, and its totalOrder key.
  auto value = [&](size_t i) {
    return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
  };
  auto key = [&](size_t i) {
    float v = value(i);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  };
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), size_t{0});
  std::partial_sort(
      order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
      [&](size_t a, size_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
  for (size_t r = 0; r < k; r++) {
    ids[r] = static_cast<int32_t>(order[r]);
    values[r] = value(order[r]);
  }
}

}  // namespace model::cpu
