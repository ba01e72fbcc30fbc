#version 450
// The backward of training's attention (causal or not, over whole sequences), in two passes (a
// specialization constant), with the softmax weights recomputed rather than stored (the
// FlashAttention-2 order, without its tiles or atomics):
//   QUERIES: one invocation per (sequence, head, query t): its logsumexp over the keys it sees,
//     then D_t = sum_j p_tj dp_tj (dp_tj = dout_t . v_j), then
//     dq_t = scale sum_j p_tj (dp_tj - D_t) k_j; logsumexp and D_t go to stats.
//   KEYS: one invocation per (sequence, head, key j), over the queries that see it, in order:
//     dk_j = scale sum_t p_tj (dp_tj - D_t) q_t,  dv_j = sum_t p_tj dout_t.
// Each output has one writer and sums in a fixed order: the same bits every run. Work is
// O(T^2 D) per head and pass: for the short contexts a model trains at here. The loops over D
// unroll (D is a specialization constant): llvmpipe ends every loop of an invocation after
// 65,535 iterations in all, and a query's pass would otherwise run about 6 D T of them.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "attention_backward.h"
#include "common/index.glsl"

layout(constant_id = 3) const uint D = 64;  // head dim, <= ATTENTION_BACKWARD_MAX_D
layout(constant_id = 4) const bool KEYS = false;

layout(binding = 0) buffer Dqkv { float dqkv[]; };            // [B, T, 3C]
layout(binding = 1) buffer Stats { vec4 stats[]; };           // [B, H, T]: logsumexp, D_t, 0, 0
layout(binding = 2) readonly buffer Dout { float dout[]; };   // [B, T, C]
layout(binding = 3) readonly buffer Qkv { float qkv[]; };     // [B, T, 3C]
layout(push_constant) uniform Push { AttentionBackwardPush p; };

const uint MAX_D = ATTENTION_BACKWARD_MAX_D;

// q . k (or dout . v) of rows a and b of their tensors, D values from each offset.
float dot_rows(uint a, bool a_dout, uint b) {
  float s = 0.0;
  [[unroll]] for (uint i = 0; i < D; i++) s += (a_dout ? dout[a + i] : qkv[a + i]) * qkv[b + i];
  return s;
}

void main() {
  const uint id = flat_index();
  if (id >= p.B * p.H * p.T) return;
  const uint t = id % p.T, h = id / p.T % p.H, b = id / (p.T * p.H);
  const uint row3 = 3 * p.C, seq = b * p.T;
  const uint col = h * D;
  // qkv's q, k and v of token u, and dout's row of token u, at this head
  #define Q(u) ((seq + (u)) * row3 + col)
  #define K(u) ((seq + (u)) * row3 + p.C + col)
  #define V(u) ((seq + (u)) * row3 + 2 * p.C + col)
  #define DO(u) ((seq + (u)) * p.C + col)
  if (!KEYS) {
    const uint L = p.causal != 0 ? t + 1 : p.T;  // keys this query sees
    float m = uintBitsToFloat(0xff800000u), l = 0.0;  // running max and sum
    for (uint j = 0; j < L; j++) {
      const float s = p.scale * dot_rows(Q(t), false, K(j));
      const float m_new = max(m, s);
      l = l * exp(m - m_new) + exp(s - m_new);
      m = m_new;
    }
    const float lse = m + log(l);
    float dt = 0.0;
    for (uint j = 0; j < L; j++)
      dt += exp(p.scale * dot_rows(Q(t), false, K(j)) - lse) * dot_rows(DO(t), true, V(j));
    float dq[MAX_D];
    [[unroll]] for (uint i = 0; i < D; i++) dq[i] = 0.0;
    for (uint j = 0; j < L; j++) {
      const float pj = exp(p.scale * dot_rows(Q(t), false, K(j)) - lse);
      const float ds = pj * (dot_rows(DO(t), true, V(j)) - dt) * p.scale;
      [[unroll]] for (uint i = 0; i < D; i++) dq[i] += ds * qkv[K(j) + i];
    }
    [[unroll]] for (uint i = 0; i < D; i++) dqkv[Q(t) + i] = dq[i];
    stats[(b * p.H + h) * p.T + t] = vec4(lse, dt, 0.0, 0.0);
    return;
  }
  // The key pass: this invocation's key is j = t.
  const uint j = t;
  float dk[MAX_D], dv[MAX_D];
  [[unroll]] for (uint i = 0; i < D; i++) dk[i] = dv[i] = 0.0;
  for (uint u = p.causal != 0 ? j : 0; u < p.T; u++) {
    const vec4 st = stats[(b * p.H + h) * p.T + u];
    const float pj = exp(p.scale * dot_rows(Q(u), false, K(j)) - st.x);
    const float ds = pj * (dot_rows(DO(u), true, V(j)) - st.y) * p.scale;
    [[unroll]] for (uint i = 0; i < D; i++) {
      dk[i] += ds * qkv[Q(u) + i];
      dv[i] += pj * dout[DO(u) + i];
    }
  }
  [[unroll]] for (uint i = 0; i < D; i++) {
    dqkv[K(j) + i] = dk[i];
    dqkv[V(j) + i] = dv[i];
  }
}
