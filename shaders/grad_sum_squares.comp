#version 450
// Sums of squares of a gradient, for the global norm of gradient clipping (training): each
// workgroup one partial sum of a fixed chunk, each invocation a strided share of the chunk, then
// common/reduce.glsl's tree. The host sums the partials of every tensor with a second dispatch of
// this shader (square = 0, one workgroup): a fixed order throughout, so the same bits every run.
#extension GL_GOOGLE_include_directive : require
#include "optimizer.h"
#include "common/index.glsl"

layout(binding = 0) writeonly buffer Partial { float partial[]; };  // [groups]
layout(binding = 1) readonly buffer X { float x[]; };               // [n]
layout(push_constant) uniform Push { GradSumSquaresPush p; };

const uint WG = gl_WorkGroupSize.x;
#define REDUCE_T float
shared REDUCE_T red[GRAD_MAX_WORKGROUP];  // WG used
#include "common/reduce.glsl"

void main() {
  const uint g = flat_group();
  if (g >= p.groups) return;  // a folded grid's spare workgroups, whole: barriers stay uniform
  const uint begin = g * p.chunk, end = min(p.n, begin + p.chunk);
  float s = 0.0;
  for (uint i = begin + gl_LocalInvocationID.x; i < end; i += WG) {
    const float v = x[p.skip + i];
    s += p.square != 0 ? v * v : v;
  }
  s = workgroup_sum(s);
  if (gl_LocalInvocationID.x == 0) partial[p.out_skip + g] = s;
}
