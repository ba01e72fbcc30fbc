#version 450
// The backward of training's attention (self-attention, causal or not, or cross-attention over
// a source, over whole sequences), in two passes (a specialization constant), with the softmax
// weights recomputed rather than stored (the FlashAttention-2 order, without its tiles or
// atomics):
//   QUERIES: one invocation per (sequence, head, query t): its logsumexp over the keys it sees,
//     then D_t = sum_j p_tj dp_tj (dp_tj = dout_t . v_j), then
//     dq_t = scale sum_j p_tj (dp_tj - D_t) k_j; logsumexp and D_t go to stats.
//   KEYS: one invocation per (sequence, head, key j of S), over the queries that see it, in order:
//     dk_j = scale sum_t p_tj (dp_tj - D_t) q_t,  dv_j = sum_t p_tj dout_t.
// Where the batch is padded (p.key_lens), sequence b's queries see its first key_lens[b] keys and
// the keys past them, which no query sees, get dk = dv = 0.
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

// dq, dk and dv in q's, k's and v's places (for self-attention, three views of one dqkv)
layout(binding = 0) writeonly buffer Dq { float dq_[]; };     // [B, T, q_stride]
layout(binding = 1) writeonly buffer Dk { float dk_[]; };     // [B, S, kv_stride]
layout(binding = 2) writeonly buffer Dv { float dv_[]; };     // [B, S, kv_stride]
layout(binding = 3) buffer Stats { vec4 stats[]; };           // [B, H, T]: logsumexp, D_t, 0, 0
layout(binding = 4) readonly buffer Dout { float dout[]; };   // [B, T, C]
layout(binding = 5) readonly buffer Q { float q_[]; };        // [B, T, q_stride]
layout(binding = 6) readonly buffer K { float k_[]; };        // [B, S, kv_stride]
layout(binding = 7) readonly buffer V { float v_[]; };        // [B, S, kv_stride]
layout(binding = 8) readonly buffer KeyLens { uint key_lens[]; };  // [B], read if p.key_lens
layout(push_constant) uniform Push { AttentionBackwardPush p; };

const uint MAX_D = ATTENTION_BACKWARD_MAX_D;

// q . k and dout . v: D values from each offset.
float q_dot_k(uint a, uint b) {
  float s = 0.0;
  [[unroll]] for (uint i = 0; i < D; i++) s += q_[a + i] * k_[b + i];
  return s;
}
float dout_dot_v(uint a, uint b) {
  float s = 0.0;
  [[unroll]] for (uint i = 0; i < D; i++) s += dout[a + i] * v_[b + i];
  return s;
}

void main() {
  const uint id = flat_index();
  const uint n = KEYS ? p.S : p.T;  // this pass's rows per sequence and head
  if (id >= p.B * p.H * n) return;
  const uint t = id % n, h = id / n % p.H, b = id / (n * p.H);
  const uint col = h * D;
  // query u's q and dout rows and key u's k and v rows, at this head
  #define Q(u) ((b * p.T + (u)) * p.q_stride + p.q_col + col)
  #define K(u) ((b * p.S + (u)) * p.kv_stride + p.k_col + col)
  #define V(u) ((b * p.S + (u)) * p.kv_stride + p.v_col + col)
  #define DO(u) ((b * p.T + (u)) * p.C + col)
  const uint S_b = p.key_lens != 0 ? clamp(key_lens[b], 1u, p.S) : p.S;  // the sequence's keys
  if (!KEYS) {
    const uint L = p.causal != 0 ? t + 1 : S_b;  // keys this query sees
    float m = uintBitsToFloat(0xff800000u), l = 0.0;  // running max and sum
    for (uint j = 0; j < L; j++) {
      const float s = p.scale * q_dot_k(Q(t), K(j));
      const float m_new = max(m, s);
      l = l * exp(m - m_new) + exp(s - m_new);
      m = m_new;
    }
    const float lse = m + log(l);
    float dt = 0.0;
    for (uint j = 0; j < L; j++)
      dt += exp(p.scale * q_dot_k(Q(t), K(j)) - lse) * dout_dot_v(DO(t), V(j));
    float dq[MAX_D];
    [[unroll]] for (uint i = 0; i < D; i++) dq[i] = 0.0;
    for (uint j = 0; j < L; j++) {
      const float pj = exp(p.scale * q_dot_k(Q(t), K(j)) - lse);
      const float ds = pj * (dout_dot_v(DO(t), V(j)) - dt) * p.scale;
      [[unroll]] for (uint i = 0; i < D; i++) dq[i] += ds * k_[K(j) + i];
    }
    [[unroll]] for (uint i = 0; i < D; i++) dq_[Q(t) + i] = dq[i];
    stats[(b * p.H + h) * p.T + t] = vec4(lse, dt, 0.0, 0.0);
    return;
  }
  // The key pass: this invocation's key is j = t.
  const uint j = t;
  float dk[MAX_D], dv[MAX_D];
  [[unroll]] for (uint i = 0; i < D; i++) dk[i] = dv[i] = 0.0;
  const uint end = j < S_b ? p.T : 0;  // a padding key: no query sees it
  for (uint u = p.causal != 0 ? j : 0; u < end; u++) {
    const vec4 st = stats[(b * p.H + h) * p.T + u];
    const float pj = exp(p.scale * q_dot_k(Q(u), K(j)) - st.x);
    const float ds = pj * (dout_dot_v(DO(u), V(j)) - st.y) * p.scale;
    [[unroll]] for (uint i = 0; i < D; i++) {
      dk[i] += ds * q_[Q(u) + i];
      dv[i] += pj * dout[DO(u) + i];
    }
  }
  [[unroll]] for (uint i = 0; i < D; i++) {
    dk_[K(j) + i] = dk[i];
    dv_[V(j) + i] = dv[i];
  }
}
