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
struct ActivationArgs {
  vk::BufferSpan out;  // [n]
  vk::BufferSpan x;    // [n]
  uint32_t n = 0;
  Activation kind = Activation::None;
};
void activation(const Ops& ops, vk::Recorder& rec, const ActivationArgs& a);

// The backward (training): dx[n] = dout[n] * f'(x[n]), x the activation's input. dx may be the
// same span as dout. The same chunking and errors as activation().    [n], [n] -> [n]
struct ActivationBackwardArgs {
  vk::BufferSpan dx;    // [n]
  vk::BufferSpan dout;  // [n]
  vk::BufferSpan x;     // [n]
  uint32_t n = 0;
  Activation kind = Activation::None;
};
void activation_backward(const Ops& ops, vk::Recorder& rec, const ActivationBackwardArgs& a);

}  // namespace model::gpu
