#version 450
// interleave: a 32-bit W [N, K] (given [K, N] or [N, K]) repacked into the Interleaved layout
// that matmul_interleaved.glsl reads: rows in blocks of B = MATMUL_BLOCK_ROWS, texel (n, kt) of
// 4 elements at (n / B * K / 4 + kt) * B + n % B, padding rows zero. What model::gpu::interleave()
// does on the host at load time, on the device: training repacks its fp32 weights after every
// update (and their transposes for dx = dout W^T). One invocation per output texel; consecutive
// invocations take consecutive rows n of a block, so a [K, N] source is read along its rows.
#extension GL_GOOGLE_include_directive : require
#include "matmul.h"
#include "common/index.glsl"

layout(binding = 0) writeonly buffer Out { uvec4 out_[]; };  // [ceil(N / B), K / 4, B]
layout(binding = 1) readonly buffer In { uint in_[]; };      // [K, N] or [N, K]
layout(push_constant) uniform Push { InterleavePush p; };

void main() {
  const uint o = flat_index(), B = MATMUL_BLOCK_ROWS, kts = p.K / 4;
  if (o >= (p.N + B - 1) / B * B * kts) return;
  const uint n = o / (kts * B) * B + o % B, kt = o / B % kts;
  uvec4 v = uvec4(0);
  if (n < p.N)
    for (uint i = 0; i < 4; i++) {
      const uint k = kt * 4 + i;
      v[i] = in_[p.from == MATMUL_NK ? n * p.K + k : k * p.N + n];
    }
  out_[o] = v;
}
