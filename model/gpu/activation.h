// Host wrapper of shaders/activation.comp.
#pragma once
#include "model/gpu/common.h"

namespace gpu {

// out[n] = f(x[n]): gelu (tanh, GPT-2's gelu_new), exact erf gelu, relu, or identity.
//                                                            [n] -> [n]
// out may be the same span as x (in place); otherwise they must not overlap. Tensors larger than
// maxStorageBufferRange are split into aligned chunks. Throws vkr::Error for an unknown kind or
// spans too small. n == 0 records nothing.
void activation(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
                const vkr::BufferSpan& x, uint32_t n, Activation kind);

}  // namespace gpu
