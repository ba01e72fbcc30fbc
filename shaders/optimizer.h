// Push constants and sizes of the optimizer shaders (grad_sum_squares.comp, adamw.comp), shared
// by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_OPTIMIZER_H
#define GPT2VK_OPTIMIZER_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// grad_sum_squares.comp: its reduction array (a fixed size: Metal) and the elements each
// workgroup sums into one partial (GRAD_CHUNK_PER_INVOCATION per invocation).
CONST GRAD_MAX_WORKGROUP = 256;
CONST GRAD_CHUNK_PER_INVOCATION = 16;

// Workgroup g writes partial[out_skip + g] = the sum of x[skip + i]^2 (or of x[skip + i] with
// square = 0) over its chunk i in [g * chunk, min(n, (g + 1) * chunk)).   x [n] -> partial [groups]
struct GradSumSquaresPush {
  uint n;
  uint chunk;
  uint skip;
  uint out_skip;
  uint square;
  uint groups;  // partials this dispatch writes (the grid may fold into more workgroups)
};

// One step of AdamW (or SGD, a specialization constant) on n parameters, the gradient first
// scaled by the global clip: g *= min(1, clip / (norm + 1e-6)) when clip > 0, norm =
// sqrt(norm_sq); nothing changes when the norm is not finite.
struct AdamWPush {
  uint n;
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  float bias1;  // 1 - beta1^step
  float bias2;  // 1 - beta2^step
  float clip;   // 0: no clipping
};
PUSH_NAMESPACE_END

#endif
