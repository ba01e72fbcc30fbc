// Push constants of shaders/softmax.comp, shared by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_SOFTMAX_H
#define GPT2VK_SOFTMAX_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// out[r, :] = softmax(x[r, :] * inv_temperature)            [R, N] -> [R, N]
struct SoftmaxPush {
  uint R;  // rows in this dispatch
  uint N;
  float inv_temperature;
  uint out_first;  // element index of row 0 within the out binding (bindings start aligned)
  uint x_first;    // element index of row 0 within the x binding
};
PUSH_NAMESPACE_END

#endif
