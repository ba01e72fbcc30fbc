// Host wrapper of shaders/matmul.comp (tiled, for prefill), the matrix-vector kernels for decode
// (matmul_vec.comp; matmul_vec_wide*.comp, the GPU set's, for W [N, K]; matmul_vec_texel.comp)
// and matmul_interleaved.glsl (the CPU set's): the linear layer y = act(x W + b) + residual.
#pragma once
#include "model/ops/gpu/matmul_plan.h"

namespace model::gpu {

// out[t, n] = act(sum_k x[t, k] W(k, n) + bias[n]) + residual[t, n], accumulated in fp32.
//   [T, K] x [K, N] (or [N, K]) + [N] + [T, N] -> [T, N]
// bias and residual may be null. residual may be out itself (the in-place residual stream) but
// must not overlap it otherwise; x, W and bias must not overlap out.
// Tensors larger than the device's maxStorageBufferRange (or, for VectorTexel, whose texels
// exceed maxTexelBufferElements) are split into several dispatches:
// W into blocks of whole rows (of N for [N, K], of K for [K, N], whose partial sums accumulate in
// out), x and out into blocks of rows. One row of x, out and W must each fit in the range. A
// split over K cannot keep an in-place residual alive under an activation; that case throws.
struct MatmulArgs {
  vk::BufferSpan out;                        // [T, N]
  vk::BufferSpan x;                          // [options.x_row + T, K]
  Weight w;                                  // [K, N] or [N, K], as options.layout says
  const vk::BufferSpan* bias = nullptr;      // [N]
  const vk::BufferSpan* residual = nullptr;  // [T, N]; may be out itself
  uint32_t T = 0, K = 0, N = 0;
  MatmulOptions options;
};
void matmul(const Ops& ops, vk::Recorder& rec, const MatmulArgs& a);

}  // namespace model::gpu
