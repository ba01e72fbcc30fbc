// Host wrappers of shaders/activation.comp and activation_backward.comp, and their texel versions
// (*_texel.comp: four elements per invocation) that the CPU kernel set runs where n % 4 == 0 and
// one dispatch holds them (gpu::texel_elementwise).
#pragma once
#include "model/ops/gpu/common.h"

namespace model::gpu {

// out[n] = f(x[n]): gelu (tanh, GPT-2's gelu_new), exact erf gelu, relu, or identity.
//                                                            [n] -> [n]
// out may be the same span as x (in place); otherwise they must not overlap. Tensors larger than
// maxStorageBufferRange are split into aligned chunks. Throws vk::Error for an unknown kind or
// spans too small. n == 0 records nothing.
void activation(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& out,
                const vk::BufferSpan& x, uint32_t n, Activation kind);

// The backward (training): dx[n] = dout[n] * f'(x[n]), x the activation's input. dx may be the
// same span as dout. The same chunking and errors as activation().    [n], [n] -> [n]
void activation_backward(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& dx,
                         const vk::BufferSpan& dout, const vk::BufferSpan& x, uint32_t n,
                         Activation kind);

}  // namespace model::gpu
