// Host wrapper of matmul_interleaved.glsl's argmax variant: greedy decoding's head.
#pragma once
#include <cstdint>
#include <utility>

#include "model/ops/gpu/matmul.h"

namespace model::gpu {

// Greedy decoding's head: the argmax over n of x[x_row] . W[n] for an Interleaved W [N, K],
// without writing the N outputs or running a top-k: each invocation of matmul_interleaved.glsl
// writes the best of its rows as a (value, n) pair of floats into `partials`
// (matmul_argmax_partials(N) pairs), and argmax_of_partials() finishes on the host. NaN outputs
// count as -inf; ties go to the lower n. N <= 2^24 (ids travel as floats).
uint32_t matmul_argmax_partials(uint32_t N);
struct MatmulArgmaxArgs {
  vk::BufferSpan partials;  // [matmul_argmax_partials(N), 2]: (value, n) pairs
  vk::BufferSpan x;         // [x_row + 1, K]: row x_row read
  Weight w;                 // [N, K], Interleaved
  uint32_t K = 0, N = 0;
  uint32_t x_row = 0;
};
void matmul_argmax(const Ops& ops, vk::Recorder& rec, const MatmulArgmaxArgs& a);
// The best (n, value) of `count` partial pairs; n = -1 when every output was NaN.
std::pair<int32_t, float> argmax_of_partials(const float* partials, uint32_t count);

}  // namespace model::gpu
