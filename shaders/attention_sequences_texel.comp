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

// Strides and columns in floats as the push constants give them, multiples of 4 (the host
// checks), so texel indices are theirs / 4.
layout(binding = 0) writeonly buffer Out { vec4 out_[]; };      // [B, T, C / 4]
layout(binding = 1, rgba32f) uniform readonly imageBuffer q_;   // [B, T, q_stride / 4]
layout(binding = 2, rgba32f) uniform readonly imageBuffer k_;   // [B, S, kv_stride / 4]
layout(binding = 3, rgba32f) uniform readonly imageBuffer v_;   // [B, S, kv_stride / 4]
layout(binding = 4) readonly buffer KeyLens { uint key_lens[]; };  // [B], read if p.key_lens
layout(push_constant) uniform Push { AttentionBackwardPush p; };

const uint MAX4 = ATTENTION_BACKWARD_MAX_D / 4, D4 = D / 4;

void main() {
  const uint id = flat_index();
  if (id >= p.B * p.H * p.T) return;
  const uint t = id % p.T, h = id / p.T % p.H, b = id / (p.T * p.H);
  const uint col = h * D4, c4 = p.C / 4;
  const uint q_at = ((b * p.T + t) * p.q_stride + p.q_col) / 4 + col;
  vec4 q[MAX4], acc[MAX4];
  for (uint i = 0; i < D4; i++) {
    q[i] = imageLoad(q_, int(q_at + i));
    acc[i] = vec4(0.0);
  }
  const uint L = p.causal != 0 ? t + 1 : p.key_lens != 0 ? clamp(key_lens[b], 1u, p.S) : p.S;
  float m = uintBitsToFloat(0xff800000u), l = 0.0;  // running max and sum
  for (uint j = 0; j < L; j++) {
    const uint row = (b * p.S + j) * p.kv_stride / 4 + col;
    const uint k = row + p.k_col / 4, v = row + p.v_col / 4;
    float s = 0.0;
    for (uint i = 0; i < D4; i++) s += dot(q[i], imageLoad(k_, int(k + i)));
    s *= p.scale;
    const float m_new = max(m, s), alpha = exp(m - m_new), w = exp(s - m_new);
    l = l * alpha + w;
    for (uint i = 0; i < D4; i++) acc[i] = acc[i] * alpha + w * imageLoad(v_, int(v + i));
    m = m_new;
  }
  const uint o = (b * p.T + t) * c4 + col;
  for (uint i = 0; i < D4; i++) out_[o + i] = acc[i] / l;
}
