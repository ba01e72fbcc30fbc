// Push constants of shaders/attention.comp and shaders/attention_texel.comp, shared by GLSL and
// C++ (see shaders/common/types.h).
#ifndef GPT2VK_ATTENTION_H
#define GPT2VK_ATTENTION_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// out[t, head h] = softmax(scale * q[t, h] . k_cache[j, h]) v_cache[j, h] over the visible keys j
struct AttentionPush {
  uint T;         // queries; they sit at absolute positions L-T .. L-1
  uint L;         // keys: valid rows of the caches
  uint C;         // model width: row stride of out and of the caches
  uint q_stride;  // row stride of q (3C when q is the fused QKV projection)
  uint causal;    // 1: the query at position p sees keys 0..p; 0: every query sees all L keys
  float scale;    // multiplies q . k before the softmax
};
PUSH_NAMESPACE_END

#endif
