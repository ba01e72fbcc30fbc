// Push constants and sizes of shaders/cross_entropy.comp, shared by GLSL and C++ (see
// shaders/common/types.h).
#ifndef GPT2VK_CROSS_ENTROPY_H
#define GPT2VK_CROSS_ENTROPY_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// The reduction array's size, whatever the workgroup (Metal cannot size a shared array by a
// specialization constant).
CONST CROSS_ENTROPY_MAX_WORKGROUP = 256;

// The target of a row that has none (padding: transformers' label -100, PyTorch's ignore_index):
// its loss is 0 and its gradient row 0, and the host leaves it out of the rows the mean is over.
#ifdef __cplusplus
inline constexpr int32_t CROSS_ENTROPY_IGNORE = -100;
#else
const int CROSS_ENTROPY_IGNORE = -100;
#endif

// Row r of N: losses[r] = logsumexp(l[r]) - l[r][targets[r]]; l[r] becomes
// (softmax(l[r]) - onehot(targets[r])) * scale; 0 and a row of zeros where the target is
// CROSS_ENTROPY_IGNORE.                               l [N, V], targets [N] -> losses [N]
struct CrossEntropyPush {
  uint N;
  uint V;
  float scale;   // 1 / the rows the loss is a mean over (those with a target)
  uint l_skip;   // elements of the logits binding before row 0 (an aligned window)
  uint t_skip;   // the same for the targets
  uint out_skip; // and for the losses
};
PUSH_NAMESPACE_END

#endif
