#version 450
// attention_sequences.comp for CPU devices (the kernel set's choice where texel buffers are the
// fast path, model/ops/gpu/policy.h): the same online softmax per (sequence, head, query t), with
// q, k and v read as rgba32f texels and the query row and output row held in registers as vec4s.
// On llvmpipe a storage-buffer load whose address differs per lane is a scalar loop over the
// lanes, an imageLoad one vector gather. Needs D % 4 == 0 (the host checks).
//   out[b, t, h] = sum_j softmax_j(scale q_t . k_j) v_j
#extension GL_GOOGLE_include_directive : require
#include "attention_backward.h"
#include "common/index.glsl"

layout(constant_id = 3) const uint D = 64;  // head dim, a multiple of 4, <= ATTENTION_BACKWARD_MAX_D

layout(binding = 0) writeonly buffer Out { vec4 out_[]; };   // [B, T, C / 4]
layout(binding = 1, rgba32f) uniform readonly imageBuffer qkv;  // [B, T, 3C / 4]
layout(push_constant) uniform Push { AttentionBackwardPush p; };

const uint MAX4 = ATTENTION_BACKWARD_MAX_D / 4, D4 = D / 4;

void main() {
  const uint id = flat_index();
  if (id >= p.B * p.H * p.T) return;
  const uint t = id % p.T, h = id / p.T % p.H, b = id / (p.T * p.H);
  const uint row3 = 3 * p.C / 4, seq = b * p.T, col = h * D4, c4 = p.C / 4;
  vec4 q[MAX4], acc[MAX4];
  for (uint i = 0; i < D4; i++) {
    q[i] = imageLoad(qkv, int((seq + t) * row3 + col + i));
    acc[i] = vec4(0.0);
  }
  const uint L = p.causal != 0 ? t + 1 : p.T;
  float m = uintBitsToFloat(0xff800000u), l = 0.0;  // running max and sum
  for (uint j = 0; j < L; j++) {
    const uint k = (seq + j) * row3 + c4 + col, v = k + c4;
    float s = 0.0;
    for (uint i = 0; i < D4; i++) s += dot(q[i], imageLoad(qkv, int(k + i)));
    s *= p.scale;
    const float m_new = max(m, s), alpha = exp(m - m_new), w = exp(s - m_new);
    l = l * alpha + w;
    for (uint i = 0; i < D4; i++) acc[i] = acc[i] * alpha + w * imageLoad(qkv, int(v + i));
    m = m_new;
  }
  const uint o = (seq + t) * c4 + col;
  for (uint i = 0; i < D4; i++) out_[o + i] = acc[i] / l;
}
