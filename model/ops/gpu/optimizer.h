// Host wrappers of the optimizer shaders (training): shaders/grad_sum_squares.comp and
// shaders/adamw.comp.
#pragma once
#include <span>

#include "model/ops/gpu/common.h"

namespace model::gpu {

// Floats of scratch grad_sum_squares needs for tensors of these sizes: their partial sums.
uint64_t grad_sum_squares_scratch(const vk::DeviceCaps& caps, std::span<const uint64_t> counts);

// out[0] = the sum of the squares of every element of every tensor (tensors[i] holds counts[i]
// floats), the square of the global norm that clipping compares: partial sums of fixed chunks
// into scratch, then one workgroup sums them, in an order fixed by the sizes alone.
//   tensors -> out [1]
struct GradSumSquaresArgs {
  vk::BufferSpan out;                       // [1]
  vk::BufferSpan scratch;                   // grad_sum_squares_scratch(counts) floats
  std::span<const vk::BufferSpan> tensors;  // tensors[i]: [counts[i]]
  std::span<const uint64_t> counts;
};
void grad_sum_squares(const Ops& ops, vk::Recorder& rec, const GradSumSquaresArgs& a);

// One step of torch.optim.AdamW (or SGD) on one tensor, as cpu::adamw / cpu::sgd, with the
// gradient scaled by min(1, clip / (norm + 1e-6)) where clip > 0, norm the square root of
// norm_sq[0] (grad_sum_squares), as torch.nn.utils.clip_grad_norm_ does. A norm that is not
// finite changes nothing. weight_decay is this tensor's (0 for biases and LayerNorm
// parameters). step counts from 1. SGD leaves m and v alone (any spans of n floats).
struct OptimizerStep {
  bool sgd = false;
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f, clip = 0.0f;
  uint64_t step = 1;
};
//   param, m, v [n] updated in place; grad [n], norm_sq [1]
struct AdamwArgs {
  vk::BufferSpan param;    // [n], updated
  vk::BufferSpan m;        // [n], updated
  vk::BufferSpan v;        // [n], updated
  vk::BufferSpan grad;     // [n]
  vk::BufferSpan norm_sq;  // [1]
  uint64_t n = 0;
  OptimizerStep options;
};
void adamw(const Ops& ops, vk::Recorder& rec, const AdamwArgs& a);

}  // namespace model::gpu
