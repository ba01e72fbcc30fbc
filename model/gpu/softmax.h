// Host wrapper of shaders/softmax.comp.
#pragma once
#include "model/gpu/common.h"

namespace gpu {

// out[r, :] = softmax(x[r, :] * inv_temperature)            [R, N] -> [R, N]
// One workgroup per row, any N (GPT-2's 50257-wide vocabulary included). In place is
// supported: out may be the same span as x (the out binding is read-write for that); otherwise
// they must not overlap. Masked entries of -inf come out as 0. A tensor larger than
// maxStorageBufferRange (logits [1024, 50257] are 206 MB) is split into row chunks.
// Throws vkr::Error for N == 0, inv_temperature not positive and finite, spans too small, or a
// single row wider than one binding. R == 0 records nothing.
void softmax(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
             const vkr::BufferSpan& x, uint32_t R, uint32_t N, float inv_temperature = 1.0f);

}  // namespace gpu
