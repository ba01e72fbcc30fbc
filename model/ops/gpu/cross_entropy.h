// Host wrapper of shaders/cross_entropy.comp and cross_entropy_texel.comp (the CPU kernel set's
// where V % 4 == 0 and one dispatch holds the rows: an invocation per row, texel reads).
#pragma once
#include "model/ops/gpu/common.h"

namespace model::gpu {

// Softmax and cross-entropy fused (training): for each of N rows, losses[r] = logsumexp(l[r]) -
// l[r][targets[r]], and the logits become the gradient of the mean loss over `mean_over` rows:
// (softmax(l[r]) - onehot(targets[r])) / mean_over. A row whose target is ignore_target (padding)
// gets a loss of 0 and a zero gradient row: mean_over counts the rows with a target. Any other
// target outside [0, V) gives that row a NaN loss. Rows past what one binding may hold go in
// several dispatches.
//   logits [N, V] (in place -> dlogits), targets [N] int32 -> losses [N]
struct CrossEntropyArgs {
  vk::BufferSpan losses;   // [N]
  vk::BufferSpan logits;   // [N, V], in place -> dlogits
  vk::BufferSpan targets;  // [N] int32
  uint32_t N = 0, V = 0, mean_over = 0;
};
void cross_entropy(const Ops& ops, vk::Recorder& rec, const CrossEntropyArgs& a);

}  // namespace model::gpu
