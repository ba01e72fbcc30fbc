#version 450
// Prompt attention tiled over blocks of queries (flash attention on the vector units), the GPU
// set's kernel for more queries than decoding has. One workgroup per (block of 16 queries,
// head), or with p.splits per (block, head, range of keys): x = block * splits + range (folded
// into z past the device limit), y = head. Where attention.comp has every query's workgroup read
// every key and value row itself, here the 16 queries of a block share each load, so K and V are
// read from memory T / 16 times rather than T times.
//
// Few blocks (a short prompt, or the last chunk of a long one, over many cached keys) would
// leave a large GPU idle while each workgroup walks every key: the host then splits the keys
// into p.splits ranges of whole tiles, as attention_split.comp splits a decoded token's, and each
// workgroup writes its queries' partial results (o, m, l) for attention_merge.comp to combine.
//
// Keys go in tiles of BK (32, or 16 for D > 64). Per tile: the workgroup copies the tile's key
// rows (16-byte loads, consecutive lanes along a row) into shared memory as fp32 rows padded by
// one texel, so the 8 lanes of a query that read 8 different rows hit different banks. Each
// query's 8 lanes score every 8th key of the tile against the query, which each lane holds in
// registers; the lanes' maxima meet in shared memory, and the query's running maximum m, its
// sums and its output are rescaled by exp(m_old - m_new) as in attention.comp's chunks (an
// online softmax). The tile's value rows then replace its keys, and each lane adds the weighted
// rows into its texels of the query's output (texel lane, lane + 8, ...).
//
// Masked keys are never read: a causal query's scores stop at its position, and its weighted
// sum at its last key, so a NaN in a later row cannot reach it.
//
// With p.bias_span (T5's relative position bias) each scaled score of a visible key gains the
// table's entry for the key's distance from its query.
#extension GL_GOOGLE_include_directive : require
#include "attention.h"

layout(local_size_x = ATTENTION_TILED_WG) in;
layout(constant_id = 3) const uint D = 64;  // head dim, C / H: a multiple of 4, <= MAX_D
layout(constant_id = 4) const uint CACHE_DTYPE = DTYPE_F32;  // of the caches' elements

// [T, C]; with p.splits, the ranges' partial results [T, H, splits, D + 2] (attention_split's)
layout(binding = 0) writeonly buffer Out { float out_[]; };
layout(binding = 1) readonly buffer Q { vec4 q4[]; };       // [T, q_stride], q in cols [0, C)
// The caches: 16 bytes are 4 fp32 values or 8 fp16 ones (kv_store.comp's packing).
layout(binding = 2) readonly buffer K { uvec4 k4[]; };  // [L, C]
layout(binding = 3) readonly buffer V { uvec4 v4[]; };  // [L, C]
// The pass's position (AttentionPush.dynamic_pos 1).
layout(binding = 4) readonly buffer Step { uint step_pos; };
// The relative position bias [H, bias_span] (AttentionPush.bias_span), the last binding.
layout(binding = 5) readonly buffer Bias { float bias[]; };
layout(push_constant) uniform Push { AttentionPush p; };

const uint WG = ATTENTION_TILED_WG, BQ = ATTENTION_TILED_QUERIES;
const uint LANES = WG / BQ;  // invocations per query
const uint D4 = D / 4;       // texels of a head's row
const uint RS = D4 | 1;      // texels of a row in the tile: odd, so 8 rows hit 8 bank groups
const uint BK = D <= 64 ? ATTENTION_TILED_KEYS : ATTENTION_TILED_KEYS / 2;  // keys per tile
const uint WS = ATTENTION_TILED_KEYS + 1;  // floats of a query's row of weights, padded
const bool F16 = CACHE_DTYPE == DTYPE_F16;
const float LOWEST = -3.402823466e38;

// At fixed maxima: Metal cannot size a shared array by specialization constants.
shared vec4 tile[ATTENTION_TILED_TILE];  // [BK][RS]: the tile's keys, then its values
shared float w_sh[BQ * WS];              // [query][key]: the tile's weights exp(s - m)
shared float red[WG];                    // each lane's maximum; at the end, its sum

uint h;  // the head

// Copies rows k0 .. k0 + n - 1 of the head's slice of K (or V) into the tile as fp32.
void load_tile(bool values, uint k0, uint n) {
  const uint units = F16 ? D / 8 : D4;  // 16-byte loads per row
  for (uint e = gl_LocalInvocationID.x; e < n * units; e += WG) {
    const uint r = e / units, u = e % units;
    const uint first = (k0 + r) * p.C + h * D;  // cache element of the row's head slice
    const uint i = (F16 ? first / 8 : first / 4) + u;
    uvec4 w;
    if (values)
      w = v4[i];
    else
      w = k4[i];
    if (F16) {
      tile[r * RS + 2 * u] = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
      tile[r * RS + 2 * u + 1] = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
    } else {
      tile[r * RS + u] = uintBitsToFloat(w);
    }
  }
}

