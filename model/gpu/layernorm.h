// Host wrapper of shaders/layernorm.comp.
#pragma once
#include "model/gpu/common.h"
#include "shaders/layernorm.h"

namespace gpu {

enum class LayerNormKind : uint32_t {
  // GPT-2 and torch.nn.LayerNorm: gamma (x - mean) / sqrt(var + eps) + beta, with the
  // population variance (divide by C).
  Standard = push::LAYERNORM_STANDARD,
  // The Annotated Transformer's LayerNorm: gamma (x - mean) / (std + eps) + beta, where std is
  // x.std(-1), torch's default UNBIASED estimate (divide by C - 1). Needs C >= 2.
  StdPlusEps = push::LAYERNORM_STD_PLUS_EPS,
};

// out[t, :] = gamma * normalise(x[t, :]) + beta              [T, C] -> [T, C]
// gamma, beta: fp32 [C]. out must not overlap x. One workgroup per row, so C may be anything; the
// mean and variance are exact to fp32 rounding even for rows with a large mean and small spread.
// Throws vkr::Error for C == 0, StdPlusEps with C < 2, a negative or non-finite eps, spans too
// small, or [T, C] beyond one binding (maxStorageBufferRange; layernorm does not split rows).
// T == 0 records nothing.
void layernorm(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
               const vkr::BufferSpan& x, const vkr::BufferSpan& gamma, const vkr::BufferSpan& beta,
               uint32_t T, uint32_t C, float eps, LayerNormKind kind = LayerNormKind::Standard);

}  // namespace gpu
