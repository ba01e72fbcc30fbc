// Host wrapper of shaders/attention.comp.
#pragma once
#include "model/gpu/common.h"

namespace gpu {

struct AttentionOptions {
  bool causal = true;  // false: bidirectional (an encoder), every query sees all L keys
  float scale = 0;     // multiplies q . k; 0 means 1 / sqrt(D)
};

// Multi-head scaled dot-product attention of T queries against the first L rows of a KV cache.
// The queries sit at absolute positions L-T .. L-1 (prefill: T = L; decode: T = 1); in causal
// mode the query at position p attends keys 0..p. q is read from columns [0, C) of rows with
// stride q_stride, so the fused QKV projection (q_stride = 3C) is passed as is. Head h is columns
// h*D .. h*D+D-1 of q, the caches and out, D = C / H. Needs no scratch memory.
//                      q [T, q_stride], k_cache [>= L, C], v_cache [>= L, C] -> out [T, C]
void attention(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
               const vkr::BufferSpan& q, uint32_t q_stride, const vkr::BufferSpan& k_cache,
               const vkr::BufferSpan& v_cache, uint32_t T, uint32_t L, uint32_t C, uint32_t H,
               const AttentionOptions& options = {});

}  // namespace gpu
