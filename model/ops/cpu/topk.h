// CPU reference of shaders/topk.comp.
#pragma once
#include <cstddef>
#include <cstdint>

namespace model::cpu {

// The k largest logits, best first; ties to the lower index.          [V] -> ids [k], values [k]
// The GPU's order: IEEE 754 totalOrder on the values (+0 above -0), NaN counted and reported
// as -inf. Requires 1 <= k <= V.
void topk(int32_t* ids, float* values, const float* logits, size_t V, size_t k);

}  // namespace model::cpu
