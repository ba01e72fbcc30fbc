#version 450
// Softmax and cross-entropy fused, for training (issue 17): a workgroup per row of logits, which
// it turns into the loss's gradient in place (the logits of a step are needed for nothing else,
// and a second [N, V] buffer is the largest tensor of a GPT-2 step):
//   losses[r] = logsumexp(l[r]) - l[r][t],  l[r][v] <- (exp(l[r][v] - logsumexp) - (v == t)) * scale
// t = targets[r]. The maximum and the sum of exp(l - max) go through common/reduce.glsl's
// shared-memory tree: a fixed order, so the same bits every run. Each invocation sums a strided
// share of the row first. A row whose target is CROSS_ENTROPY_IGNORE (padding) gets a loss of 0
// and a zero gradient. Any other target outside [0, V) gives a NaN loss and leaves the row's
// logits as they were (the host checks targets; a NaN loss stops a training run).
#extension GL_GOOGLE_include_directive : require
#include "cross_entropy.h"
#include "common/index.glsl"

layout(binding = 0) buffer Logits { float l[]; };             // [N, V], in place
layout(binding = 1) readonly buffer Targets { int targets[]; };  // [N]
layout(binding = 2) writeonly buffer Losses { float losses[]; };  // [N]
layout(push_constant) uniform Push { CrossEntropyPush p; };

const uint WG = gl_WorkGroupSize.x;
#define REDUCE_T float
shared REDUCE_T red[CROSS_ENTROPY_MAX_WORKGROUP];  // WG used
#include "common/reduce.glsl"

void main() {
  const uint row = flat_group();
  if (row >= p.N) return;  // the whole workgroup leaves together: barriers stay uniform
  const uint tid = gl_LocalInvocationID.x, base = p.l_skip + row * p.V;
  const int t = targets[p.t_skip + row];
  if (t == CROSS_ENTROPY_IGNORE) {  // the whole workgroup's row: no barrier follows
    if (tid == 0) losses[p.out_skip + row] = 0.0;
    for (uint v = tid; v < p.V; v += WG) l[base + v] = 0.0;
    return;
  }
  if (t < 0 || uint(t) >= p.V) {
    if (tid == 0) losses[p.out_skip + row] = uintBitsToFloat(0x7fc00000u);  // NaN
    return;
  }
  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (uint v = tid; v < p.V; v += WG) m = max(m, l[base + v]);
  m = workgroup_max(m);
  float s = 0.0;
  for (uint v = tid; v < p.V; v += WG) s += exp(l[base + v] - m);
  const float lse = m + log(workgroup_sum(s));
  // Every invocation reads the target's logit before any writes it (workgroup_sum ends in a
  // barrier, and this barrier keeps the read ahead of the writes below).
  const float target_logit = l[base + uint(t)];
  barrier();
  if (tid == 0) losses[p.out_skip + row] = lse - target_logit;
  for (uint v = tid; v < p.V; v += WG)
    l[base + v] = (exp(l[base + v] - lse) - (v == uint(t) ? 1.0 : 0.0)) * p.scale;
}
