#version 450
// The weight gradient of matmul (training): dW += x^T dout over a step's rows, in W's own layout
// (KN: dw[k N + n]; NK: dw[n K + k]), and in the bias pass (a specialization constant) the bias
// gradient, dbias[n] += the column sum of dout. A workgroup owns a 64 x 64 tile of dW; the rows
// go through shared memory 16 at a time, each invocation summing 4 x 8 outputs over them in row
// order, so every output's sum has one order whatever the device: the same bits every run. (dx,
// dout W^T, is a plain matmul with W read transposed: model/ops/gpu/matmul_backward.cpp.)
#extension GL_GOOGLE_include_directive : require
#include "matmul.h"
#include "matmul_backward.h"

layout(local_size_x = 16, local_size_y = 8) in;
layout(constant_id = 3) const uint LAYOUT = MATMUL_KN;
layout(constant_id = 4) const bool BIAS = false;

layout(binding = 0) buffer Dw { float dw[]; };                // [K, N] or [N, K], accumulated
layout(binding = 1) buffer Dbias { float dbias[]; };          // [N], accumulated (bias pass)
layout(binding = 2) readonly buffer Dout { float dout[]; };   // [rows, N]
layout(binding = 3) readonly buffer X { float x[]; };         // [rows, K]
layout(push_constant) uniform Push { MatmulBackwardPush p; };

const uint TILE = MATMUL_BACKWARD_TILE, R = MATMUL_BACKWARD_ROWS;
shared float xs[R][TILE];  // x[t0 + r, k0 + i]
shared float ds[R][TILE];  // dout[t0 + r, n0 + j]

void main() {
  if (BIAS) {
    const uint n = gl_WorkGroupID.x * 128 + gl_LocalInvocationID.y * 16 + gl_LocalInvocationID.x;
    if (n >= p.N) return;
    float s = 0.0;
    for (uint t = 0; t < p.rows; t++) s += dout[p.dout_off + t * p.N + n];
    dbias[n] += s;
    return;
  }
  const uint n0 = gl_WorkGroupID.x * TILE, k0 = gl_WorkGroupID.y * TILE;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;  // n = 4 tx + j, k = 8 ty + i
  const uint lid = ty * 16 + tx;
  float acc[8][4];
  for (uint i = 0; i < 8; i++)
    for (uint j = 0; j < 4; j++) acc[i][j] = 0.0;
  for (uint t0 = 0; t0 < p.rows; t0 += R) {
    // 128 invocations load the 16 x 64 blocks of x and dout, 8 values each, consecutive
    // invocations along a row (coalesced).
    for (uint e = lid; e < R * TILE; e += 128) {
      const uint r = e / TILE, c = e % TILE, t = t0 + r;
      xs[r][c] = t < p.rows && k0 + c < p.K ? x[p.x_off + t * p.K + k0 + c] : 0.0;
      ds[r][c] = t < p.rows && n0 + c < p.N ? dout[p.dout_off + t * p.N + n0 + c] : 0.0;
    }
    barrier();
    for (uint r = 0; r < R; r++) {
      float a[8], b[4];
      for (uint i = 0; i < 8; i++) a[i] = xs[r][8 * ty + i];
      for (uint j = 0; j < 4; j++) b[j] = ds[r][4 * tx + j];
      for (uint i = 0; i < 8; i++)
        for (uint j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  for (uint i = 0; i < 8; i++)
    for (uint j = 0; j < 4; j++) {
      const uint k = k0 + 8 * ty + i, n = n0 + 4 * tx + j;
      if (k < p.K && n < p.N) {
        const uint at = LAYOUT == MATMUL_KN ? k * p.N + n : n * p.K + k;
        dw[at] += acc[i][j];
      }
    }
}
