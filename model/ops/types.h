// The op vocabulary: what the config, the CPU references and the GPU wrappers all name, as plain
// data with no Vulkan. The values are the shaders' own constants (shaders/*.h), so a GPU wrapper
// passes them to its shader as they are.
#pragma once
#include <cstddef>
#include <cstdint>

#include "shaders/common/types.h"
#include "shaders/embedding.h"
#include "shaders/layernorm.h"
#include "shaders/matmul.h"

namespace model {

// How a weight matrix's elements are stored on the device. Activations are always fp32.
enum class DType : uint32_t { F32 = push::DTYPE_F32, F16 = push::DTYPE_F16 };
constexpr size_t dtype_bytes(DType t) {
  return t == DType::F16 ? 2 : 4;
}

enum class Activation : uint32_t {
  None = push::ACT_NONE,
  GeluTanh = push::ACT_GELU_TANH,  // GPT-2's gelu_new
  GeluErf = push::ACT_GELU_ERF,    // exact GELU
  Relu = push::ACT_RELU,
  Tanh = push::ACT_TANH,  // BERT's pooler (not an MLP activation)
  Silu = push::ACT_SILU,  // x sigmoid(x), Marian's "swish"
};

enum class LayerNormKind : uint32_t {
  // GPT-2 and torch.nn.LayerNorm: gamma (x - mean) / sqrt(var + eps) + beta, with the
  // population variance (divide by C).
  Standard = push::LAYERNORM_STANDARD,
  // The Annotated Transformer's LayerNorm: gamma (x - mean) / (std + eps) + beta, where std is
  // x.std(-1), torch's default UNBIASED estimate (divide by C - 1). Needs C >= 2.
  StdPlusEps = push::LAYERNORM_STD_PLUS_EPS,
  // T5's T5LayerNorm (RMSNorm): gamma x / sqrt(mean(x^2) + eps). No mean subtracted and no
  // beta: the ops take an empty beta (GPU) or null (CPU) for it and ignore one given.
  Rms = push::LAYERNORM_RMS,
};

enum class PositionKind : uint32_t {
  Learned = push::POS_LEARNED,        // wpe [n_pos, C], GPT-2
  Sinusoidal = push::POS_SINUSOIDAL,  // sin/cos of "Attention Is All You Need"
  None = push::POS_NONE,              // no position term
  // The same sinusoids, sin in the first half of the channels and cos in the second (Marian)
  SinusoidalHalves = push::POS_SINUSOIDAL_HALVES,
};

enum class WeightLayout : uint32_t {
  KN = push::MATMUL_KN,  // W [K, N], y = x W: Hugging Face GPT-2 Conv1D (c_attn, c_proj, c_fc)
  NK = push::MATMUL_NK,  // W [N, K], y = x W^T: rows are outputs (the tied head reading wte)
  // W [N, K] repacked by gpu::interleave() for matmul_interleaved.glsl: the layout of the CPU
  // kernel set (model/ops/gpu/policy.h). One layout for decode and prefill; embedding() reads a
  // tied wte in it too.
  Interleaved = push::MATMUL_INTERLEAVED,
};

// How attention masks and scales its scores (gpu::AttentionOptions adds the kernel to run).
struct AttentionSpec {
  bool causal = true;  // false: bidirectional (an encoder), every query sees all L keys
  float scale = 0;     // multiplies q . k; 0 means 1 / sqrt(D)
  // T5's relative position bias: 0, none; else an odd 2R + 1, the row length of a table
  // [H, bias_span] whose entry h * bias_span + R + (j - p) is added to the scaled score of head
  // h's query at position p against key j, before the mask and the softmax. The host keeps every
  // visible j - p within [-R, R] (the ops check R >= L - 1, or n_ctx - 1 for positions read at
  // run time). The table is the op's argument (cpu::attention's bias,
  // gpu::AttentionOptions::bias). Training's attention has no kernels for it yet and throws.
  uint32_t bias_span = 0;
};

}  // namespace model
