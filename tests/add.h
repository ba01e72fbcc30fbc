// add: the runtime tests' probe kernel (shaders/add.comp), its host wrapper and its CPU reference.
// No model adds two tensors (the residual adds are matmul epilogues); the runtime tests use it
// for reflection, barriers, splitting and timing because it is the simplest shader there is.
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/ops/gpu/ops.h"
#include "vk/memory.h"
#include "vk/pipeline.h"
#include "vk/recorder.h"

namespace test {

// out[n] = a[n] + b[n]                                       [n] + [n] -> [n]
void gpu_add(const model::gpu::Ops& k, vk::Recorder& rec, const vk::BufferSpan& out, const vk::BufferSpan& a,
             const vk::BufferSpan& b, uint32_t n);
// The same on the CPU, in double, rounded once.
void cpu_add(float* out, const float* a, const float* b, size_t n);

}  // namespace test
