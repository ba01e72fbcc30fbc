// Host wrapper of shaders/kv_store.comp.
#pragma once
#include "model/gpu/common.h"

namespace gpu {

// Copies K and V of T new tokens (columns [C, 2C) and [2C, 3C) of the fused QKV projection) into
// cache rows pos .. pos+T-1. The cache capacity n_ctx is the number of whole rows the spans hold;
// pos + T > n_ctx throws.                [T, 3C] -> k_cache, v_cache [pos .. pos+T-1 of n_ctx, C]
void kv_store(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& k_cache,
              const vkr::BufferSpan& v_cache, const vkr::BufferSpan& qkv, uint32_t T, uint32_t C,
              uint32_t pos);

}  // namespace gpu
