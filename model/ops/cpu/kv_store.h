// CPU reference of shaders/kv_store.comp.
#pragma once
#include <cstddef>

#include "model/ops/types.h"

namespace model::cpu {

// Copies K and V of T new tokens into cache rows pos .. pos+T-1. With `cache` F16 each value is
// rounded to the nearest fp16, ties to even (what the GPU's fp16 cache holds, bit for bit), and
// stored back as a float.
//                                     [T, 3C] -> k_cache, v_cache [pos .. pos+T-1, C]
void kv_store(float* k_cache, float* v_cache, const float* qkv, size_t T, size_t C, size_t pos,
              DType cache = DType::F32);

}  // namespace model::cpu
