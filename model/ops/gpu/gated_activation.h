// Host wrapper of shaders/gated_activation.comp and its texel version
// (gated_activation_texel.comp: four outputs per invocation), which the CPU kernel set runs where
// F % 4 == 0 and one dispatch holds x (gpu::texel_elementwise).
#pragma once
#include "model/ops/gpu/common.h"

namespace model::gpu {

// out[t, f] = act(in[t, f]) * in[t, F + f]: T5 v1.1's gated feed-forward (gated-GELU), in the
// two projections wi_0 and wi_1 side by side as one matmul's output.   [T, 2F] -> [T, F]
// act: any model::Activation, with activation()'s formulas. out must not overlap in. Where
// [T, 2F] is larger than maxStorageBufferRange the rows are split into several dispatches (one
// row of in, 2F floats, must fit). Throws vk::Error for an unknown act, spans too small, or
// overlapping ones. T == 0 or F == 0 records nothing. No backward yet: training does not run
// gated models.
struct GatedActivationArgs {
  vk::BufferSpan out;  // [T, F]
  vk::BufferSpan in;   // [T, 2F]
  uint32_t T = 0, F = 0;
  Activation act = Activation::None;
};
void gated_activation(const Ops& ops, vk::Recorder& rec, const GatedActivationArgs& a);

}  // namespace model::gpu
