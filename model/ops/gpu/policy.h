// The kernel policy: the one place that decides, per device, which variant of each op runs and
// how weights are laid out. Two sets exist. The GPU set (what AMD, Intel, NVIDIA and Apple GPUs
// get) reads storage buffers: matmul_vec for a few rows, tiled matmul beyond, attention.comp,
// layernorm.comp, weights as the checkpoint stores them. The CPU set (what CPU Vulkan devices
// such as lavapipe get) reads through storage texel buffers, where llvmpipe gathers a whole
// vector per lane: interleaved weights for matmul_interleaved, the texel attention with the KV
// store fused in, the texel LayerNorm, LayerNorms fused into small matmuls, an argmax head for
// greedy decoding, and few large top-k workgroups. Why each pays: docs/benchmark.md.
//
// A device runs the set its options ask for (vk::DeviceOptions::kernels: --kernels,
// GPT2VK_KERNELS), or for Auto the one its type calls for; forcing either runs it anywhere, so
// CI runs the GPU set's whole models on lavapipe too.
#pragma once
#include <cstdint>
#include <string>

#include "vk/context.h"

namespace model::gpu {

struct KernelPolicy {
  vk::KernelSet set = vk::KernelSet::Gpu;  // Gpu or Cpu, never Auto
  std::string why;                         // "auto: a CPU device", "forced by --kernels", ...
  // Each op's Auto kernel where the call allows it (alignment, shape; otherwise the portable one).
  bool texel_matmul = false;     // MatmulKernel::VectorTexel for KN/NK weights
  bool texel_attention = false;  // AttentionKernel::Texel (attention_store: one dispatch)
  // AttentionKernel::Split for decoding where the model passes scratch: a decoded token's
  // attention over many workgroups (key blocks x heads) rather than one per head.
  bool split_attention = false;
  bool texel_layernorm = false;  // LayerNormKernel::Texel
  // Weight matrices stored in WeightLayout::Interleaved where matmul_interleaved can read them.
  // Greedy decoding's head then takes the argmax in its own pass (gpu::matmul_argmax).
  bool interleaved_weights = false;
  // Otherwise, weight matrices transposed to [N, K] at upload (Conv1D stores [K, N]): one
  // layout for every matmul and the head, each output's weights contiguous along K, as the
  // GPU set's decode GEMV (matmul_vec_wide) reads them in 16-byte vectors.
  bool nk_weights = false;
  // norm_linear fuses its LayerNorm into an interleaved matmul whose weight has at most this
  // many bytes (0: never): past it, normalising each row once per block of W costs more than
  // the dispatch it saves (docs/benchmark.md, "Tuning decisions").
  uint64_t norm_linear_max_bytes = 0;
  // Logits each top-k invocation reduces per round (model/ops/gpu/topk.cpp).
  uint32_t topk_per_invocation = 4;

  std::string describe() const;  // "cpu (auto: ...)": for `gpt2vk devices` and summaries
};

// The policy for a device of these caps when `asked` (Auto: by its type).
KernelPolicy choose_policy(const vk::DeviceCaps& caps, vk::KernelSet asked);
// The policy of a device: choose_policy(device.caps(), device.kernels_asked()).
KernelPolicy kernel_policy(const vk::Device& device);

}  // namespace model::gpu
