// Push constants of shaders/gated_activation.comp and gated_activation_texel.comp, shared by GLSL
// and C++ (see shaders/common/types.h).
#ifndef GPT2VK_GATED_ACTIVATION_H
#define GPT2VK_GATED_ACTIVATION_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// out[t, f] = f(x[t, f]) * x[t, F + f], f one of the ACT_* constants (a specialization
// constant): T5 v1.1's gated feed-forward, x the two projections side by side.
//                                                            [T, 2F] -> [T, F]
struct GatedActivationPush {
  uint T;
  uint F;
};
PUSH_NAMESPACE_END

#endif
