// CPU reference of shaders/kv_store.comp.
#pragma once
#include <cstddef>

namespace model::cpu {

// Copies K and V of T new tokens into cache rows pos .. pos+T-1.
//                                     [T, 3C] -> k_cache, v_cache [pos .. pos+T-1, C]
void kv_store(float* k_cache, float* v_cache, const float* qkv, size_t T, size_t C, size_t pos);

}  // namespace model::cpu
