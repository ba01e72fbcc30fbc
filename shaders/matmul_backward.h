// Push constants and tile sizes of shaders/matmul_backward.comp, shared by GLSL and C++ (see
// shaders/common/types.h).
#ifndef GPT2VK_MATMUL_BACKWARD_H
#define GPT2VK_MATMUL_BACKWARD_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// The weight gradient's tiles: a workgroup of 16 x 8 invocations owns 64 x 64 outputs (4 of n by
// 8 of k each) and steps over the rows 16 at a time through shared memory. 128 invocations:
// every Vulkan device allows them.
CONST MATMUL_BACKWARD_TILE = 64;
CONST MATMUL_BACKWARD_ROWS = 16;

// dw(k, n) += sum over t < rows of x[t, k] dout[t, n] (W's layout a specialization constant);
// the bias pass: dbias[n] += sum_t dout[t, n]. x and dout are windows starting at an aligned
// offset at or before their first row.                 x [rows, K], dout [rows, N] -> dw, dbias
struct MatmulBackwardPush {
  uint rows;
  uint K;
  uint N;
  uint x_off;
  uint dout_off;
};
PUSH_NAMESPACE_END

#endif
