#version 450
// Split-K decode attention, step 2 of 2: out[t, head h] from the key blocks' partial results
// (attention_split.comp). With M the largest block maximum and a_b = exp(m_b - M):
// out = sum_b a_b o_b / sum_b a_b l_b. One workgroup per (head, query), lanes along the head dim.
#extension GL_GOOGLE_include_directive : require
#include "attention.h"

layout(local_size_x = ATTENTION_SPLIT_WG) in;
layout(constant_id = 3) const uint D = 64;

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [T, C], head h in cols h*D ..
layout(binding = 1) readonly buffer Part { float part[]; };  // [T, H, splits, D + 2]
layout(push_constant) uniform Push { AttentionPush p; };

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, H = gl_NumWorkGroups.x;
  const uint base = (t * H + h) * p.splits * (D + 2);
  float M = -3.402823466e38;
  for (uint b = 0; b < p.splits; b++) M = max(M, part[base + b * (D + 2) + D]);
  float total = 0.0;
  for (uint b = 0; b < p.splits; b++) {
    const uint at = base + b * (D + 2);
    total += part[at + D + 1] * exp(part[at + D] - M);
  }
  for (uint d = gl_LocalInvocationID.x; d < D; d += ATTENTION_SPLIT_WG) {
    float o = 0.0;
    for (uint b = 0; b < p.splits; b++) {
      const uint at = base + b * (D + 2);
      o += part[at + d] * exp(part[at + D] - M);
    }
    out_[t * p.C + h * D + d] = o / total;
  }
}
