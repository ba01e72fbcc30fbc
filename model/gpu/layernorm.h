// Host wrapper of shaders/layernorm.comp and layernorm_texel.comp.
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

enum class LayerNormKernel : uint32_t {
  Auto,      // Texel where layernorm_prefers_texel() and the call allows it, otherwise Portable
  Portable,  // layernorm.comp: one workgroup per row, storage buffers; any C, any device
  // layernorm_texel.comp: one invocation per row, x, gamma and beta read as rgba32f texels.
  // Needs rgba32f storage texel buffers, C % 4 == 0, x, gamma and beta aligned to
  // minTexelBufferOffsetAlignment and [T, C] within maxTexelBufferElements; throws otherwise.
  Texel,
};

// out[t, :] = gamma * normalise(x[t, :]) + beta              [T, C] -> [T, C]
// gamma, beta: fp32 [C]. out must not overlap x. The mean and variance are exact to fp32
// rounding even for rows with a large mean and small spread (two passes).
// Throws vkr::Error for C == 0, StdPlusEps with C < 2, a negative or non-finite eps, spans too
// small, or [T, C] beyond one binding (maxStorageBufferRange; layernorm does not split rows).
// T == 0 records nothing.
void layernorm(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
               const vkr::BufferSpan& x, const vkr::BufferSpan& gamma, const vkr::BufferSpan& beta,
               uint32_t T, uint32_t C, float eps, LayerNormKind kind = LayerNormKind::Standard,
               LayerNormKernel kernel = LayerNormKernel::Auto);

// Whether Auto picks the texel kernel on this device where it can: on CPU devices.
bool layernorm_prefers_texel(const vkr::DeviceCaps& caps);

}  // namespace gpu
