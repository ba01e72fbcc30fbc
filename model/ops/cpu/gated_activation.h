// CPU reference of shaders/gated_activation.comp.
#pragma once
#include <cstddef>

#include "model/ops/types.h"

namespace model::cpu {

// out[t, f] = act(in[t, f]) * in[t, F + f] with cpu::activate, in double, rounded once: T5 v1.1's
// gated feed-forward, in the two projections (wi_0, wi_1) side by side.   [T, 2F] -> [T, F]
// No backward yet (training does not run gated models).
void gated_activation(float* out, const float* in, size_t T, size_t F, model::Activation act);

}  // namespace model::cpu
