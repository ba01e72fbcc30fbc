#include "model/cpu/add.h"

namespace cpu {

void add(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = static_cast<float>(static_cast<double>(a[i]) + static_cast<double>(b[i]));
}

}  // namespace cpu