void main() {
  const uint S = max(p.splits, 1);  // key ranges
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
  const uint block = group / S, range = group % S;
  const uint t0 = block * BQ;
  if (t0 >= p.T) return;  // the whole workgroup leaves together, before any barrier
  h = gl_WorkGroupID.y;
  const uint tid = gl_LocalInvocationID.x, qi = tid / LANES, lane = tid % LANES;
  const uint L = p.L + (p.dynamic_pos != 0 ? step_pos : 0);
  const uint t = t0 + qi;  // this lane's query; past T (a last, partial block) it sees no key
  const bool live = t < p.T;
  // The query at position L - T + t sees keys 0 .. that position (causal) or all L; the block
  // needs the keys its last query sees.
  const uint n_keys = !live ? 0 : p.causal != 0 ? L - p.T + t + 1 : L;
  const uint n_block = p.causal != 0 ? L - p.T + min(t0 + BQ, p.T) : L;
  // This workgroup's keys: all of them, or its range of whole tiles, the block's keys cut in S
  // (so an early causal block's ranges are as short as its keys; where it has fewer tiles than
  // ranges, the last are empty).
  const uint R = p.splits == 0 ? n_block : ((n_block + S - 1) / S + BK - 1) / BK * BK;
  const uint k_begin = range * R, k_end = min(k_begin + R, n_block);

  vec4 qv[ATTENTION_TILED_MAX_D / 4];
  for (uint i = 0; i < D4; i++) qv[i] = live ? q4[(t * p.q_stride + h * D) / 4 + i] : vec4(0.0);
  vec4 acc[ATTENTION_TILED_MAX_D / 4 / LANES];  // texels lane, lane + LANES, ... of the output
  const uint CPL = (D4 + LANES - 1) / LANES;
  for (uint c = 0; c < CPL; c++) acc[c] = vec4(0.0);
  float m = LOWEST;  // the query's running maximum
  float l = 0.0;     // this lane's part of the sum of exp(s - m)

  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    const uint n = min(BK, k_end - k0);
    barrier();  // the previous tile's values and weights have been read
    load_tile(false, k0, n);
    barrier();

    // Scores of keys lane, lane + 8, ... of the tile, and their maximum.
    float s[ATTENTION_TILED_KEYS / LANES];
    float lane_max = LOWEST;
    for (uint i = 0; i < BK / LANES; i++) {
      const uint j = lane + LANES * i;
      s[i] = LOWEST;
      if (k0 + j < n_keys) {
        float d = 0.0;
        for (uint c = 0; c < D4; c++) d += dot(qv[c], tile[j * RS + c]);
        if (p.bias_span == 0)
          s[i] = d * p.scale;
        else
          s[i] = d * p.scale + ATTENTION_BIAS(h, L - p.T + t, k0 + j);
      }
      lane_max = max(lane_max, s[i]);
    }
    red[tid] = lane_max;
    barrier();
    float tile_max = red[qi * LANES];
    for (uint i = 1; i < LANES; i++) tile_max = max(tile_max, red[qi * LANES + i]);
    const float m_new = max(m, tile_max);
    const float alpha = exp(m - m_new);  // 1 while the query has seen no key, both LOWEST
    m = m_new;
    l *= alpha;
    for (uint c = 0; c < CPL; c++) acc[c] *= alpha;
    for (uint i = 0; i < BK / LANES; i++) {
      const uint j = lane + LANES * i;
      const float w = k0 + j < n_keys ? exp(s[i] - m_new) : 0.0;
      w_sh[qi * WS + j] = w;
      l += w;
    }
    barrier();  // the maxima are read and the keys used: the values take the tile
    load_tile(true, k0, n);
    barrier();

    const uint seen = n_keys > k0 ? min(n, n_keys - k0) : 0;
    for (uint j = 0; j < seen; j++) {
      const float w = w_sh[qi * WS + j];
      for (uint c = 0; c < CPL; c++) {
        const uint col = lane + LANES * c;
        if (col < D4) acc[c] += w * tile[j * RS + col];
      }
    }
  }

  // The query's sum is its lanes' parts, added in a fixed order. (The last tile's maxima were
  // read before its two barriers.)
  red[tid] = l;
  barrier();
  if (!live) return;
  float total = 0.0;
  for (uint i = 0; i < LANES; i++) total += red[qi * LANES + i];
  if (p.splits == 0) {  // the output
    for (uint c = 0; c < CPL; c++) {
      const uint col = lane + LANES * c;
      if (col < D4)
        for (uint i = 0; i < 4; i++) out_[t * p.C + h * D + 4 * col + i] = acc[c][i] / total;
    }
    return;
  }
  // The range's partial result: o = sum of exp(s - m) v, then m and l. A query that sees no key
  // of the range writes (0, LOWEST, 0), which the merge weighs as 0.
  const uint at = ((t * gl_NumWorkGroups.y + h) * S + range) * (D + 2);
  for (uint c = 0; c < CPL; c++) {
    const uint col = lane + LANES * c;
    if (col < D4)
      for (uint i = 0; i < 4; i++) out_[at + 4 * col + i] = acc[c][i];
  }
  if (lane == 0) {
    out_[at + D] = m;
    out_[at + D + 1] = total;
  }
}
