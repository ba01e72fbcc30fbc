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
struct EmbeddingBackwardArgs {
  vk::BufferSpan dwte;                   // [V, C], accumulated
  const vk::BufferSpan* dwpe = nullptr;  // [>= T, C], accumulated
  vk::BufferSpan dout;                   // [n, C]
  vk::BufferSpan ids;                    // [n] int32
  uint32_t n = 0, T = 0, C = 0, V = 0;
  float scale = 1.0f;  // the forward's (EmbeddingArgs::scale): dwte[ids[i]] += scale dout[i]
};
void embedding_backward(const Ops& ops, vk::Recorder& rec, const EmbeddingBackwardArgs& a);

}  // namespace model::gpu
