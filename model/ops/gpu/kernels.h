// The kernels each GPU op has, by name: what a call may ask for (its options' `kernel`), what
// the kernel policy prefers (policy.h) and what choose.h picks for Auto. Plain enums, so that the
// policy and the choice need no op's header.
#pragma once
#include <cstdint>

namespace model::gpu {

enum class MatmulKernel : uint32_t {
  // The first kernel of choose.h's matmul_order that can run the call.
  Auto,
  Vector,  // matmul_vec: each weight read once per kMatmulVecRows rows, storage buffers
  Tiled,   // matmul: shared-memory tiles
  // matmul_vec_texel: Vector's work with x and W read through storage texel buffers. Needs
  // matmul_texel_supported() and x, W spans aligned to minTexelBufferOffsetAlignment (arena
  // allocations on a device whose texel alignment is at most its storage alignment); throws
  // otherwise.
  VectorTexel,
  // matmul_vec_wide: the GPU set's decode GEMV for W [N, K] and T <= kMatmulVecRows, 16-byte
  // loads along K and a subgroup (or shared-memory) reduction. Needs matmul_wide_supported();
  // throws otherwise.
  VectorWide,
  // matmul_coop: the tiled product on the device's matrix units (VK_NV_cooperative_matrix;
  // 16 x 16 x 16 fp16 fragments, fp32 accumulation, 64 x 64 or 128 x 128 tiles of 4 subgroups;
  // x and W rounded to fp16). Auto takes it for prompts with fp16 weights where the kernel
  // policy's coop_matrix allows. Needs vk::DeviceCaps::coop_matrix and 32-lane subgroups;
  // throws otherwise.
  Coop,
  // matmul_coop_emulated: the same tiling and code, its three fragment operations emulated in
  // scalar arithmetic (matmul_coop.glsl), so that its staging and indexing run where no device
  // has matrix units. Only when asked for. Needs 128-invocation workgroups and 20 KiB of shared
  // memory; throws otherwise.
  CoopEmulated,
};

// Rows of x the matrix-vector kernel handles in one pass (larger T loops over passes).
constexpr uint32_t kMatmulVecRows = 8;

enum class AttentionKernel : uint32_t {
  // The first kernel of choose.h's attention_order that can run the call.
  Auto,
  // attention.comp: one workgroup per (query, head) reading storage buffers, keys spread over
  // its invocations. Any head dim, any device.
  Portable,
  // attention_texel.comp (attention_texel_store.comp with kv_store fused in): an invocation
  // owns whole queries of one head and reads q and the caches through rgba32f storage texel
  // buffers. Needs rgba32f storage texel buffers, D % 4 == 0,
  // D <= kAttentionTexelMaxD, q_stride % 4 == 0, q and the caches aligned to
  // minTexelBufferOffsetAlignment and within maxTexelBufferElements; throws otherwise.
  Texel,
  // attention_split.comp then attention_merge.comp (flash-decoding): workgroups over (key block
  // of 64, head, query), lanes along the head dim with 16-byte loads, the blocks' partial
  // softmax sums merged in a second dispatch. Needs AttentionOptions::scratch (at least
  // attention_split_scratch_bytes()), D % 4 == 0, D <= 256, q_stride % 4 == 0, q and the caches
  // on 16 bytes, 64-invocation workgroups, and no tap; throws otherwise.
  Split,
  // attention_tiled.comp (flash attention on the vector units): workgroups over (block of 16
  // queries, head), each tile of keys and then of values loaded once into shared memory with
  // 16-byte loads and shared by the block's queries. Where those workgroups are fewer than the
  // tuning's attention_groups and AttentionOptions::scratch holds at least two ranges' partial
  // results, the keys are split into ranges too, merged by attention_merge. Needs D % 4 == 0
  // (fp16 cache: D % 8 == 0), D <= 128, q_stride % 4 == 0, out, q and the caches on 16 bytes,
  // 128-invocation workgroups, and no tap; throws otherwise.
  Tiled,
};

// Auto takes Split (where the policy's split_attention asks for it) for at most this many
// queries: decoding, and the short steps of speculative or batched decoding. More queries (a
// prompt) take Tiled where the policy's tiled_attention asks for it.
constexpr uint32_t kAttentionSplitMaxT = 8;

enum class LayerNormKernel : uint32_t {
  Auto,      // the first kernel of choose.h's layernorm_order that can run the call
  Portable,  // layernorm.comp: one workgroup per row, storage buffers; any C, any device
  // layernorm_texel.comp: one invocation per row, x, gamma and beta read as rgba32f texels.
  // Needs rgba32f storage texel buffers, C % 4 == 0, x, gamma and beta aligned to
  // minTexelBufferOffsetAlignment and [T, C] within maxTexelBufferElements; throws otherwise.
  Texel,
};

}  // namespace model::gpu
