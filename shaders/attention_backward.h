// Push constants and sizes of shaders/attention_backward.comp, shared by GLSL and C++ (see
// shaders/common/types.h).
#ifndef GPT2VK_ATTENTION_BACKWARD_H
#define GPT2VK_ATTENTION_BACKWARD_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// The largest head dim: each invocation keeps its gradient rows (D floats each) in registers,
// arrays of a fixed size (Metal cannot size one by a specialization constant).
CONST ATTENTION_BACKWARD_MAX_D = 128;

// B sequences of T tokens, each attending within itself; head h is columns h D .. h D + D - 1.
//   dout [B, T, C], qkv [B, T, 3C] -> dqkv [B, T, 3C]; stats [B, H, T, 4] between the passes
struct AttentionBackwardPush {
  uint B;
  uint T;
  uint C;
  uint H;
  uint causal;  // 1: token t sees tokens 0..t
  float scale;  // multiplies q . k
};
PUSH_NAMESPACE_END

#endif
