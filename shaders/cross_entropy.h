// Push constants and sizes of shaders/cross_entropy.comp, shared by GLSL and C++ (see
// shaders/common/types.h).
#ifndef GPT2VK_CROSS_ENTROPY_H
#define GPT2VK_CROSS_ENTROPY_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// The reduction array's size, whatever the workgroup (Metal cannot size a shared array by a
// specialization constant).
CONST CROSS_ENTROPY_MAX_WORKGROUP = 256;

// Row r of N: losses[r] = logsumexp(l[r]) - l[r][targets[r]]; l[r] becomes
// (softmax(l[r]) - onehot(targets[r])) * scale.      l [N, V], targets [N] -> losses [N]
struct CrossEntropyPush {
  uint N;
  uint V;
  float scale;   // 1 / the rows the loss is a mean over
  uint l_skip;   // elements of the logits binding before row 0 (an aligned window)
  uint t_skip;   // the same for the targets
  uint out_skip; // and for the losses
};
PUSH_NAMESPACE_END

#endif
