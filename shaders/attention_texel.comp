#version 450
// shaders/attention.comp's attention for CPU devices (llvmpipe), reading q and the caches through
// storage texel buffers. llvmpipe runs an invocation as one SIMD lane; a storage-buffer load
// whose address differs per lane becomes a scalar loop over the lanes, an imageLoad one vector
// gather. So here an invocation owns whole queries and does all their arithmetic in registers,
// with no shared memory or barrier in the loop: QPL queries of one head, against every SPLITS-th
// of their visible keys. Prefill gives each invocation its own queries (SPLITS = 1); decode, one
// query, splits its keys over the workgroup and merges the parts once at the end.
//
// Keys go in blocks of KB with an online softmax: the block's scores, their maximum m, the
// running sums rescaled by exp(m_old - m_new) once per block. A masked key is read only when a
// later query of the same invocation sees it (the rows past the last visible one are never
// read), and then it adds nothing: its weight is selected away, not multiplied by zero, so even a
// NaN there stays out.
#extension GL_GOOGLE_include_directive : require
#include "attention.h"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint D = 64;       // head dim, a multiple of 4
layout(constant_id = 4) const uint SPLITS = 1;   // invocations sharing one query's keys
layout(constant_id = 5) const uint QPL = 1;      // queries per invocation (SPLITS = 1 only)
layout(constant_id = 6) const uint KB = 8;       // keys per online-softmax block
layout(constant_id = 7) const uint MERGE = 1;    // shared floats for the merge: WG * (D + 1)

layout(binding = 0) writeonly buffer Out { float out_[]; };          // [T, C]
layout(binding = 1, rgba32f) uniform readonly imageBuffer q;         // [T, q_stride / 4]
layout(binding = 2, rgba32f) uniform readonly imageBuffer k_cache;   // [L, C / 4]
layout(binding = 3, rgba32f) uniform readonly imageBuffer v_cache;   // [L, C / 4]
layout(push_constant) uniform Push { AttentionPush p; };

const uint WG = gl_WorkGroupSize.x;
const uint DT = D / 4;  // texels of one head's row
const float LOWEST = -3.402823466e38;  // a finite -inf: exp(LOWEST - m) is 0, never NaN

shared float merge[MERGE];  // SPLITS > 1: each invocation's max, then its sum and outputs

// This invocation's state, global so that keys() works on it in place.
uint head;                // first texel of the head in a row
uint n[QPL];              // visible keys of each query; 0 for queries past T
uint n_max;               // of n
vec4 qv[QPL][DT];         // the queries, times the scale
float m[QPL], l[QPL];     // running max of the scores, sum of exp(score - m)
vec4 acc[QPL][DT];        // sum of exp(score - m) v

// Keys j0 + b * SPLITS, b < KB, into every query's running sums. masked: some of them may be
// past some query's last visible key (at most n_max - 1 is read; weights past n[r] are 0).
void keys(uint j0, bool masked) {
  const uint row_texels = p.C / 4;
  uint row[KB];
  float s[QPL][KB];
  for (uint b = 0; b < KB; b++) {
    const uint j = j0 + b * SPLITS;
    row[b] = (masked ? min(j, n_max - 1) : j) * row_texels + head;
    for (uint r = 0; r < QPL; r++) s[r][b] = 0.0;
    for (uint i = 0; i < DT; i++) {
      const vec4 kv = imageLoad(k_cache, int(row[b] + i));
      for (uint r = 0; r < QPL; r++) s[r][b] += dot(qv[r][i], kv);
    }
  }
  float alpha[QPL];
  for (uint r = 0; r < QPL; r++) {
    float m_new = m[r];
    for (uint b = 0; b < KB; b++)
      if (!masked || j0 + b * SPLITS < n[r]) m_new = max(m_new, s[r][b]);
    alpha[r] = exp(m[r] - m_new);
    m[r] = m_new;
    l[r] *= alpha[r];
    for (uint b = 0; b < KB; b++) {
      s[r][b] = !masked || j0 + b * SPLITS < n[r] ? exp(s[r][b] - m_new) : 0.0;
      l[r] += s[r][b];
    }
  }
  for (uint i = 0; i < DT; i++) {
    vec4 vv[KB];
    for (uint b = 0; b < KB; b++) vv[b] = imageLoad(v_cache, int(row[b] + i));
    for (uint r = 0; r < QPL; r++) {
      vec4 a = acc[r][i] * alpha[r];
      for (uint b = 0; b < KB; b++)
        if (!masked || j0 + b * SPLITS < n[r]) a += s[r][b] * vv[b];
      acc[r][i] = a;
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint split = tid % SPLITS;
  const uint block = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
  const uint t0 = (block * (WG / SPLITS) + tid / SPLITS) * QPL;  // this invocation's 1st query
  head = gl_WorkGroupID.y * DT;

  n_max = 0;
  uint n_min = p.L;
  for (uint r = 0; r < QPL; r++) {
    const uint t = t0 + r;
    n[r] = t >= p.T ? 0 : p.causal != 0 ? p.L - p.T + t + 1 : p.L;
    n_max = max(n_max, n[r]);
    n_min = min(n_min, n[r]);
    const uint src = min(t, p.T - 1) * (p.q_stride / 4) + head;
    for (uint i = 0; i < DT; i++) qv[r][i] = imageLoad(q, int(src + i)) * p.scale;
    m[r] = LOWEST;
    l[r] = 0.0;
    for (uint i = 0; i < DT; i++) acc[r][i] = vec4(0.0);
  }

  uint j0 = split;
  for (; j0 + (KB - 1) * SPLITS < n_min; j0 += KB * SPLITS) keys(j0, false);
  for (; j0 < n_max; j0 += KB * SPLITS) keys(j0, true);

  if (SPLITS == 1) {
    for (uint r = 0; r < QPL; r++) {
      if (n[r] == 0) continue;
      const uint dst = (t0 + r) * p.C + head * 4;
      for (uint i = 0; i < DT; i++)
        for (uint c = 0; c < 4; c++) out_[dst + i * 4 + c] = acc[r][i][c] / l[r];
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
    out_[dst + d] = sum / total;
  }
}
