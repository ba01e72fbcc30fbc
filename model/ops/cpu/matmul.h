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

// The backward of cpu::matmul without its activation (activation_backward comes first):
// dx = dout W^T, dw += x^T dout (in w's layout), dbias += the column sums of dout. dbias may be
// null (no bias).
//   dout [T, N], x [T, K], w [K, N] or [N, K] -> dx [T, K]; dw like w, dbias [N] accumulated
void matmul_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                     const float* w, size_t T, size_t K, size_t N, model::WeightLayout layout);

}  // namespace model::cpu
