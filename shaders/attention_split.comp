#version 450
// Split-K decode attention (flash-decoding), step 1 of 2: the partial attention of one query and
// head over one block of ATTENTION_SPLIT_BLOCK keys. Workgroups: x = key block, y = head,
// z = query, so a single decoded token still makes H * ceil(L / 64) workgroups (192 for GPT-2
// small at L = 1024) where one per (query, head) made 12. attention_merge.comp combines the
// blocks.
//
// Scores: each key's row of the head is read by G = D / 4 lanes (G <= WG: D <= 4 WG), one
// 16-byte load each, so a subgroup's loads are whole 256-byte rows, not lanes C * 4 bytes apart.
// Their partial dot products go to a padded shared array, and one invocation per key adds its
// row's. With one score per invocation, the block's maximum m and sum l of exp(s - m) are two
// shared-memory trees. The weighted sum of V: G lanes along a row's texels again, WG / G parts
// of the workgroup taking every part-th key, then the parts' sums added in order.
//
// Both walks over keys load UNROLL keys' texels before using any: a decode step's few
// workgroups are bound by the latency of their loads, not by bandwidth (on an H200, 24-32 us a
// dispatch at 64 keys when each lane waited on one key at a time; 9.4 us since).
//
// part[t, h, block] = (o[0..D), m, l): o = sum over the block's keys j of exp(s_j - m) v_j. A
// causal query's block past its last key writes (0, -FLT_MAX, 0), which the merge weighs as 0.
//
// A batch (AttentionPush.dynamic_pos 2): query t is the one new token of a sequence of its own,
// whose position and cache are the Step binding's row t; p.splits covers the longest sequence,
// and a shorter one's blocks past its keys are empty. Its arithmetic is that of its decode step
// alone: the same blocks, and empty blocks add exact zeros in the merge.
//
// With p.store (attention_store: q is the fused QKV projection) the KV store is fused in: a new
// key's row is read from q's K and V columns, never from the caches, which the same dispatch
// writes: the workgroups of one query (the last; in a batch every query, whose one new key is
// its own) copy their block's new rows of their head there, before a block past the query's
// keys leaves. The values read are the ones written, so the results are the bits of kv_store
// then attention.
//
// With p.merge the merge is fused in (attention_merge.glsl): each workgroup, its partials written,
// counts its block in count[t, h], and the workgroup that counts the last block merges them all
// into out and sets the count back to 0 for the next dispatch. Which workgroup that is varies;
// the merge's arithmetic does not, and it is attention_merge.comp's. One dispatch where there
// were two, with no barrier between them.
//
// With p.bias_span (T5's relative position bias) each scaled score gains the table's entry for
// its key's distance from the query, so the partial results, and the merge, include it.
#extension GL_GOOGLE_include_directive : require
#include "attention.h"
#include "common/half.glsl"

layout(local_size_x = ATTENTION_SPLIT_WG) in;
layout(constant_id = 3) const uint D = 64;  // head dim, C / H: a multiple of 4, <= MAX_D
layout(constant_id = 4) const uint CACHE_DTYPE = DTYPE_F32;  // of the caches' elements

// Coherent: with p.merge, one workgroup reads the blocks the others wrote.
layout(binding = 0) coherent buffer Part { float part[]; };  // [T, H, splits, D + 2]
layout(binding = 1) readonly buffer Q { vec4 q4[]; };         // [T, q_stride / 4]
// The caches: 16 bytes are 4 fp32 values or 8 fp16 ones (kv_store.comp's packing). Written only
// with p.store, at the new rows, which no workgroup reads from here.
layout(binding = 2) buffer K { uvec4 k4[]; };                 // [L, C]
layout(binding = 3) buffer V { uvec4 v4[]; };                 // [L, C]
// The position (dynamic_pos 1), or per query its sequence's {position, first texel of its cache}
// (dynamic_pos 2: [T, 2]).
layout(binding = 4) readonly buffer Step { uint step[]; };
// The relative position bias [H, bias_span] (AttentionPush.bias_span).
layout(binding = 5) readonly buffer Bias { float bias[]; };
// With p.merge: the attention output, and per (query, head) the blocks counted so far (0 between
// dispatches).
layout(binding = 6) writeonly buffer Out { float out_[]; };   // [T, C], head h in cols h*D ..
layout(binding = 7) coherent buffer Count { uint count[]; };  // [T, H]
layout(push_constant) uniform Push { AttentionPush p; };

const uint WG = ATTENTION_SPLIT_WG;
const float LOWEST = -3.402823466e38;
const uint UNROLL = 8;  // keys whose loads are in flight together, per lane

shared vec4 q_sh[ATTENTION_SPLIT_MAX_D / 4];  // this query's head slice
shared float dots[ATTENTION_SPLIT_DOTS];      // [key][lane], rows padded to G + 1; then V's parts
shared float w_sh[ATTENTION_SPLIT_BLOCK];     // the block's scores, then exp(s - m)
shared float red[ATTENTION_SPLIT_WG];         // the trees
shared bool last_sh;                          // p.merge: this workgroup merges

