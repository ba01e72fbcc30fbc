// Host wrapper of shaders/embedding_backward.comp: training's gradient of gpu::embedding.
#pragma once
#include <cstdint>

#include "model/ops/gpu/common.h"

namespace model::gpu {

// The backward (training), as cpu::embedding_backward: for B sequences of T tokens from position
// 0, dwte[ids[i]] += dout[i] and, where dwpe is given (learned positions), dwpe[i % T] += dout[i],
// each channel summed in token order (the same bits every run). Ids must be valid (upload_ids).
// dwte (fp32) may exceed maxStorageBufferRange: it is then bound as blocks of rows, one
// dispatch each. n = B * T.
//   dout [n, C], ids [n] -> dwte [V, C], dwpe [>= T, C] accumulated
void embedding_backward(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& dwte,
                        const vk::BufferSpan* dwpe, const vk::BufferSpan& dout,
                        const vk::BufferSpan& ids, uint32_t n, uint32_t T, uint32_t C, uint32_t V);

}  // namespace model::gpu
