// Push constants and sizes of shaders/attention_split.comp and attention_merge.comp (split-K
// decode attention), shared by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_ATTENTION_SPLIT_H
#define GPT2VK_ATTENTION_SPLIT_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// AttentionPush's fields, then the number of key blocks.
struct AttentionSplitPush {
  uint T;         // queries; they sit at absolute positions L-T .. L-1
  uint L;         // keys: valid rows of the caches
  uint C;         // model width: row stride of out and of the caches
  uint q_stride;  // row stride of q (3C when q is the fused QKV projection)
  uint causal;    // 1: the query at position p sees keys 0..p; 0: every query sees all L keys
  float scale;    // multiplies q . k before the softmax
  uint splits;    // key blocks of ATTENTION_SPLIT_BLOCK: ceil(L / ATTENTION_SPLIT_BLOCK)
};

// Invocations per workgroup, and keys per block: one score per invocation.
CONST ATTENTION_SPLIT_WG = 64;
CONST ATTENTION_SPLIT_BLOCK = 64;
// The largest head dim: the query slice is kept in shared memory, at most 4 dims per invocation.
CONST ATTENTION_SPLIT_MAX_D = 256;
// Floats of partial dot products staged at once (8 KiB): a batch of keys times the lanes per key.
CONST ATTENTION_SPLIT_DOTS = 2048;
PUSH_NAMESPACE_END

#endif
