// Host wrapper of shaders/matmul_backward.comp: the backward of matmul (training).
#pragma once
#include "model/ops/gpu/common.h"

namespace model::gpu {

// As cpu::matmul_backward, for an fp32 W in the KN or NK layout (training keeps fp32 weights):
//   dx = dout W^T (written; a matmul reading W transposed), dw += x^T dout (in W's layout), and
//   dbias += the column sums of dout.
// dx and dbias may be null (an input that needs no gradient; no bias). Every weight-gradient
// output sums the rows in order, the same bits every run. Rows past what one binding holds go
// in several dispatches, each adding its rows' sums in turn. w_t, when given, is W^T in a layout
// of its own for dx (training's Interleaved copy, as outputs K over inputs N, repacked each step
// by gpu::interleave); otherwise dx reads w with its layout swapped.
//   dout [T, N], x [T, K], w [K, N] or [N, K] -> dx [T, K]; dw like w, dbias [N] accumulated
struct MatmulBackwardArgs {
  const vk::BufferSpan* dx = nullptr;     // [T, K]
  vk::BufferSpan dw;                      // like w, accumulated
  const vk::BufferSpan* dbias = nullptr;  // [N], accumulated
  vk::BufferSpan dout;                    // [T, N]
  vk::BufferSpan x;                       // [T, K]
  Weight w;                               // [K, N] or [N, K], fp32
  uint32_t T = 0, K = 0, N = 0;
  const Weight* w_t = nullptr;  // W^T in a layout of its own, for dx
};
void matmul_backward(const Ops& ops, vk::Recorder& rec, const MatmulBackwardArgs& args);

}  // namespace model::gpu
