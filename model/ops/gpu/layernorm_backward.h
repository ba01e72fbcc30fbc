// Host wrapper of shaders/layernorm_backward{,_texel}.comp: training's gradient of
// gpu::layernorm.
#pragma once
#include <cstdint>

#include "model/ops/gpu/layernorm.h"

namespace model::gpu {

// The backward (training), as cpu::layernorm_backward: dx from dout, and dgamma, dbeta += their
// sums over the rows (in row order: the same bits every run). Two dispatches: a workgroup per
// row for dx (the forward's statistics recomputed as layernorm.comp computes them), then an
// invocation per channel for dgamma and dbeta. Where the policy asks for texel LayerNorms (and
// C % 4 == 0, dout, x, gamma and stats texel-aligned), layernorm_backward_texel.comp: an
// invocation per row, then one per 4 channels. stats is scratch of 4 floats per row. The same
// limits and errors as layernorm(). Rms has no beta: dbeta may be empty, and is not written.
//   dout [T, C], x [T, C], gamma [C] -> dx [T, C]; dgamma, dbeta [C] accumulated
struct LayerNormBackwardArgs {
  vk::BufferSpan dx;      // [T, C]
  vk::BufferSpan dgamma;  // [C], accumulated
  vk::BufferSpan dbeta;   // [C], accumulated; Rms: none (empty)
  vk::BufferSpan stats;   // scratch: [T, 4]
  vk::BufferSpan dout;    // [T, C]
  vk::BufferSpan x;       // [T, C]
  vk::BufferSpan gamma;   // [C]
  uint32_t T = 0, C = 0;
  float eps = 1e-5f;
  LayerNormKind kind = LayerNormKind::Standard;
};
void layernorm_backward(const Ops& ops, vk::Recorder& rec, const LayerNormBackwardArgs& a);

}  // namespace model::gpu
