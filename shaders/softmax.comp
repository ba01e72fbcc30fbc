#version 450
// Row-wise softmax with an inverse temperature: out[r, :] = softmax(x[r, :] * inv_temperature).
// One workgroup per row, looping over N (a 50257-wide vocabulary is fine). Stable form:
// exp((x - max x) * inv_temperature) with inv_temperature > 0 (the wrapper checks), so no exp
// overflows, the largest term is exactly 1, and x - max x is exact near the maximum.
// In place (out and x the same memory) works: every element is read and written by the same
// invocation, and its last read comes before its only write.
#extension GL_GOOGLE_include_directive : require
#include "softmax.h"
#include "common/index.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) buffer Out { float out_[]; };     // [R, N]; read-write so it may alias x
layout(binding = 1) readonly buffer X { float x[]; };  // [R, N]
layout(push_constant) uniform Push { SoftmaxPush p; };

const uint WG = gl_WorkGroupSize.x;
#define REDUCE_T float
shared REDUCE_T red[WG];
#include "common/reduce.glsl"

void main() {
  uint row = flat_group();
  if (row >= p.R) return;  // the whole workgroup leaves together: barriers stay uniform
  uint tid = gl_LocalInvocationID.x;
  uint xb = p.x_first + row * p.N, ob = p.out_first + row * p.N;

  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (uint i = tid; i < p.N; i += WG) m = max(m, x[xb + i]);
  m = workgroup_max(m);

  // x == -inf (a masked logit) gives exp(-inf) = 0.
  float s = 0.0;
  for (uint i = tid; i < p.N; i += WG) s += exp((x[xb + i] - m) * p.inv_temperature);
  float inv_sum = 1.0 / workgroup_sum(s);

  for (uint i = tid; i < p.N; i += WG)
    out_[ob + i] = exp((x[xb + i] - m) * p.inv_temperature) * inv_sum;
}
