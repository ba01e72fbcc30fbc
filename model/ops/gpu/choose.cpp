#include "model/ops/gpu/choose.h"

namespace model::gpu {

Order<MatmulKernel> matmul_order(const KernelPolicy& p, DType dtype, WeightLayout layout,
                                 uint32_t T) {
  Order<MatmulKernel> o;
  // matmul_interleaved is the one kernel that reads the Interleaved layout.
  if (layout == WeightLayout::Interleaved) {
    o.add(MatmulKernel::VectorTexel);
    return o;
  }
  // On a CPU device the texel matrix-vector kernel, run in passes of kMatmulVecRows rows,
  // beats the shared-memory tiles even for long prompts: llvmpipe's barriers and scalar
  // per-lane loads cost more than reading the weights once per pass.
  if (p.texel_matmul) o.add(MatmulKernel::VectorTexel);
  if (T > kMatmulVecRows) {
    // Matrix units take fp16 inputs: fp32 weights keep the fp32 tiles.
    if (p.coop_matrix && dtype == DType::F16) o.add(MatmulKernel::Coop);
    o.add(MatmulKernel::Tiled);
  } else {
    o.add(MatmulKernel::VectorWide);
    o.add(MatmulKernel::Vector);
  }
  return o;
}

bool matmul_backward_texel(const KernelPolicy& p) { return p.texel_matmul; }

Order<AttentionKernel> attention_order(const KernelPolicy& p, uint32_t T) {
  Order<AttentionKernel> o;
  if (p.texel_attention) o.add(AttentionKernel::Texel);
  if (p.split_attention && T <= kAttentionSplitMaxT) o.add(AttentionKernel::Split);
  if (p.tiled_attention && T > kAttentionSplitMaxT) o.add(AttentionKernel::Tiled);
  o.add(AttentionKernel::Portable);
  return o;
}

// The storage-buffer kernels are the ones that read fp16 caches.
AttentionKernel attention_batch_kernel(const KernelPolicy& p, DType cache) {
  if (p.texel_attention && cache == DType::F32) return AttentionKernel::Texel;
  if (p.split_attention || cache == DType::F16) return AttentionKernel::Split;
  return AttentionKernel::Auto;
}

bool attention_sequences_texel(const KernelPolicy& p) { return p.texel_attention; }

bool attention_needs_scratch(const KernelPolicy& p, uint32_t slots, DType cache) {
  return p.split_attention || p.tiled_attention || (slots > 1 && cache == DType::F16);
}

Order<LayerNormKernel> layernorm_order(const KernelPolicy& p) {
  Order<LayerNormKernel> o;
  if (p.texel_layernorm) o.add(LayerNormKernel::Texel);
  o.add(LayerNormKernel::Portable);
  return o;
}

bool elementwise_texel(const KernelPolicy& p) { return p.texel_elementwise; }

// Fused where the policy says the dispatch it saves costs more than the reads it adds
// (norm_linear_max_bytes): matmul_interleaved (the CPU set's interleaved weights, rows from the
// first only) or matmul_vec_wide (the GPU set's [N, K] weights, at most kMatmulVecRows rows:
// decode steps, batches, short prompts, the head's last row).
NormLinear norm_linear(const KernelPolicy& p, WeightLayout layout, uint64_t w_bytes, uint32_t T,
                       uint32_t in_row, bool wide_fits) {
  if (w_bytes > p.norm_linear_max_bytes) return NormLinear::Apart;
  if (layout == WeightLayout::Interleaved && in_row == 0) return NormLinear::Interleaved;
  if (p.nk_weights && layout == WeightLayout::NK && T <= kMatmulVecRows && wide_fits)
    return NormLinear::Wide;
  return NormLinear::Apart;
}

// Where the policy interleaves, every matrix the matmul reads, the tied wte included (embedding
// reads it there); where it asks for [N, K], every matrix the matmul reads as [N, K] (one layout
// for every matmul and the head, each output's weights contiguous along K, as the decode GEMV
// reads them); otherwise as the checkpoint has it.
WeightLayout weight_layout(const KernelPolicy& p, WeightLayout from, bool matmul_reads,
                           bool interleaved_fits) {
  if (!matmul_reads) return from;
  if (p.interleaved_weights && interleaved_fits) return WeightLayout::Interleaved;
  return p.nk_weights ? WeightLayout::NK : from;
}

bool training_packs_weights(const KernelPolicy& p) { return p.interleaved_weights; }

bool argmax_head(WeightLayout head, uint32_t n_vocab) {
  return head == WeightLayout::Interleaved && n_vocab <= (1u << 24);
}

}  // namespace model::gpu
