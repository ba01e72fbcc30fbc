// Push constants of shaders/activation.comp, shared by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_ACTIVATION_H
#define GPT2VK_ACTIVATION_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// out[n] = f(x[n]), f one of the ACT_* constants (a specialization constant)   [n] -> [n]
struct ActivationPush {
  uint n;
};
PUSH_NAMESPACE_END

#endif
