// Push constants and sizes of the attention kernels (attention.comp, attention_texel*.comp,
// attention_split.comp, attention_merge.comp and attention_tiled.comp), shared by GLSL and C++
// (see shaders/common/types.h).
#ifndef GPT2VK_ATTENTION_H
#define GPT2VK_ATTENTION_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// Shared arrays have these sizes whatever the specialization: spirv-cross makes an array sized by
// a specialization constant a variable-length array in MSL, which Metal rejects. The host keeps
// its choices within them.
// attention.comp, 4 * (2048 + 256 + 256) = 10 KiB in all. 2048 score slots cover GPT-2's
// n_ctx = 1024 (and 2048) in one chunk while leaving shared memory for other workgroups on the
// same core; longer caches take more chunks.
CONST ATTENTION_MAX_CHUNK = 2048;     // keys per chunk: scores[]
CONST ATTENTION_MAX_D = 256;          // head dim: the query slice q_sh[]
CONST ATTENTION_MAX_WORKGROUP = 256;  // invocations: the reduction red[]
// attention_texel.comp: the merge of split keys, WG * (D + 1) floats for up to 8 invocations
// and the texel kernel's largest head dim 256 (8 KiB).
CONST ATTENTION_TEXEL_MAX_MERGE = 8 * (256 + 1);
// attention_split.comp and attention_merge.comp: invocations per workgroup, and keys per block
// (one score per invocation); the largest head dim (the query slice in shared memory, at most 4
// dims per invocation); floats of partial dot products staged at once (8 KiB), a batch of keys
// times the lanes per key.
CONST ATTENTION_SPLIT_WG = 64;
CONST ATTENTION_SPLIT_BLOCK = 64;
CONST ATTENTION_SPLIT_MAX_D = 256;
CONST ATTENTION_SPLIT_DOTS = 2048;
// attention_tiled.comp: invocations per workgroup, queries per workgroup (8 invocations each),
// the largest head dim, and keys per tile (D <= 64; half as many beyond). The tile holds one
// tile's keys, then its values, as fp32 rows padded by one texel: 32 * (64 / 4 + 1) texels,
// enough for 16 rows of D = 128 too. In all 4 * (4 * 544 + 16 * 33 + 128) = 11 KiB.
CONST ATTENTION_TILED_WG = 128;
CONST ATTENTION_TILED_QUERIES = 16;
CONST ATTENTION_TILED_MAX_D = 128;
CONST ATTENTION_TILED_KEYS = 32;
CONST ATTENTION_TILED_TILE = 32 * (64 / 4 + 1);  // texels

// out[t, head h] = softmax(scale * q[t, h] . k_cache[j, h] + bias[h, j - p]) v_cache[j, h] over
// the visible keys j (bias: only with bias_span)
struct AttentionPush {
  uint T;         // queries; they sit at absolute positions L-T .. L-1
  uint L;         // keys: valid rows of the caches
  uint C;         // model width: row stride of out and of the caches
  uint q_stride;  // row stride of q (3C when q is the fused QKV projection)
  uint causal;    // 1: the query at position p sees keys 0..p; 0: every query sees all L keys
  float scale;    // multiplies q . k before the softmax
  uint splits;    // the split kernels' key blocks, ceil(L / ATTENTION_SPLIT_BLOCK); others: 0
  // 1: L and the store's rows are counted from the position in the Step binding, read when the
  // kernel runs (the keys are L + step_pos), so one recording serves every decode step; 0: the
  // Step binding is not read. 2 (attention_texel_store and attention_split): a batch, each query
  // the one new token of its own sequence, whose position and cache (its first texel) are the
  // Step binding's [T, 2] row.
  uint dynamic_pos;
  // attention_split with q the fused [T, 3C] QKV projection: 1, the KV store fused in. The new
  // keys (the last T of L; in a batch each sequence's last) are read from q's K and V columns,
  // and the workgroups of one query (the last; in a batch each) write them into the caches, so
  // no dispatch of kv_store runs before. 0: every key from the caches.
  uint store;
  // T5's relative position bias: 0, none (the Bias binding is not read); else 2R + 1, the row
  // length of the Bias binding's table [H, bias_span]. The score of head h's query at absolute
  // position p against key j gains bias[h * bias_span + R + (j - p)] after the scale (the host
  // keeps every visible j - p within [-R, R]).
  uint bias_span;
  // attention_split: 1, the merge fused in (no attention_merge dispatch). Each workgroup counts
  // its block done in the Count binding's entry for its (query, head), and the last of them
  // merges the blocks' partial results into the Out binding, then sets the entry back to 0.
  uint merge;
};
PUSH_NAMESPACE_END

// The relative position bias of head h, query position pos, key j: the table's entry, clamped
// into head h's row, so that lanes scoring keys no query sees never read past the table. Needs
// the Bias binding declared as `float bias[]` and a push block named p.
#ifndef __cplusplus
#define ATTENTION_BIAS(h, pos, j)                                                           \
  bias[(h) * p.bias_span +                                                                   \
       uint(clamp(int(p.bias_span / 2) + int(j) - int(pos), 0, int(p.bias_span) - 1))]
#endif

#endif
