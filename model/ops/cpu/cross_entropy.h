// CPU reference of the fused softmax cross-entropy of training (issue 17).
#pragma once
#include <cstddef>
#include <cstdint>

namespace model::cpu {

// Softmax and cross-entropy fused: the mean of -log softmax(logits)[target] over the rows with a
// target, returned, and its gradient dlogits = (softmax - onehot(target)) / n, n those rows. A
// row whose target is ignore_target (padding) has a zero gradient row; with no row that has a
// target, the loss is 0. Throws std::out_of_range for any other target outside [0, V).
//   logits [N, V], targets [N] -> dlogits [N, V]
double cross_entropy(float* dlogits, const float* logits, const int32_t* targets, size_t N,
                     size_t V);

}  // namespace model::cpu
