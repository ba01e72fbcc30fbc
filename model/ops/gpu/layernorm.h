// Host wrappers of shaders/layernorm.comp, layernorm_texel.comp and layernorm_backward{,_texel}.comp.
#pragma once
#include "model/ops/gpu/common.h"
#include "shaders/layernorm.h"

namespace model::gpu {

enum class LayerNormKernel : uint32_t {
  Auto,      // Texel where the kernel policy's texel_layernorm and the call allows it, otherwise Portable
  Portable,  // layernorm.comp: one workgroup per row, storage buffers; any C, any device
  // layernorm_texel.comp: one invocation per row, x, gamma and beta read as rgba32f texels.
  // Needs rgba32f storage texel buffers, C % 4 == 0, x, gamma and beta aligned to
  // minTexelBufferOffsetAlignment and [T, C] within maxTexelBufferElements; throws otherwise.
  Texel,
};

// out[t, :] = gamma * normalise(x[t, :]) + beta              [T, C] -> [T, C]
// gamma, beta: fp32 [C]. out must not overlap x. The mean and variance are exact to fp32
// rounding even for rows with a large mean and small spread (two passes).
// Throws vk::Error for C == 0, StdPlusEps with C < 2, a negative or non-finite eps, spans too
// small, or [T, C] beyond one binding (maxStorageBufferRange; layernorm does not split rows).
// T == 0 records nothing.
void layernorm(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& out,
               const vk::BufferSpan& x, const vk::BufferSpan& gamma, const vk::BufferSpan& beta,
               uint32_t T, uint32_t C, float eps, LayerNormKind kind = LayerNormKind::Standard,
               LayerNormKernel kernel = LayerNormKernel::Auto);

// The backward (training), as cpu::layernorm_backward: dx from dout, and dgamma, dbeta += their
// sums over the rows (in row order: the same bits every run). Two dispatches: a workgroup per
// row for dx (the forward's statistics recomputed as layernorm.comp computes them), then an
// invocation per channel for dgamma and dbeta. Where the policy asks for texel LayerNorms (and
// C % 4 == 0, dout, x, gamma and stats texel-aligned), layernorm_backward_texel.comp: an
// invocation per row, then one per 4 channels. stats is scratch of 4 floats per row. The same
// limits and errors as layernorm().
//   dout [T, C], x [T, C], gamma [C] -> dx [T, C]; dgamma, dbeta [C] accumulated
void layernorm_backward(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& dx,
                        const vk::BufferSpan& dgamma, const vk::BufferSpan& dbeta,
                        const vk::BufferSpan& stats, const vk::BufferSpan& dout,
                        const vk::BufferSpan& x, const vk::BufferSpan& gamma, uint32_t T,
                        uint32_t C, float eps, LayerNormKind kind = LayerNormKind::Standard);

}  // namespace model::gpu
