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
struct KvStoreArgs {
  vk::BufferSpan k_cache;  // [n_ctx, C]: rows pos .. pos+T-1 written
  vk::BufferSpan v_cache;  // [n_ctx, C]: rows pos .. pos+T-1 written
  vk::BufferSpan qkv;      // [T, 3C]
  uint32_t T = 0, C = 0, pos = 0;
  const vk::BufferSpan* step = nullptr;  // [1] uint32: pos
  DType cache = DType::F32;
};
void kv_store(const Ops& ops, vk::Recorder& rec, const KvStoreArgs& a);

}  // namespace model::gpu
