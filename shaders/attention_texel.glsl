// The texel attention kernels' body: shaders/attention.comp's attention for CPU devices
// (llvmpipe), reading q and the keys and values through storage texel buffers. llvmpipe runs an
// invocation as one SIMD lane; a storage-buffer load whose address differs per lane becomes a
// scalar loop over the lanes, an imageLoad one vector gather. So an invocation owns whole queries
// and does all their arithmetic in registers, with no shared memory or barrier in the loop: QPL
// queries of one head, against every SPLITS-th of their visible keys. Prefill gives each
// invocation its own queries (SPLITS = 1); decode, one query, splits its keys over the workgroup
// and merges the parts once at the end.
//
// ATTENTION_STORE 0 (attention_texel.comp): every key and value comes from the caches.
// ATTENTION_STORE 1 (attention_texel_store.comp): kv_store fused in. q is the fused QKV
// projection of the T new tokens, at positions pos = L - T ..; their keys and values are read
// from it, and copied to cache rows pos .., while the older keys come from the caches. The copy
// never races the reads: no invocation reads cache rows pos .. in this dispatch.
//
// A batch of sequences (AttentionPush.dynamic_pos 2, ATTENTION_STORE 1, decode only: SPLITS > 1,
// QPL = 1): query t is the one new token of a sequence of its own, whose position and cache are
// the Step binding's row t; its arithmetic is the same, operation for operation, as that
// sequence's decode step alone, so a request's results do not depend on its batch.
//
// ATTENTION_PROBS 1 (the *_probs.comp modules, the attention tap): the kernel also writes the
// softmax weights exp(s - m) / l of every query, each score recomputed as the sums computed it
// once the final maximum and sum are known; masked keys get 0.
//
// With p.bias_span (T5's relative position bias) each score, summed as without, gains the
// table's entry for its key's distance from its query before the block's maximum is taken.
//
// Keys go in blocks of KB with an online softmax: the block's scores, their maximum m, the
// running sums rescaled by exp(m_old - m_new) once per block. A masked key is read only when a
// later query of the same invocation sees it (rows past the last visible one are never read),
// and then it adds nothing: its weight is selected away, not multiplied by zero, so even a NaN
// there stays out.
#include "attention.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint D = 64;       // head dim, a multiple of 4
layout(constant_id = 4) const uint SPLITS = 1;   // invocations sharing one query's keys
layout(constant_id = 5) const uint QPL = 1;      // queries per invocation (SPLITS = 1 only)
layout(constant_id = 6) const uint KB = 8;       // keys per online-softmax block

layout(binding = 0) writeonly buffer Out { vec4 out4[]; };           // [T, C / 4]
layout(binding = 1, rgba32f) uniform readonly imageBuffer q;         // [T, q_stride / 4]
layout(binding = 2, rgba32f) uniform readonly imageBuffer k_cache;   // [>= L, C / 4]
layout(binding = 3, rgba32f) uniform readonly imageBuffer v_cache;   // [>= L, C / 4]
#if ATTENTION_STORE
// The same caches, for the new rows: q's columns [C, 2C) and [2C, 3C) go to rows pos .. pos+T-1.
layout(binding = 4) writeonly buffer KStore { vec4 k_store[]; };   // [>= L, C / 4]
layout(binding = 5) writeonly buffer VStore { vec4 v_store[]; };   // [>= L, C / 4]
#endif
#if ATTENTION_PROBS
layout(binding = ATTENTION_STORE != 0 ? 6 : 4) writeonly buffer Probs { float probs[]; };  // [H, T, L]
#endif
// The pass's position (AttentionPush.dynamic_pos 1), or per query its sequence's position and the
// first texel of its sequence's cache (dynamic_pos 2: [T, 2]).
layout(binding = 4 + 2 * ATTENTION_STORE + ATTENTION_PROBS) readonly buffer Step { uint step[]; };
// The relative position bias [H, bias_span] (AttentionPush.bias_span), the last binding.
layout(binding = 5 + 2 * ATTENTION_STORE + ATTENTION_PROBS) readonly buffer Bias { float bias[]; };
layout(push_constant) uniform Push { AttentionPush p; };

const uint WG = gl_WorkGroupSize.x;
const uint DT = D / 4;  // texels of one head's row
const float LOWEST = -3.402823466e38;  // a finite -inf: exp(LOWEST - m) is 0, never NaN

// SPLITS > 1: each invocation's max, then its sum and outputs, WG * (D + 1) floats, at a fixed
// size (Metal cannot size a shared array by specialization constants) that the host keeps within.
shared float merge[ATTENTION_TEXEL_MAX_MERGE];

// This invocation's state, global so that the functions below work on it in place.
uint L;                   // keys: p.L, plus the Step position when dynamic
uint head;                // first texel of the head in a row
uint cached;              // keys below this come from the caches, the others from q
uint seq_T;               // new tokens of this invocation's sequence: p.T, or 1 in a batch
uint q0;                  // the q (and out) row of the sequence's first new token
uint pos0;                // the absolute position of this invocation's first query, t0
uint cache0;              // the texel of the sequence's cache row 0 in the cache bindings
uint n[QPL];              // visible keys of each query; 0 for queries past T
uint lim[QPL], lim_max;   // the keys of the current segment: below lim[r] for query r
vec4 qv[QPL][DT];         // the queries, times the scale
float m[QPL], l[QPL];     // running max of the scores, sum of exp(score - m)
vec4 acc[QPL][DT];        // sum of exp(score - m) v

