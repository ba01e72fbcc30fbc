// Host wrapper of shaders/topk.comp: the k largest logits, so greedy and top-k decoding read back
// k ids and values instead of V floats.
#pragma once
#include "model/ops/gpu/common.h"

namespace model::gpu {

// Largest k topk accepts. Each workgroup spends k rounds of a shared-memory reduction, so the
// cost grows linearly in k; beyond a few hundred, sorting on the host is the better tool.
constexpr uint32_t kTopkMax = 256;

// Bytes of scratch topk needs for V logits on this device; 0 when one workgroup does it all (any
// span, even an empty one, will then do). The scratch must start on a multiple of
// minStorageBufferOffsetAlignment, as arena allocations do.
size_t topk_scratch_bytes(const Ops& ops, uint32_t V, uint32_t k);

// The k largest logits, best first: ids [k] int32 and values [k] fp32.    [V] -> [k], [k]
// Ties go to the lower index. Values are ordered by IEEE 754 totalOrder (+0 above -0); a NaN
// logit counts as -inf and is reported as -inf. 1 <= k <= min(V, kTopkMax). Deterministic: the
// order is total, so the answer does not depend on how the work was split.
struct TopkArgs {
  vk::BufferSpan out_ids;     // [k] int32
  vk::BufferSpan out_values;  // [k]
  vk::BufferSpan logits;      // [V]
  vk::BufferSpan scratch;     // topk_scratch_bytes(V, k)
  uint32_t V = 0, k = 0;
};
void topk(const Ops& ops, vk::Recorder& rec, const TopkArgs& a);

// topk with k = 1: the id [1] and value [1] of the largest logit (the lowest id among equals).
struct ArgmaxArgs {
  vk::BufferSpan out_id;     // [1] int32
  vk::BufferSpan out_value;  // [1]
  vk::BufferSpan logits;     // [V]
  vk::BufferSpan scratch;    // topk_scratch_bytes(V, 1)
  uint32_t V = 0;
};
void argmax(const Ops& ops, vk::Recorder& rec, const ArgmaxArgs& a);

}  // namespace model::gpu
