// Host wrappers of shaders/add.comp (add_texel.comp for the CPU kernel set where it can, as
// gpu::texel_elementwise says) and shaders/fill.comp: the element-wise steps of training (adding
// one gradient into another, zeroing the gradients).
#pragma once
#include "model/ops/gpu/common.h"

namespace model::gpu {

// out[n] = a[n] + b[n]; out may be a or b (in place). Tensors past one binding go in chunks.
//                                                             [n] + [n] -> [n]
struct AddArgs {
  vk::BufferSpan out;  // [n]
  vk::BufferSpan a;    // [n]
  vk::BufferSpan b;    // [n]
  uint64_t n = 0;
};
void add(const Ops& ops, vk::Recorder& rec, const AddArgs& args);

// out[n] = value.                                             -> [n]
struct FillArgs {
  vk::BufferSpan out;  // [n]
  uint64_t n = 0;
  float value = 0.0f;
};
void fill(const Ops& ops, vk::Recorder& rec, const FillArgs& a);

}  // namespace model::gpu