// Keys j0 + b * SPLITS, b < KB, into every query's running sums, from the caches or (from_q)
// from q's rows of the new tokens. masked: some of them may be at or past some lim[r]
// (at most lim_max - 1 is read; weights past lim[r] are 0).
void keys(uint j0, bool masked, bool from_q) {
  const uint row_texels = p.C / 4;
  uint k_at[KB], v_at[KB];  // texel index of the key's and the value's head slice
  float s[QPL][KB];
  for (uint b = 0; b < KB; b++) {
    const uint j = masked ? min(j0 + b * SPLITS, lim_max - 1) : j0 + b * SPLITS;
    if (from_q) {
      k_at[b] = (q0 + j - cached) * (p.q_stride / 4) + row_texels + head;
      v_at[b] = k_at[b] + row_texels;
    } else {
      k_at[b] = v_at[b] = cache0 + j * row_texels + head;
    }
    for (uint r = 0; r < QPL; r++) s[r][b] = 0.0;
    for (uint i = 0; i < DT; i++) {
      vec4 kv;
      if (from_q)
        kv = imageLoad(q, int(k_at[b] + i));
      else
        kv = imageLoad(k_cache, int(k_at[b] + i));
      for (uint r = 0; r < QPL; r++) s[r][b] += dot(qv[r][i], kv);
    }
    if (p.bias_span != 0)
      for (uint r = 0; r < QPL; r++) s[r][b] += ATTENTION_BIAS(gl_WorkGroupID.y, pos0 + r, j);
  }
  float alpha[QPL];
  for (uint r = 0; r < QPL; r++) {
    float m_new = m[r];
    for (uint b = 0; b < KB; b++)
      if (!masked || j0 + b * SPLITS < lim[r]) m_new = max(m_new, s[r][b]);
    alpha[r] = exp(m[r] - m_new);
    m[r] = m_new;
    l[r] *= alpha[r];
    for (uint b = 0; b < KB; b++) {
      s[r][b] = !masked || j0 + b * SPLITS < lim[r] ? exp(s[r][b] - m_new) : 0.0;
      l[r] += s[r][b];
    }
  }
  for (uint i = 0; i < DT; i++) {
    vec4 vv[KB];
    for (uint b = 0; b < KB; b++) {
      if (from_q)
        vv[b] = imageLoad(q, int(v_at[b] + i));
      else
        vv[b] = imageLoad(v_cache, int(v_at[b] + i));
    }
    for (uint r = 0; r < QPL; r++) {
      vec4 a = acc[r][i] * alpha[r];
      for (uint b = 0; b < KB; b++)
        if (!masked || j0 + b * SPLITS < lim[r]) a += s[r][b] * vv[b];
      acc[r][i] = a;
    }
  }
}

#if ATTENTION_STORE
// A decode step's one new key (j = cached, from q) into the sums of query 0, by the invocation
// whose share it is: keys() for that block, the same operations in the same order (the masked
// keys added nothing there), without gathering KB - 1 masked copies of the key and the value.
void new_key(uint split) {
  if (cached % SPLITS != split) return;
  const uint k_at = q0 * (p.q_stride / 4) + p.C / 4 + head, v_at = k_at + p.C / 4;
  float s = 0.0;
  for (uint i = 0; i < DT; i++) s += dot(qv[0][i], imageLoad(q, int(k_at + i)));
  if (p.bias_span != 0) s += ATTENTION_BIAS(gl_WorkGroupID.y, pos0, cached);
  const float m_new = max(m[0], s);
  const float alpha = exp(m[0] - m_new);
  m[0] = m_new;
  s = exp(s - m_new);
  l[0] *= alpha;
  l[0] += s;
  for (uint i = 0; i < DT; i++) {
    vec4 a = acc[0][i] * alpha;
    a += s * imageLoad(q, int(v_at + i));
    acc[0][i] = a;
  }
}
#endif

#if ATTENTION_PROBS
// Query r's score of key j (times the scale, as qv holds it), summed as keys() sums it.
float score(uint r, uint j) {
  const bool from_q = j >= cached;
  const uint at = from_q ? (q0 + j - cached) * (p.q_stride / 4) + p.C / 4 + head
                         : cache0 + j * (p.C / 4) + head;
  float s = 0.0;
  for (uint i = 0; i < DT; i++) {
    vec4 kv;
    if (from_q)
      kv = imageLoad(q, int(at + i));
    else
      kv = imageLoad(k_cache, int(at + i));
    s += dot(qv[r][i], kv);
  }
  if (p.bias_span != 0) s += ATTENTION_BIAS(gl_WorkGroupID.y, pos0 + r, j);
  return s;
}

