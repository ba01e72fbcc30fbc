// Host wrappers of shaders/layernorm.comp, layernorm_texel.comp and layernorm_backward{,_texel}.comp.
#pragma once
#include "model/ops/gpu/common.h"
#include "model/ops/gpu/kernels.h"
#include "shaders/layernorm.h"

namespace model::gpu {


// out[t, :] = gamma * normalise(x[t, :]) + beta              [T, C] -> [T, C]
// gamma, beta: fp32 [C]; Rms has no beta (beta may be empty, and is not read). out must not
// overlap x. The mean and variance are exact to fp32
// rounding even for rows with a large mean and small spread (two passes).
// Throws vk::Error for C == 0, StdPlusEps with C < 2, a negative or non-finite eps, spans too
// small, or [T, C] beyond one binding (maxStorageBufferRange; layernorm does not split rows).
// T == 0 records nothing.
struct LayerNormArgs {
  vk::BufferSpan out;    // [T, C]
  vk::BufferSpan x;      // [T, C]
  vk::BufferSpan gamma;  // [C]
  vk::BufferSpan beta;   // [C]; Rms: none (empty)
  uint32_t T = 0, C = 0;
  float eps = 1e-5f;
  LayerNormKind kind = LayerNormKind::Standard;
  LayerNormKernel kernel = LayerNormKernel::Auto;
};
void layernorm(const Ops& ops, vk::Recorder& rec, const LayerNormArgs& a);

// Why layernorm_texel.comp (and its backward) cannot run [T, C] rows of x with gamma and beta
// (the backward's: dout) on this device; empty when it can.
std::string layernorm_texel_unsupported(const vk::DeviceCaps& caps, const vk::BufferSpan& x,
                                        const vk::BufferSpan& gamma, const vk::BufferSpan& beta,
                                        uint32_t T, uint32_t C);
// The checks layernorm and layernorm_backward share (`op` names the caller in the error): a
// known kind, C >= 1 (>= 2 for StdPlusEps), eps finite and >= 0; [T, C] within one binding.
void check_layernorm_args(const char* op, uint32_t C, float eps, LayerNormKind kind);
void check_layernorm_range(const char* op, const vk::DeviceCaps& caps, uint32_t T, uint32_t C);

}  // namespace model::gpu
