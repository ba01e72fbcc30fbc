// Host wrappers of shaders/add.comp (add_texel.comp for the CPU kernel set where it can, as
// gpu::texel_elementwise says) and shaders/fill.comp: the element-wise steps of training (adding
// one gradient into another, zeroing the gradients).
#pragma once
#include "model/ops/gpu/common.h"

namespace model::gpu {

// out[n] = a[n] + b[n]; out may be a or b (in place). Tensors past one binding go in chunks.
//                                                             [n] + [n] -> [n]
void add(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& out, const vk::BufferSpan& a,
         const vk::BufferSpan& b, uint64_t n);

// out[n] = value.                                             -> [n]
void fill(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& out, uint64_t n, float value);

}  // namespace model::gpu
