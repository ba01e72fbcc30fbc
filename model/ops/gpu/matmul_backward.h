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
void matmul_backward(const Ops& k, vk::Recorder& rec, const vk::BufferSpan* dx,
                     const vk::BufferSpan& dw, const vk::BufferSpan* dbias,
                     const vk::BufferSpan& dout, const vk::BufferSpan& x, const Weight& w,
                     uint32_t T, uint32_t K, uint32_t N, const Weight* w_t = nullptr);

}  // namespace model::gpu
