// Push constants of shaders/kv_store.comp, shared by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_KV_STORE_H
#define GPT2VK_KV_STORE_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// k_cache[pos + t] = qkv[t, C:2C), v_cache[pos + t] = qkv[t, 2C:3C) for t < T
struct KvStorePush {
  uint T;    // new tokens
  uint C;    // model width: row length of the caches
  uint pos;  // cache row of the first new token
  // 1: plus the Step binding's position, read when the kernel runs; 0: that is not read. (A
  // batch's keys and values are stored by attention_split or attention_texel_store themselves.)
  uint dynamic_pos;
};
PUSH_NAMESPACE_END

#endif
