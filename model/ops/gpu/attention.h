// Host wrapper of shaders/attention.comp (storage buffers, any device),
// shaders/attention_split.comp + attention_merge.comp (split-K decode, the GPU set's),
// shaders/attention_tiled.comp (query blocks sharing key tiles: prompts, the GPU set's) and
// shaders/attention_texel{,_store}.comp (storage texel buffers, for CPU devices). Training's
// attention is in attention_backward.h.
#pragma once
#include "model/ops/gpu/common.h"
#include "model/ops/gpu/kernels.h"

namespace model::gpu {

// Bytes of scratch Split needs for T queries over L keys: the blocks' partial results.
uint64_t attention_split_scratch_bytes(uint32_t T, uint32_t L, uint32_t C, uint32_t H);

// Bytes of scratch that let Tiled split the keys wherever it would for a device aiming at
// `groups` workgroups (GpuTuning::attention_groups): at most 32 x groups (query, head) rows of
// D + 2 floats. With less, it takes fewer ranges, or none.
uint64_t attention_tiled_scratch_bytes(uint32_t C, uint32_t H, uint32_t groups);
// The scratch a model with a context of n_ctx gives every attention call of its passes:
// Split's for kAttentionSplitMaxT queries over n_ctx keys, and where the policy runs Tiled, the
// most its key ranges take.
uint64_t attention_model_scratch_bytes(const KernelPolicy& policy, uint32_t n_ctx, uint32_t C,
                                       uint32_t H);

// The largest head dim the texel kernel takes: it keeps a query and its sums in registers.
constexpr uint32_t kAttentionTexelMaxD = 256;

struct AttentionOptions : AttentionSpec {
  AttentionKernel kernel = AttentionKernel::Auto;
  // The attention tap: where set, the same kernel (its *_probs module, so a pass without the tap
  // runs unchanged) also writes the softmax weights, [H, T, L]: probs[h][t][j] is query t's
  // weight on key j in head h, 0 for keys a causal query does not see.
  const vk::BufferSpan* probs = nullptr;
  // Split's partial results; without it, Auto does not take Split.
  const vk::BufferSpan* scratch = nullptr;
  // Split's counts of finished key blocks, uint32, zero (and left zero): where they cover the
  // call's [T, H], Split merges the blocks in the same dispatch (AttentionPush.merge), one
  // dispatch instead of two. Ignored by the other kernels.
  const vk::BufferSpan* counts = nullptr;
  // The position read at run time (gpu::step_binding): it must then hold L - T (attention_store:
  // pos). The caches are bound whole.
  const vk::BufferSpan* step = nullptr;
  // The caches' elements: F32, or F16 (half the memory and the bytes a decoded token reads,
  // each key and value rounded once as kv_store stores it; C even). The texel kernel reads only
  // fp32 caches: with F16, Auto takes Split (C % 8 == 0: whole 16-byte rows) or Portable, and a
  // batch Split.
  DType cache = DType::F32;
  // T5's relative position bias, fp32 [H, bias_span] (AttentionSpec::bias_span): row h is head
  // h's bias by distance, entry R + (j - p) for key j and the query at position p. Required iff
  // bias_span != 0. Every kernel and the tap take it; training's attention does not.
  const vk::BufferSpan* bias = nullptr;
};

// Multi-head scaled dot-product attention of T queries against the first L rows of a KV cache.
// The queries sit at absolute positions L-T .. L-1 (prefill: T = L; decode: T = 1); in causal
// mode the query at position p attends keys 0..p. q is read from columns [0, C) of rows with
// stride q_stride, so the fused QKV projection (q_stride = 3C) is passed as is. Head h is columns
// h*D .. h*D+D-1 of q, the caches and out, D = C / H. Only Split needs scratch memory.
//                      q [T, q_stride], k_cache [>= L, C], v_cache [>= L, C] -> out [T, C]
struct AttentionArgs {
  vk::BufferSpan out;      // [T, C]
  vk::BufferSpan q;        // [T, q_stride]: columns [0, C) read
  vk::BufferSpan k_cache;  // [>= L, C]
  vk::BufferSpan v_cache;  // [>= L, C]
  uint32_t q_stride = 0;   // floats from one row of q to the next (the fused QKV's: 3C)
  uint32_t T = 0, L = 0, C = 0, H = 0;
  AttentionOptions options;
};
void attention(const Ops& ops, vk::Recorder& rec, const AttentionArgs& a);

// gpu::kv_store then gpu::attention of the same T new tokens: their keys and values (columns
// [C, 2C) and [2C, 3C) of the fused QKV projection) go to cache rows pos .. pos+T-1, then their
// queries (columns [0, C)) attend all pos + T cached keys. With the texel kernel this is one
// dispatch, which reads the new keys and values from qkv while it copies them to the caches;
// otherwise the two ops' dispatches. pos + T > n_ctx, the rows the caches hold, throws.
//   qkv [T, 3C] -> out [T, C]; k_cache, v_cache [n_ctx, C], rows pos .. pos+T-1 written
struct AttentionStoreArgs {
  vk::BufferSpan out;      // [T, C]
  vk::BufferSpan k_cache;  // [n_ctx, C]: rows pos .. pos+T-1 written
  vk::BufferSpan v_cache;  // [n_ctx, C]: rows pos .. pos+T-1 written
  vk::BufferSpan qkv;      // [T, 3C]
  uint32_t T = 0, pos = 0, C = 0, H = 0;
  AttentionOptions options;
};
void attention_store(const Ops& ops, vk::Recorder& rec, const AttentionStoreArgs& a);

// attention_store of a batch of T sequences' decode steps (gpt2vk serve's slots): query t is the
// one new token of a sequence of its own, whose position and cache are row t of `rows`, read
// when the kernels run: {pos, the first texel (16 bytes) of its cache in k_caches and v_caches}.
// The caches hold every sequence's cache; query t's key and value go to its cache's row pos, and
// it attends the pos + 1 keys there. Each query's arithmetic is its sequence's decode step alone
// (attention_store with T = 1 on the same kernel), so its output does not depend on the other
// rows. Where the kernel policy asks for texel attention, one dispatch of the texel kernel;
// otherwise the split kernel's three (kv_store, attention_split, attention_merge) over the key
// blocks of the longest row, max_len keys (the largest pos + 1), with options.scratch of at
// least attention_split_scratch_bytes(T, max_len, C, H). Throws where neither can run
// (attention_store_batch_unsupported: why, empty when it can). The host keeps every pos and
// cache within the bindings.
//   qkv [T, 3C], rows [T, 2] uint32 -> out [T, C]
// attention_store_batch_unsupported reads neither out nor rows.
struct AttentionStoreBatchArgs {
  vk::BufferSpan out;       // [T, C]
  vk::BufferSpan k_caches;  // every sequence's cache: row pos of query t's written
  vk::BufferSpan v_caches;  // as k_caches
  vk::BufferSpan qkv;       // [T, 3C]
  vk::BufferSpan rows;      // [T, 2] uint32: {pos, the first texel of the sequence's cache}
  uint32_t T = 0, max_len = 0, C = 0, H = 0;
  AttentionOptions options;
};
void attention_store_batch(const Ops& ops, vk::Recorder& rec, const AttentionStoreBatchArgs& a);
std::string attention_store_batch_unsupported(const Ops& ops, const AttentionStoreBatchArgs& a);

}  // namespace model::gpu
