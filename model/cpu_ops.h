// CPU reference for every GPU op: same names and argument order as model/gpu_ops.h (outputs,
// inputs, weights, sizes). Accumulates in double and rounds once, favouring exactness over speed.
#pragma once
#include <cstddef>

namespace cpu {

// out[n] = a[n] + b[n]                                       [n] + [n] -> [n]
void add(float* out, const float* a, const float* b, size_t n);

}  // namespace cpu
