// CPU reference of shaders/add.comp.
#pragma once
#include <cstddef>

namespace cpu {

// out[n] = a[n] + b[n]                                       [n] + [n] -> [n]
void add(float* out, const float* a, const float* b, size_t n);

}  // namespace cpu
