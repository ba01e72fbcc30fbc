// Host wrapper of shaders/kv_store.comp.
#pragma once
#include "model/ops/gpu/common.h"

namespace model::gpu {

// Copies K and V of T new tokens (columns [C, 2C) and [2C, 3C) of the fused QKV projection) into
// cache rows pos .. pos+T-1. The cache capacity n_ctx is the number of whole rows the spans hold;
// pos + T > n_ctx throws.                [T, 3C] -> k_cache, v_cache [pos .. pos+T-1 of n_ctx, C]
// step: the position read at run time (gpu::step_binding); it must then hold pos.
// cache: the caches' element type. F16 rounds each value to the nearest half, ties to even, in
// integer arithmetic (shaders/common/half.glsl: the same halves on every driver and in
// cpu::kv_store), and needs an even C.
void kv_store(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& k_cache,
              const vk::BufferSpan& v_cache, const vk::BufferSpan& qkv, uint32_t T, uint32_t C,
              uint32_t pos, const vk::BufferSpan* step = nullptr, DType cache = DType::F32);

}  // namespace model::gpu