// Query r (at t) has final maximum mq and sum total: its weights over every key j = first,
// first + step, ... below L, 0 past its visible keys.
void write_probs(uint r, uint t, float mq, float total, uint first, uint step) {
  const uint row = (gl_WorkGroupID.y * p.T + t) * L;
  for (uint j = first; j < L; j += step)
    probs[row + j] = j < n[r] ? exp(score(r, j) - mq) / total : 0.0;
}
#endif

// This invocation's keys first, first + SPLITS, ... below end: the segment of keys from one
// source, first being the segment's first key in this invocation's share.
void segment(uint first, uint end, bool from_q) {
  lim_max = 0;
  uint lim_min = end;
  for (uint r = 0; r < QPL; r++) {
    lim[r] = min(n[r], end);
    lim_max = max(lim_max, lim[r]);
    lim_min = min(lim_min, lim[r]);
  }
  // One call site, masking decided per block at run time (a compare and select per key and
  // query, little beside the dot products): a second inlined copy of keys(), one per value of
  // masked, doubled the time lavapipe takes to compile the kernel.
  for (uint j0 = first; j0 < lim_max; j0 += KB * SPLITS)
    keys(j0, j0 + (KB - 1) * SPLITS >= lim_min, from_q);
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint split = tid % SPLITS;
  const uint block = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
  const uint t0 = (block * (WG / SPLITS) + tid / SPLITS) * QPL;  // this invocation's 1st query
  head = gl_WorkGroupID.y * DT;
  const bool batch = p.dynamic_pos == 2;
  const uint row = min(t0, p.T - 1);
  seq_T = batch ? 1 : p.T;
  q0 = batch ? row : 0;
  cache0 = batch ? step[2 * row + 1] : 0;
  L = batch ? step[2 * row] + 1 : p.L + (p.dynamic_pos != 0 ? step[0] : 0);
  cached = ATTENTION_STORE != 0 ? L - seq_T : L;
  pos0 = L - seq_T + (t0 - q0);

  for (uint r = 0; r < QPL; r++) {
    const uint t = t0 + r;
    n[r] = t >= p.T ? 0 : p.causal != 0 ? L - seq_T + (t - q0) + 1 : L;
    const uint src = min(t, p.T - 1) * (p.q_stride / 4) + head;
    for (uint i = 0; i < DT; i++) qv[r][i] = imageLoad(q, int(src + i)) * p.scale;
    m[r] = LOWEST;
    l[r] = 0.0;
    for (uint i = 0; i < DT; i++) acc[r][i] = vec4(0.0);
#if ATTENTION_STORE
    // The query's own key and value, split over the invocations that share it.
    if (t < p.T) {
      const uint dst = cache0 + (cached + t - q0) * (p.C / 4) + head, c4 = p.C / 4;
      for (uint i = split; i < DT; i += SPLITS) {
        k_store[dst + i] = imageLoad(q, int(src + c4 + i));
        v_store[dst + i] = imageLoad(q, int(src + 2 * c4 + i));
      }
    }
#endif
  }

  segment(split, cached, false);
#if ATTENTION_STORE
  if (seq_T == 1 && SPLITS > 1)
    new_key(split);
  else
    segment(cached + (split + SPLITS - cached % SPLITS) % SPLITS, L, true);
#endif

  if (SPLITS == 1) {
    for (uint r = 0; r < QPL; r++) {
      if (n[r] == 0) continue;
      // Whole texels: each store with an address per lane is a loop over the lanes on llvmpipe,
      // and four times as many of them took as long again to compile.
      const uint dst = (t0 + r) * (p.C / 4) + head;
      for (uint i = 0; i < DT; i++) out4[dst + i] = acc[r][i] / l[r];
#if ATTENTION_PROBS
      write_probs(r, t0 + r, m[r], l[r], 0, 1);
#endif
    }
    return;
  }

  // Merge the SPLITS parts of each query: the common maximum, then sums rescaled to it.
  const uint first = tid - split;  // the query's first invocation
  merge[tid] = m[0];
  barrier();
  float mq = LOWEST;
  for (uint s = 0; s < SPLITS; s++) mq = max(mq, merge[first + s]);
  const float alpha = exp(m[0] - mq);
  barrier();  // every maximum is read before the slots are reused
  merge[tid] = l[0] * alpha;
  for (uint i = 0; i < DT; i++)
    for (uint c = 0; c < 4; c++) merge[WG + tid * D + i * 4 + c] = acc[0][i][c] * alpha;
  barrier();
  if (n[0] == 0) return;
  float total = 0.0;
  for (uint s = 0; s < SPLITS; s++) total += merge[first + s];
  const uint dst = t0 * p.C + head * 4;
  for (uint d = split; d < D; d += SPLITS) {
    float sum = 0.0;
    for (uint s = 0; s < SPLITS; s++) sum += merge[WG + (first + s) * D + d];
    out4[(dst + d) / 4][(dst + d) % 4] = sum / total;
  }
#if ATTENTION_PROBS
  write_probs(0, t0, mq, total, split, SPLITS);
#endif
}
