// Push constants and sizes of shaders/attention_backward.comp, shared by GLSL and C++ (see
// shaders/common/types.h).
#ifndef GPT2VK_ATTENTION_BACKWARD_H
#define GPT2VK_ATTENTION_BACKWARD_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// The largest head dim: each invocation keeps its gradient rows (D floats each) in registers,
// arrays of a fixed size (Metal cannot size one by a specialization constant).
CONST ATTENTION_BACKWARD_MAX_D = 128;

// B sequences, each of T queries attending to S keys (self-attention: the same T tokens, S = T;
// cross-attention: a source's S rows). Rows of q (and dq) are q_stride floats apart, of k and v
// (and dk, dv) kv_stride; head h is columns q_col + h D (k_col, v_col) .. + D - 1. Self-attention
// reads all three from the fused QKV projection [B, T, 3C]: strides 3C, columns 0, C and 2C.
// With key_lens (not causal), sequence b's queries see only its first key_lens[b] keys, 1..S (the
// rest is padding: a batch's sources padded to its longest); keys past it get zero gradients.
//   dout [B, T, C], q [B, T, q_stride], k and v [B, S, kv_stride] -> dq, dk, dv in q's, k's and
//   v's places; stats [B, H, T, 4] between the passes
struct AttentionBackwardPush {
  uint B;
  uint T;
  uint S;
  uint C;
  uint H;
  uint causal;  // 1: query t sees keys 0..t (S = T)
  float scale;  // multiplies q . k
  uint q_stride;
  uint kv_stride;
  uint q_col;
  uint k_col;
  uint v_col;
  uint key_lens;  // 1: the KeyLens binding [B] holds each sequence's keys; 0: all S, not read
};
PUSH_NAMESPACE_END

#endif