float tree(float v, bool is_max) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = WG / 2; s > 0; s /= 2) {
    if (tid < s) red[tid] = is_max ? max(red[tid], red[tid + s]) : red[tid] + red[tid + s];
    barrier();
  }
  const float r = red[0];
  barrier();  // red is written again
  return r;
}

const bool F16 = CACHE_DTYPE == DTYPE_F16;

uint h, G, C4, QS4;  // the head, its texels, a cache row's texels, a q row's texels
uint cache0;         // the element of the keys' row 0 in the caches
uint first_new;      // with p.store: the first key read from q (L without: none)
uint q_first;        // q's row of key first_new

// A value as the cache holds it: an fp16 cache's rounding (pack_halves, as kv_store's), so
// that a key read from q weighs as it will once read from the cache. (Integer arithmetic: a
// compiler may not fold it away, as NVIDIA's folds unpackHalf2x16(packHalf2x16(v)).)
vec4 as_cached(vec4 v) {
  if (!F16) return v;
  return vec4(unpackHalf2x16(pack_halves(v.xy)), unpackHalf2x16(pack_halves(v.zw)));
}

// The cache element where value d of key j's head slice is.
uint cache_at(uint j, uint d) { return cache0 + j * p.C + h * D + d; }

// The texel of cache element e (e % 4 == 0) from the 16 bytes w that hold it.
vec4 cache_texel(uvec4 w, uint e) {
  if (!F16) return uintBitsToFloat(w);
  const uvec2 half4 = (e / 4) % 2 == 0 ? w.xy : w.zw;
  return vec4(unpackHalf2x16(half4.x), unpackHalf2x16(half4.y));
}

// Texel i of key j's head slice, and of its value: q's K or V columns for a new key.
vec4 key_texel(uint j, uint i) {
  if (j >= first_new) return as_cached(q4[(q_first + j - first_new) * QS4 + C4 + h * G + i]);
  const uint e = cache_at(j, 4 * i);
  return cache_texel(k4[F16 ? e / 8 : e / 4], e);
}
vec4 value_texel(uint j, uint i) {
  if (j >= first_new) return as_cached(q4[(q_first + j - first_new) * QS4 + 2 * C4 + h * G + i]);
  const uint e = cache_at(j, 4 * i);
  return cache_texel(v4[F16 ? e / 8 : e / 4], e);
}

// The fused store of texel i of new key j's head slice, key and value.
void store_texel(uint j, uint i) {
  const uint e = cache_at(j, 4 * i);
  const vec4 k = key_texel(j, i), v = value_texel(j, i);
  if (F16) {
    const uvec2 kw = uvec2(pack_halves(k.xy), pack_halves(k.zw));
    const uvec2 vw = uvec2(pack_halves(v.xy), pack_halves(v.zw));
    if ((e / 4) % 2 == 0) {
      k4[e / 8].xy = kw;
      v4[e / 8].xy = vw;
    } else {
      k4[e / 8].zw = kw;
      v4[e / 8].zw = vw;
    }
  } else {
    k4[e / 4] = floatBitsToUint(k);
    v4[e / 4] = floatBitsToUint(v);
  }
}

#include "attention_merge.glsl"

// The partial results of a block past the query's keys: weighed as 0 by the merge.
void empty_part(uint tid, uint dst) {
  for (uint d = tid; d < D; d += WG) part[dst + d] = 0.0;
  if (tid == 0) {
    part[dst + D] = LOWEST;
    part[dst + D + 1] = 0.0;
  }
}

