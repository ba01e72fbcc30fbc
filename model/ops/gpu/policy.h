// The kernel policy: what a device's kernel set prefers, decided once per device; choose.h turns
// it into the kernel each call runs and the layout each weight gets. Two sets exist. The GPU set
// (what AMD, Intel, NVIDIA and Apple GPUs get) reads storage buffers: weights transposed to
// [N, K], matmul_vec_wide for a few rows (with the LayerNorm before it fused in, up to a size),
// tiled matmul beyond, the split attention for decoding, the tiled attention for prompts,
// layernorm.comp otherwise. The CPU set (what CPU Vulkan devices such as lavapipe get) reads
// through storage texel buffers, where llvmpipe gathers a whole vector per lane:
// interleaved weights for matmul_interleaved, the texel attention with the KV store fused in,
// the texel LayerNorm, LayerNorms fused into small matmuls, an argmax head for greedy
// decoding, and few large top-k workgroups. Why each pays: docs/benchmark.md.
//
// A device runs the set its options ask for (vk::DeviceOptions::kernels: --kernels,
// GPT2VK_KERNELS), or for Auto the one its type calls for; forcing either runs it anywhere, so
// CI runs the GPU set's whole models on lavapipe too.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "vk/context.h"

namespace model::gpu {

// The GPU set's sizes for one GPU architecture, from the tuning table in policy.cpp. A device
// the table does not know gets the defaults, safe everywhere; every size is still clamped to the
// device's limits where it is used.
struct GpuTuning {
  std::string arch = "unknown";  // "AMD RDNA", "NVIDIA", "Arm Mali", ...
  // matmul_vec_wide's invocations per gemv_outs rows of W, a power of two: one or two of the
  // architecture's SIMD groups, so the one reduction per row stays short. gemv_outs (1, 2 or
  // 4, at most MATMUL_WIDE_MAX_OUTS) rows of W per workgroup: each lane keeps two 16-byte
  // loads of each in flight. GPT2VK_GEMV=WGxOUTS (e.g. 128x4) sets both, for measuring.
  uint32_t gemv_workgroup = 64;
  uint32_t gemv_outs = 2;
  // Prompts' matmuls on the matrix units (MatmulKernel::Coop) where the device has them, unless
  // GPT2VK_COOP_MATRIX says otherwise. On for NVIDIA, where they were measured faster than the
  // scalar tiles; off where not measured (docs/benchmark.md, "The matrix units redone").
  bool coop_matrix_prompts = false;
  // KernelPolicy::norm_linear_max_bytes for decoding's GEMV (matmul_vec_wide): each of its
  // N / 2 workgroups reads x's rows twice more for the LayerNorm's statistics, a cost that grows
  // with N x K while the dispatch it saves costs the same whatever the size. On an H100, GPT-2
  // small's fused GEMVs (3.4-4.5 MiB of fp16) took 3.8 us more each and saved a 6.5 us
  // LayerNorm: about even at 7 MiB (docs/benchmark.md, "Decoding's LayerNorms"); on an H200,
  // XL's with its 15-20 MiB weights fused too were 5% slower. GPT2VK_NORM_GEMV_MIB=N sets it,
  // for measuring.
  uint64_t norm_gemv_max_bytes = uint64_t{6} << 20;
  // Workgroups the tiled attention aims for (AttentionKernel::Tiled): where its blocks of
  // queries times heads are fewer, it splits the keys into ranges (given scratch), so a short
  // prompt over many cached keys still fills the device. About two per compute unit of a large
  // GPU (an H100 has 132); a small GPU splits a little more than it needs. Not measured.
  uint32_t attention_groups = 256;
  // The cooperative-matrix matmul takes its 128 x 128 tiles (four times the fragment products
  // per barrier of the 64 x 64 ones) where they still make at least this many workgroups: about
  // one per compute unit of a large GPU. Smaller grids take 64 x 64 tiles. Not yet measured.
  uint32_t coop_large_groups = 128;
  // The split attention merges its key blocks in its own dispatch (its last workgroup of each
  // query's head; attention_split.comp) where the model gives it counts, rather than in an
  // attention_merge dispatch after it: one dispatch and one barrier fewer per layer and token.
  // Not yet measured on a GPU; GPT2VK_SPLIT_MERGE=apart|fused sets it, for measuring.
  bool split_merge_fused = true;
};
// The table's entry for a device: by PCI vendor id, then by name where a vendor's architectures
// differ.
GpuTuning gpu_tuning(const vk::DeviceCaps& caps);

struct KernelPolicy {
  vk::KernelSet set = vk::KernelSet::Gpu;  // Gpu or Cpu, never Auto
  std::string why;                         // "auto: a CPU device", "forced by --kernels", ...
  // Each op's Auto kernel where the call allows it (alignment, shape; otherwise the portable one).
  bool texel_matmul = false;     // MatmulKernel::VectorTexel for KN/NK weights
  bool texel_attention = false;  // AttentionKernel::Texel (attention_store: one dispatch)
  // AttentionKernel::Split for decoding where the model passes scratch: a decoded token's
  // attention over many workgroups (key blocks x heads) rather than one per head.
  bool split_attention = false;
  // AttentionKernel::Tiled for prompts (more than kAttentionSplitMaxT queries): blocks of
  // queries share each key and value load.
  bool tiled_attention = false;
  bool texel_layernorm = false;  // LayerNormKernel::Texel
  // activation, activation_backward, add and cross_entropy in their texel versions
  // (*_texel.comp: four elements or a row per invocation) where the call allows it.
  bool texel_elementwise = false;
  // Weight matrices stored in WeightLayout::Interleaved where matmul_interleaved can read them.
  // Greedy decoding's head then takes the argmax in its own pass (gpu::matmul_argmax).
  bool interleaved_weights = false;
  // Otherwise, weight matrices transposed to [N, K] at upload (Conv1D stores [K, N]): one
  // layout for every matmul and the head, each output's weights contiguous along K, as the
  // GPU set's decode GEMV (matmul_vec_wide) reads them in 16-byte vectors.
  bool nk_weights = false;
  // Prompts' matmuls (fp16 weights, more than kMatmulVecRows rows) on the device's matrix units:
  // MatmulKernel::Coop where the device lists the 16 x 16 x 16 fp16 shape
  // (vk::DeviceCaps::coop_matrix), its subgroups have 32 lanes, the tuning (or
  // GPT2VK_COOP_MATRIX=on) asks for it, and the self-test did not fail (gpu::Ops).
  bool coop_matrix = false;
  // norm_linear fuses its LayerNorm into the matmul after it where that matmul runs
  // matmul_interleaved (CPU set) or matmul_vec_wide (GPU set, decoding) and its weight has at
  // most this many bytes (0: never): past it, normalising x in every workgroup costs more than
  // the dispatch it saves (docs/benchmark.md, "Tuning decisions").
  uint64_t norm_linear_max_bytes = 0;
  // Logits each top-k invocation reduces per round (model/ops/gpu/topk.cpp).
  uint32_t topk_per_invocation = 4;
  GpuTuning tuning;  // the GPU set's sizes (the CPU set keeps the defaults)

  std::string describe() const;  // "cpu (auto: ...)": for `gpt2vk devices` and summaries
};

// Why the cooperative-matrix matmul cannot run on this device (empty: it can): on its matrix
// units (hardware: MatmulKernel::Coop) or emulated (CoopEmulated). The policy asks it before
// choosing the matrix units; the matmul fails with it.
std::string matmul_coop_unsupported(const vk::DeviceCaps& caps, bool hardware);

// The policy for a device of these caps when `asked` (Auto: by its type); `coop` as
// vk::DeviceOptions::coop_matrix (unset: the tuning table's coop_matrix_prompts).
KernelPolicy choose_policy(const vk::DeviceCaps& caps, vk::KernelSet asked,
                           std::optional<bool> coop = std::nullopt);
}  // namespace model::gpu
