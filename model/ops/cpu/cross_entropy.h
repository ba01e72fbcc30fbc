// CPU reference of the fused softmax cross-entropy of training (issue 17).
#pragma once
#include <cstddef>
#include <cstdint>

namespace model::cpu {

// Softmax and cross-entropy fused: the mean over N rows of -log softmax(logits)[target], returned,
// and its gradient dlogits = (softmax - onehot(target)) / N. Throws std::out_of_range for a
// target outside [0, V).
//   logits [N, V], targets [N] -> dlogits [N, V]
double cross_entropy(float* dlogits, const float* logits, const int32_t* targets, size_t N,
                     size_t V);

}  // namespace model::cpu
