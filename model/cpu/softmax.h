// CPU reference of shaders/softmax.comp.
#pragma once
#include <cstddef>

namespace cpu {

// out[r, :] = softmax(x[r, :] * inv_temperature), inv_temperature > 0      [R, N] -> [R, N]
// In double; out may be x.
void softmax(float* out, const float* x, size_t R, size_t N, float inv_temperature = 1.0f);

}  // namespace cpu
