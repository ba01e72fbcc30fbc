// CPU reference of shaders/matmul.comp and shaders/matmul_vec.comp.
#pragma once
#include <cstddef>

#include "model/ops/cpu/common.h"
#include "model/ops/types.h"

namespace model::cpu {

// out[t, n] = act(sum_k x[t, k] W(k, n) + bias[n]) + residual[t, n], in double.
//   [T, K] x [K, N] (or [N, K]) + [N] + [T, N] -> [T, N]
// w holds the weight's values as the GPU reads them (cpu::round_to_half'ed for fp16 weights).
// bias and residual may be null; residual may be out itself.
void matmul(float* out, const float* x, const float* w, const float* bias, const float* residual,
            size_t T, size_t K, size_t N, model::WeightLayout layout,
            model::Activation act = model::Activation::None);

}  // namespace model::cpu
