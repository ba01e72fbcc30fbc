#version 450
// attention_backward.comp for CPU devices (the kernel set's choice where texel buffers are the
// fast path, model/ops/gpu/policy.h): the same two passes, with q, k, v and dout read as
// rgba32f texels and each invocation's rows of q, dout (query pass) or k, v (key pass) held in
// registers. On llvmpipe a storage-buffer load whose address differs per lane is a scalar loop
// over the lanes, an imageLoad one vector gather. Needs D % 4 == 0 (the host checks). Padded
// batches (p.key_lens) as in attention_backward.comp.
#extension GL_GOOGLE_include_directive : require
#include "attention_backward.h"
#include "common/index.glsl"

layout(constant_id = 3) const uint D = 64;  // head dim, a multiple of 4, <= ATTENTION_BACKWARD_MAX_D
layout(constant_id = 4) const bool KEYS = false;

// Strides and columns in floats as the push constants give them, multiples of 4 (the host
// checks), so texel indices are theirs / 4. dq, dk and dv in q's, k's and v's places.
layout(binding = 0) writeonly buffer Dq { vec4 dq_[]; };             // [B, T, q_stride / 4]
layout(binding = 1) writeonly buffer Dk { vec4 dk_[]; };             // [B, S, kv_stride / 4]
layout(binding = 2) writeonly buffer Dv { vec4 dv_[]; };             // [B, S, kv_stride / 4]
layout(binding = 3) writeonly buffer Stats { vec4 stats[]; };        // [B, H, T]: lse, D_t
layout(binding = 4, rgba32f) uniform readonly imageBuffer dout;      // [B, T, C / 4]
layout(binding = 5, rgba32f) uniform readonly imageBuffer q_;        // [B, T, q_stride / 4]
layout(binding = 6, rgba32f) uniform readonly imageBuffer k_;        // [B, S, kv_stride / 4]
layout(binding = 7, rgba32f) uniform readonly imageBuffer v_;        // [B, S, kv_stride / 4]
layout(binding = 8, rgba32f) uniform readonly imageBuffer stats_in;  // the same stats, read
layout(binding = 9) readonly buffer KeyLens { uint key_lens[]; };     // [B], read if p.key_lens
layout(push_constant) uniform Push { AttentionBackwardPush p; };

const uint MAX4 = ATTENTION_BACKWARD_MAX_D / 4, D4 = D / 4;

// a . (the D4 texels of q, k, v or dout from texel `at`)
const uint FROM_Q = 0, FROM_K = 1, FROM_V = 2, FROM_DOUT = 3;
vec4 load(uint from, uint at) {
  return from == FROM_Q ? imageLoad(q_, int(at)) : from == FROM_K ? imageLoad(k_, int(at))
       : from == FROM_V ? imageLoad(v_, int(at)) : imageLoad(dout, int(at));
}
float dot_row(vec4 a[MAX4], uint at, uint from) {
  float s = 0.0;
  for (uint i = 0; i < D4; i++) s += dot(a[i], load(from, at + i));
  return s;
}

void main() {
  const uint id = flat_index();
  const uint n = KEYS ? p.S : p.T;  // this pass's rows per sequence and head
  if (id >= p.B * p.H * n) return;
  const uint t = id % n, h = id / n % p.H, b = id / (n * p.H);
  const uint col = h * D4, c4 = p.C / 4;
  // query u's q and dout rows and key u's k and v rows, at this head, in texels
  #define Q(u) (((b * p.T + (u)) * p.q_stride + p.q_col) / 4 + col)
  #define K(u) (((b * p.S + (u)) * p.kv_stride + p.k_col) / 4 + col)
  #define V(u) (((b * p.S + (u)) * p.kv_stride + p.v_col) / 4 + col)
  #define DO(u) ((b * p.T + (u)) * c4 + col)
  const uint S_b = p.key_lens != 0 ? clamp(key_lens[b], 1u, p.S) : p.S;  // the sequence's keys
  if (!KEYS) {
    vec4 q[MAX4], g[MAX4], dq[MAX4];
    for (uint i = 0; i < D4; i++) {
      q[i] = imageLoad(q_, int(Q(t) + i));
      g[i] = imageLoad(dout, int(DO(t) + i));
      dq[i] = vec4(0.0);
    }
    const uint L = p.causal != 0 ? t + 1 : S_b;
    float m = uintBitsToFloat(0xff800000u), l = 0.0;
    for (uint j = 0; j < L; j++) {
      const float s = p.scale * dot_row(q, K(j), FROM_K);
      const float m_new = max(m, s);
      l = l * exp(m - m_new) + exp(s - m_new);
      m = m_new;
    }
    const float lse = m + log(l);
    float dt = 0.0;
    for (uint j = 0; j < L; j++)
      dt += exp(p.scale * dot_row(q, K(j), FROM_K) - lse) * dot_row(g, V(j), FROM_V);
    for (uint j = 0; j < L; j++) {
      const float pj = exp(p.scale * dot_row(q, K(j), FROM_K) - lse);
      const float ds = pj * (dot_row(g, V(j), FROM_V) - dt) * p.scale;
      for (uint i = 0; i < D4; i++) dq[i] += ds * imageLoad(k_, int(K(j) + i));
    }
    for (uint i = 0; i < D4; i++) dq_[Q(t) + i] = dq[i];
    stats[(b * p.H + h) * p.T + t] = vec4(lse, dt, 0.0, 0.0);
    return;
  }
  const uint j = t;
  vec4 k[MAX4], v[MAX4], dk[MAX4], dv[MAX4];
  for (uint i = 0; i < D4; i++) {
    k[i] = imageLoad(k_, int(K(j) + i));
    v[i] = imageLoad(v_, int(V(j) + i));
    dk[i] = dv[i] = vec4(0.0);
  }
  const uint end = j < S_b ? p.T : 0;  // a padding key: no query sees it
  for (uint u = p.causal != 0 ? j : 0; u < end; u++) {
    const vec4 st = imageLoad(stats_in, int((b * p.H + h) * p.T + u));
    const float pj = exp(p.scale * dot_row(k, Q(u), FROM_Q) - st.x);
    const float ds = pj * (dot_row(v, DO(u), FROM_DOUT) - st.y) * p.scale;
    for (uint i = 0; i < D4; i++) {
      dk[i] += ds * imageLoad(q_, int(Q(u) + i));
      dv[i] += pj * imageLoad(dout, int(DO(u) + i));
    }
  }
  for (uint i = 0; i < D4; i++) {
    dk_[K(j) + i] = dk[i];
    dv_[V(j) + i] = dv[i];
  }
}
