// Host wrappers for the shaders in shaders/: each records one op into a Recorder. Same names and
// argument order as the CPU reference in model/cpu_ops.h. Tensors are fp32 BufferSpans.
#pragma once
#include <cstdint>

#include "vk/context.h"
#include "vk/memory.h"
#include "vk/pipeline.h"
#include "vk/recorder.h"

namespace gpu {

// The workgroup size for element-wise ops on this device.
uint32_t elementwise_workgroup(const vkr::DeviceCaps& caps);

// out[n] = a[n] + b[n]                                       [n] + [n] -> [n]
void add(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out, const vkr::BufferSpan& a,
         const vkr::BufferSpan& b, uint32_t n);

}  // namespace gpu
