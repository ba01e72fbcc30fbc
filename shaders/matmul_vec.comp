#version 450
// Matrix-vector product for a few rows (decode): out[t, n] = act(x[t] . w(:, n) + b[n]) + r[t, n]
// for t < p.rows <= ROWS. Each weight is read once per dispatch and used for every row. A
// workgroup owns `slots` outputs; its `lanes` invocations per output split K between them and
// reduce their partial sums in shared memory. Lanes run along the axis that is contiguous in
// memory, so neighbouring invocations read neighbouring weights: along K for W [N, K] (lanes on
// x, outputs on y), along N for W [K, N] (outputs on x, lanes on y).
#extension GL_GOOGLE_include_directive : require
#include "matmul.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1) in;
layout(constant_id = 6) const uint ROWS = 1;  // rows of x per dispatch, at most

// ROWS * gl_WorkGroupSize.x * gl_WorkGroupSize.y used, at a fixed size (Metal cannot size a
// shared array by specialization constants); the host keeps within it.
shared float partial[MATMUL_VEC_MAX_PARTIAL];

void main() {
  const bool nk = LAYOUT == MATMUL_NK;
  const uint lane = nk ? gl_LocalInvocationID.x : gl_LocalInvocationID.y;
  const uint lanes = nk ? gl_WorkGroupSize.x : gl_WorkGroupSize.y;  // a power of two
  const uint slot = nk ? gl_LocalInvocationID.y : gl_LocalInvocationID.x;
  const uint slots = nk ? gl_WorkGroupSize.y : gl_WorkGroupSize.x;
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // folded by the host
  const uint n = group * slots + slot;
  const bool live = n < p.n_count;

  float acc[ROWS];
  for (uint t = 0; t < ROWS; t++) acc[t] = 0.0;
  if (live) {
    for (uint k = lane; k < p.k_count; k += lanes) {
      float wk = weight(k, n);
      for (uint t = 0; t < ROWS; t++)
        if (t < p.rows) acc[t] += x_at(t, k) * wk;
    }
  }

  // partial[t][slot][lane], halved until lane 0 holds each sum.
  for (uint t = 0; t < ROWS; t++) partial[(t * slots + slot) * lanes + lane] = acc[t];
  barrier();
  for (uint s = lanes / 2; s > 0; s /= 2) {
    if (lane < s)
      for (uint t = 0; t < ROWS; t++) {
        uint i = (t * slots + slot) * lanes + lane;
        partial[i] += partial[i + s];
      }
    barrier();
  }
  if (live && lane == 0)
    for (uint t = 0; t < p.rows; t++) store(t, n, partial[(t * slots + slot) * lanes]);
}
