#include "model/ops/cpu/kv_store.h"

#include <algorithm>

#include "model/ops/cpu/common.h"

namespace model::cpu {

void kv_store(float* k_cache, float* v_cache, const float* qkv, size_t T, size_t C, size_t pos,
              DType cache) {
  const auto stored = [cache](float v) {
    return cache == DType::F16 ? round_to_half(v) : v;
  };
  for (size_t t = 0; t < T; t++) {
    const float* row = qkv + t * 3 * C;
    std::transform(row + C, row + 2 * C, k_cache + (pos + t) * C, stored);
    std::transform(row + 2 * C, row + 3 * C, v_cache + (pos + t) * C, stored);
  }
}

}  // namespace model::cpu
