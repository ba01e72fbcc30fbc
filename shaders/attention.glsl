// The portable attention kernels' body (attention.comp, attention_probs.comp).
// Multi-head scaled dot-product attention of T queries against the first L rows of a KV cache,
// fused so that no [T, H, L] score tensor ever exists. One workgroup per (query, head): x (folded
// into z past the device limit) is the query, y the head.
//
// Keys are visited in chunks of CHUNK with an online softmax (flash-attention style): the chunk's
// scores go to shared memory, their maximum m is found with a shared-memory tree, and what earlier
// chunks summed is rescaled by exp(m_old - m_new). When all keys fit one chunk (the usual case,
// CHUNK is up to 2048) this is exactly the textbook two-pass softmax. Masked keys are never
// visited, so they contribute exactly zero.
//
// ATTENTION_PROBS 1 (attention_probs.comp, the attention tap): the same kernel also writes the
// softmax weights exp(s - m) / sum, each score recomputed as the sum computed it, once the final
// maximum and sum are known; masked keys get 0. A separate module, so that the forward pass
// that does not look never pays for it.
//
// With p.bias_span (T5's relative position bias) score() adds the table's entry for the key's
// distance from the query; without it score() is the unbiased one, operation for operation.
#include "attention.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint D = 64;       // head dim, C / H
layout(constant_id = 4) const uint CHUNK = 256;  // keys per chunk: score slots in shared memory
layout(constant_id = 5) const uint DPT = 1;      // output dims per invocation when D > workgroup
layout(constant_id = 6) const uint CACHE_DTYPE = DTYPE_F32;  // of the caches' elements

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [T, C], head h in cols h*D ..
layout(binding = 1) readonly buffer Q { float q[]; };        // [T, q_stride], q in cols [0, C)
// Words of the caches: fp32 bits, or two fp16 values (kv_store.comp).
layout(binding = 2) readonly buffer K { uint k_cache[]; };  // [L, C]
layout(binding = 3) readonly buffer V { uint v_cache[]; };  // [L, C]
#if ATTENTION_PROBS
layout(binding = 4) writeonly buffer Probs { float probs[]; };  // [H, T, L]
#endif
// The pass's position (AttentionPush.dynamic_pos).
layout(binding = ATTENTION_PROBS != 0 ? 5 : 4) readonly buffer Step { uint step_pos; };
// The relative position bias [H, bias_span] (AttentionPush.bias_span), the last binding.
layout(binding = ATTENTION_PROBS != 0 ? 6 : 5) readonly buffer Bias { float bias[]; };
layout(push_constant) uniform Push { AttentionPush p; };

const uint WG = gl_WorkGroupSize.x;
// At fixed maxima, CHUNK, D and WG of them used: Metal cannot size a shared array by
// specialization constants. The host keeps CHUNK, D and WG within them.
shared float scores[ATTENTION_MAX_CHUNK];  // this chunk's scores, then their exp(s - m)
shared float q_sh[ATTENTION_MAX_D];  // this query's head slice, read by every key's dot product
#define REDUCE_T float
shared REDUCE_T red[ATTENTION_MAX_WORKGROUP];  // the max reduction; then the parts' results
#include "common/reduce.glsl"

uint L;      // keys: p.L, plus the Step position when dynamic
uint q_pos;  // the query's absolute position, L - T + query

// Element e of a cache.
float key_at(uint e) {
  if (CACHE_DTYPE == DTYPE_F16) return unpackHalf2x16(k_cache[e / 2])[e % 2];
  return uintBitsToFloat(k_cache[e]);
}
float value_at(uint e) {
  if (CACHE_DTYPE == DTYPE_F16) return unpackHalf2x16(v_cache[e / 2])[e % 2];
  return uintBitsToFloat(v_cache[e]);
}

