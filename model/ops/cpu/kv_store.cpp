#include "model/ops/cpu/kv_store.h"

#include <algorithm>

namespace model::cpu {

void kv_store(float* k_cache, float* v_cache, const float* qkv, size_t T, size_t C, size_t pos) {
  for (size_t t = 0; t < T; t++) {
    const float* row = qkv + t * 3 * C;
    std::copy(row + C, row + 2 * C, k_cache + (pos + t) * C);
    std::copy(row + 2 * C, row + 3 * C, v_cache + (pos + t) * C);
  }
}

}  // namespace model::cpu