// The partial results of query t over the block's n keys from k0 (n > 0).
void block_part(uint t, uint tid, uint n, uint k0, uint q_pos, uint dst) {
  for (uint i = tid; i < G; i += WG) q_sh[i] = q4[t * (p.q_stride / 4) + h * G + i];
  barrier();

  // Both walks over keys: `parts` keys at a time, G lanes each (lanes past parts x G idle).
  const uint parts = WG / G, part_id = tid / G, lane = tid % G;

  // Scores, a batch of keys at a time.
  const uint batch = min(ATTENTION_SPLIT_BLOCK, ATTENTION_SPLIT_DOTS / (G + 1));
  for (uint b0 = 0; b0 < n; b0 += batch) {
    const uint nb = min(batch, n - b0);
    if (part_id < parts) {
      const vec4 qi = q_sh[lane];
      for (uint j = part_id; j < nb; j += UNROLL * parts) {
        vec4 kt[UNROLL];
        for (uint u = 0; u < UNROLL; u++)
          kt[u] = key_texel(k0 + b0 + min(j + u * parts, nb - 1), lane);
        for (uint u = 0; u < UNROLL; u++)
          if (j + u * parts < nb) dots[(j + u * parts) * (G + 1) + lane] = dot(qi, kt[u]);
      }
    }
    barrier();
    for (uint j = tid; j < nb; j += WG) {
      float s = 0.0;
      for (uint l = 0; l < G; l++) s += dots[j * (G + 1) + l];
      if (p.bias_span == 0)
        w_sh[b0 + j] = s * p.scale;
      else
        w_sh[b0 + j] = s * p.scale + ATTENTION_BIAS(h, q_pos, k0 + b0 + j);
    }
    barrier();
  }

  // One score per invocation (BLOCK == WG): the block's max, weights and their sum.
  const float mine = tid < n ? w_sh[tid] : LOWEST;
  const float m = tree(mine, true);
  const float w = tid < n ? exp(mine - m) : 0.0;
  w_sh[tid] = w;
  const float l = tree(w, false);  // its barriers publish w_sh

  // The weighted sum of V: part i taking keys i, i + parts, ...; the parts' sums then meet in
  // dots[], free since the scores, [part][texel], and are added in order.
  vec4 acc = vec4(0.0);
  if (part_id < parts)
    for (uint j = part_id; j < n; j += UNROLL * parts) {
      vec4 vt[UNROLL];
      for (uint u = 0; u < UNROLL; u++) vt[u] = value_texel(k0 + min(j + u * parts, n - 1), lane);
      for (uint u = 0; u < UNROLL; u++)
        if (j + u * parts < n) acc += w_sh[j + u * parts] * vt[u];
    }
  if (part_id < parts)
    for (uint c = 0; c < 4; c++) dots[(part_id * G + lane) * 4 + c] = acc[c];
  barrier();
  if (tid < G) {
    vec4 o = vec4(0.0);
    for (uint i = 0; i < parts; i++) {
      const uint at = (i * G + tid) * 4;
      o += vec4(dots[at], dots[at + 1], dots[at + 2], dots[at + 3]);
    }
    for (uint c = 0; c < 4; c++) part[dst + 4 * tid + c] = o[c];
  }
  if (tid == 0) {
    part[dst + D] = m;
    part[dst + D + 1] = l;
  }
}

// p.merge: count this block done; the workgroup that counts the last merges them all. The
// partials are published before the count (each invocation's writes, then the workgroup's
// barrier, then one atomic), and the merging workgroup's reads come after it.
void merge_if_last(uint t, uint H, uint tid) {
  memoryBarrierBuffer();
  barrier();
  if (tid == 0) last_sh = atomicAdd(count[t * H + h], 1u) + 1 == p.splits;
  barrier();
  if (!last_sh) return;
  memoryBarrierBuffer();
  merge_blocks(t, h, H, tid);
  if (tid == 0) count[t * H + h] = 0u;  // for the next dispatch
}

void main() {
  const uint block = gl_WorkGroupID.x, t = gl_WorkGroupID.z;
  const uint H = gl_NumWorkGroups.y, tid = gl_LocalInvocationID.x;
  h = gl_WorkGroupID.y;
  G = D / 4;
  C4 = p.C / 4;
  QS4 = p.q_stride / 4;
  const bool sequences = p.dynamic_pos == 2;  // a batch of sequences
  const uint L = sequences ? step[2 * t] + 1 : p.L + (p.dynamic_pos != 0 ? step[0] : 0);
  cache0 = sequences ? step[2 * t + 1] * (F16 ? 8 : 4) : 0;  // the table counts 16 bytes
  // The new keys: a batch query's own (q row t), else the last T (q rows 0 .. T - 1).
  first_new = p.store == 0 ? L : sequences ? L - 1 : L - p.T;
  q_first = sequences ? t : 0;
  // A batch's query is the last of its sequence's L positions.
  const uint n_keys = p.causal != 0 && !sequences ? L - p.T + t + 1 : L;
  const uint q_pos = sequences ? L - 1 : L - p.T + t;  // the query's absolute position
  const uint k0 = block * ATTENTION_SPLIT_BLOCK;
  const uint n = k0 < n_keys ? min(ATTENTION_SPLIT_BLOCK, n_keys - k0) : 0;
  const uint dst = ((t * H + h) * p.splits + block) * (D + 2);
  // The fused store: this block's new rows of head h, by one query's workgroups.
  if (p.store != 0 && (sequences || t + 1 == p.T)) {
    const uint j0 = max(k0, first_new), j1 = min(k0 + ATTENTION_SPLIT_BLOCK, L);
    for (uint e = tid; j0 < j1 && e < (j1 - j0) * G; e += WG) store_texel(j0 + e / G, e % G);
  }
  if (n == 0)  // uniform over the workgroup, as is every branch around a barrier here
    empty_part(tid, dst);
  else
    block_part(t, tid, n, k0, q_pos, dst);
  if (p.merge != 0) merge_if_last(t, H, tid);
}
