// The op vocabulary: what the config, the CPU references and the GPU wrappers all name, as plain
// data with no Vulkan. The values are the shaders' own constants (shaders/*.h), so a GPU wrapper
// passes them to its shader as they are.
#pragma once
#include <cstddef>
#include <cstdint>

#include "shaders/common/types.h"
#include "shaders/cross_entropy.h"
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

// A training target that is none (padding: transformers' label -100, PyTorch's ignore_index): its
// row adds nothing to the loss or the gradients and is not among the rows the mean is over
// (cpu::cross_entropy, gpu::cross_entropy).
inline constexpr int32_t ignore_target = push::CROSS_ENTROPY_IGNORE;

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

// Where training's attention (cpu::attention_sequences and attention_backward, their GPU ops)
// finds its operands over B whole sequences: each sequence's T queries attend to its S keys.
// Rows of q are q_stride floats apart, of k and v kv_stride; head h of C = H D is columns
// q_col + h D .. + D - 1 (k_col, v_col). The gradients dq, dk and dv lie as q, k and v do.
struct SequenceRows {
  uint32_t B = 0, T = 0, S = 0, C = 0, H = 0;
  uint32_t q_stride = 0, kv_stride = 0;
  uint32_t q_col = 0, k_col = 0, v_col = 0;
};
// Self-attention within each sequence, q, k and v the column blocks of the fused QKV projection
// [B, T, 3C].
inline SequenceRows self_attention_rows(uint32_t B, uint32_t T, uint32_t C, uint32_t H) {
  return {B, T, T, C, H, 3 * C, 3 * C, 0, C, 2 * C};
}
// Cross-attention: queries [B, T, C] over each sequence's source keys and values [B, S, C] each.
inline SequenceRows cross_attention_rows(uint32_t B, uint32_t T, uint32_t S, uint32_t C,
                                         uint32_t H) {
  return {B, T, S, C, H, C, C, 0, 0, 0};
}

}  // namespace model
