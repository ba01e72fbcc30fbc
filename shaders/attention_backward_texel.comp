#version 450
// attention_backward.comp for CPU devices (the kernel set's choice where texel buffers are the
// fast path, model/ops/gpu/policy.h): the same two passes, with q, k, v and dout read as
// rgba32f texels and each invocation's rows of q, dout (query pass) or k, v (key pass) held in
// registers. On llvmpipe a storage-buffer load whose address differs per lane is a scalar loop
// over the lanes, an imageLoad one vector gather. Needs D % 4 == 0 (the host checks).
#extension GL_GOOGLE_include_directive : require
#include "attention_backward.h"
#include "common/index.glsl"

layout(constant_id = 3) const uint D = 64;  // head dim, a multiple of 4, <= ATTENTION_BACKWARD_MAX_D
layout(constant_id = 4) const bool KEYS = false;

layout(binding = 0) writeonly buffer Dqkv { vec4 dqkv[]; };          // [B, T, 3C / 4]
layout(binding = 1) writeonly buffer Stats { vec4 stats[]; };        // [B, H, T]: lse, D_t
layout(binding = 2, rgba32f) uniform readonly imageBuffer dout;      // [B, T, C / 4]
layout(binding = 3, rgba32f) uniform readonly imageBuffer qkv;       // [B, T, 3C / 4]
layout(binding = 4, rgba32f) uniform readonly imageBuffer stats_in;  // the same stats, read
layout(push_constant) uniform Push { AttentionBackwardPush p; };

const uint MAX4 = ATTENTION_BACKWARD_MAX_D / 4, D4 = D / 4;

// a . (the D4 texels of `img` from texel `at`)
float dot_row(vec4 a[MAX4], uint at, bool from_dout) {
  float s = 0.0;
  for (uint i = 0; i < D4; i++) s += dot(a[i], from_dout ? imageLoad(dout, int(at + i)) : imageLoad(qkv, int(at + i)));
  return s;
}

void main() {
  const uint id = flat_index();
  if (id >= p.B * p.H * p.T) return;
  const uint t = id % p.T, h = id / p.T % p.H, b = id / (p.T * p.H);
  const uint row3 = 3 * p.C / 4, seq = b * p.T, col = h * D4, c4 = p.C / 4;
  #define Q(u) ((seq + (u)) * row3 + col)
  #define K(u) ((seq + (u)) * row3 + c4 + col)
  #define V(u) ((seq + (u)) * row3 + 2 * c4 + col)
  #define DO(u) ((seq + (u)) * c4 + col)
  if (!KEYS) {
    vec4 q[MAX4], g[MAX4], dq[MAX4];
    for (uint i = 0; i < D4; i++) {
      q[i] = imageLoad(qkv, int(Q(t) + i));
      g[i] = imageLoad(dout, int(DO(t) + i));
      dq[i] = vec4(0.0);
    }
    const uint L = p.causal != 0 ? t + 1 : p.T;
    float m = uintBitsToFloat(0xff800000u), l = 0.0;
    for (uint j = 0; j < L; j++) {
      const float s = p.scale * dot_row(q, K(j), false);
      const float m_new = max(m, s);
      l = l * exp(m - m_new) + exp(s - m_new);
      m = m_new;
    }
    const float lse = m + log(l);
    float dt = 0.0;
    for (uint j = 0; j < L; j++)
      dt += exp(p.scale * dot_row(q, K(j), false) - lse) * dot_row(g, V(j), false);
    for (uint j = 0; j < L; j++) {
      const float pj = exp(p.scale * dot_row(q, K(j), false) - lse);
      const float ds = pj * (dot_row(g, V(j), false) - dt) * p.scale;
      for (uint i = 0; i < D4; i++) dq[i] += ds * imageLoad(qkv, int(K(j) + i));
    }
    for (uint i = 0; i < D4; i++) dqkv[Q(t) + i] = dq[i];
    stats[(b * p.H + h) * p.T + t] = vec4(lse, dt, 0.0, 0.0);
    return;
  }
  const uint j = t;
  vec4 k[MAX4], v[MAX4], dk[MAX4], dv[MAX4];
  for (uint i = 0; i < D4; i++) {
    k[i] = imageLoad(qkv, int(K(j) + i));
    v[i] = imageLoad(qkv, int(V(j) + i));
    dk[i] = dv[i] = vec4(0.0);
  }
  for (uint u = p.causal != 0 ? j : 0; u < p.T; u++) {
    const vec4 st = imageLoad(stats_in, int((b * p.H + h) * p.T + u));
    const float pj = exp(p.scale * dot_row(k, Q(u), false) - st.x);
    const float ds = pj * (dot_row(v, DO(u), true) - st.y) * p.scale;
    for (uint i = 0; i < D4; i++) {
      dk[i] += ds * imageLoad(qkv, int(Q(u) + i));
      dv[i] += pj * imageLoad(dout, int(DO(u) + i));
    }
  }
  for (uint i = 0; i < D4; i++) {
    dqkv[K(j) + i] = dk[i];
    dqkv[V(j) + i] = dv[i];
  }
}
