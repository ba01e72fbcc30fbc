// Host wrapper of shaders/add.comp.
#pragma once
#include "model/gpu/common.h"

namespace gpu {

// out[n] = a[n] + b[n]                                       [n] + [n] -> [n]
void add(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out, const vkr::BufferSpan& a,
         const vkr::BufferSpan& b, uint32_t n);

}  // namespace gpu
