#version 450
// The weight gradient of matmul for CPU devices (the kernel set's choice where texel buffers
// are the fast path, model/ops/gpu/policy.h): dW += x^T dout in W's layout, as
// matmul_backward.comp computes it, with x and dout read as rgba32f texels (on llvmpipe a
// storage-buffer load whose address differs per lane is a scalar loop over the lanes, an
// imageLoad one vector gather). Each invocation owns 4 k by 8 n outputs and sums the rows in
// order, in registers: no shared memory, no barriers, the same bits every run. Consecutive
// invocations take consecutive blocks of n, so their loads of a dout row are contiguous.
#extension GL_GOOGLE_include_directive : require
#include "matmul.h"
#include "matmul_backward.h"
#include "common/index.glsl"

layout(constant_id = 3) const uint LAYOUT = MATMUL_KN;

layout(binding = 0) buffer Dw { float dw[]; };                     // [K, N] or [N, K], accumulated
layout(binding = 1, rgba32f) uniform readonly imageBuffer dout;   // [rows, N / 4]
layout(binding = 2, rgba32f) uniform readonly imageBuffer x;      // [rows, K / 4]
layout(push_constant) uniform Push { MatmulBackwardPush p; };

void main() {
  const uint id = flat_index(), nb = p.N / 8;
  if (id >= p.K / 4 * nb) return;
  const uint k4 = id / nb, n8 = id % nb;  // k = 4 k4 + i, n = 8 n8 + j
  vec4 acc[4][2];
  for (uint i = 0; i < 4; i++) acc[i][0] = acc[i][1] = vec4(0.0);
  const uint xs = p.K / 4, ds = p.N / 4, x0 = p.x_off / 4 + k4, d0 = p.dout_off / 4 + 2 * n8;
  for (uint t = 0; t < p.rows; t++) {
    const vec4 a = imageLoad(x, int(x0 + t * xs));
    const vec4 b0 = imageLoad(dout, int(d0 + t * ds)), b1 = imageLoad(dout, int(d0 + t * ds + 1));
    for (uint i = 0; i < 4; i++) {
      acc[i][0] += a[i] * b0;
      acc[i][1] += a[i] * b1;
    }
  }
  for (uint i = 0; i < 4; i++)
    for (uint j = 0; j < 8; j++) {
      const uint k = 4 * k4 + i, n = 8 * n8 + j;
      const uint at = LAYOUT == MATMUL_KN ? k * p.N + n : n * p.K + k;
      dw[at] += acc[i][j / 4][j % 4];
    }
}