// The scaled score of the query in q_sh against the key at cache row j, head column col: the
// one computation both the online softmax and the tap use, so the tap's weights are the sum's.
float score(uint j, uint col) {
  const uint row = j * p.C + col;
  float s = 0.0;
  for (uint d = 0; d < D; d++) s += q_sh[d] * key_at(row + d);
  if (p.bias_span == 0) return s * p.scale;
  return s * p.scale + ATTENTION_BIAS(gl_WorkGroupID.y, q_pos, j);
}

void main() {
  const uint query = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
  if (query >= p.T) return;  // the whole workgroup leaves together, before any barrier
  L = p.L + (p.dynamic_pos != 0 ? step_pos : 0);
  const uint tid = gl_LocalInvocationID.x;
  const uint col = gl_WorkGroupID.y * D;  // first column of this head
  const uint n_keys = p.causal != 0 ? L - p.T + query + 1 : L;
  q_pos = L - p.T + query;

  for (uint d = tid; d < D; d += WG) q_sh[d] = q[query * p.q_stride + col + d];

  // Roles for the weighted sum of V. D <= WG: `parts` groups of D invocations, group `part`
  // taking every parts-th key of a chunk, so most invocations work even when D is small; the
  // groups are added up at the end. D > WG: one group, invocation tid owns dims tid + i*WG.
  const uint parts = D <= WG ? WG / D : 1;
  const uint part = D <= WG ? tid / D : 0;
  const uint d0 = D <= WG ? tid % D : tid;
  const bool working = part < parts;
  float acc[DPT];
  for (uint i = 0; i < DPT; i++) acc[i] = 0.0;
  float weight_sum = 0.0;  // this part's sum of exp(s - m)
  float m = 0.0;           // running max of the scores seen so far
  barrier();               // q_sh

  for (uint k0 = 0; k0 < n_keys; k0 += CHUNK) {
    const uint n = min(CHUNK, n_keys - k0);
    float local_max = -3.402823466e38;
    for (uint j = tid; j < n; j += WG) {
      const float s = score(k0 + j, col);
      scores[j] = s;
      local_max = max(local_max, s);
    }
    const float chunk_max = workgroup_max(local_max);
    const float m_new = k0 == 0 ? chunk_max : max(m, chunk_max);
    const float alpha = k0 == 0 ? 0.0 : exp(m - m_new);  // rescales the earlier chunks' sums
    m = m_new;
    for (uint j = tid; j < n; j += WG) scores[j] = exp(scores[j] - m_new);
    barrier();  // every weight of the chunk, for every part

    if (working) {
      weight_sum *= alpha;
      for (uint i = 0; i < DPT; i++) acc[i] *= alpha;
      for (uint j = part; j < n; j += parts) {
        const float w = scores[j];
        const uint row = (k0 + j) * p.C + col;
        weight_sum += w;
        for (uint i = 0; i < DPT; i++) {
          const uint d = d0 + i * WG;
          if (d < D) acc[i] += w * value_at(row + d);
        }
      }
    }
    barrier();  // scores are rewritten by the next chunk
  }

  // Add up the parts: first their weight sums, then their partial outputs.
  if (working && d0 == 0) red[part] = weight_sum;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < parts; i++) total += red[i];

#if ATTENTION_PROBS
  const uint probs_row = (gl_WorkGroupID.y * p.T + query) * L;
  for (uint j = tid; j < L; j += WG)
    probs[probs_row + j] = j < n_keys ? exp(score(j, col) - m) / total : 0.0;
#endif
  const uint dst = query * p.C + col;
  if (D <= WG) {
    barrier();  // everyone has read the weight sums
    if (working) red[part * D + d0] = acc[0];
    barrier();
    if (part == 0) {
      float sum = 0.0;
      for (uint i = 0; i < parts; i++) sum += red[i * D + d0];
      out_[dst + d0] = sum / total;
    }
  } else {
    for (uint i = 0; i < DPT; i++) {
      const uint d = d0 + i * WG;
      if (d < D) out_[dst + d] = acc[i] / total;
    }
  }
}
