// Push constants and kinds of shaders/layernorm.comp, shared by GLSL and C++ (see
// shaders/common/types.h).
#ifndef GPT2VK_LAYERNORM_H
#define GPT2VK_LAYERNORM_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// The normalisation, a specialization constant (model::LayerNormKind mirrors these).
CONST LAYERNORM_STANDARD = 0;      // gamma (x - mean) / sqrt(var + eps) + beta, population var
CONST LAYERNORM_STD_PLUS_EPS = 1;  // gamma (x - mean) / (std + eps) + beta, unbiased std
CONST LAYERNORM_RMS = 2;           // gamma x / sqrt(mean(x^2) + eps): no mean, no beta (T5)

// Largest workgroup layernorm.comp is built for: its shared reduction array, a vec2 per
// invocation (2 KiB), has a fixed size because Metal cannot size one by a specialization constant.
CONST LAYERNORM_MAX_WORKGROUP = 256;

// out[t, :] = layernorm(x[t, :]) * gamma + beta             [T, C] -> [T, C]
struct LayerNormPush {
  uint T;
  uint C;
  float eps;
};
PUSH_NAMESPACE_END

#endif
