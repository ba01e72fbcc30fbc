// The self-test of the matrix units, where a device's policy would run prompts on them: a
// driver's cooperative-matrix path is checked against the scalar tiles once, before a model or
// a trainer trusts it (models and trainers take their Ops from checked_ops).
#pragma once
#include <string>

#include "model/ops/gpu/matmul.h"
#include "model/ops/gpu/ops.h"

namespace model::gpu {

// A product with ragged edges and every epilogue step (bias, GELU, a residual) through `kernel`
// (Coop; the tests pass CoopEmulated) against the scalar tiles. Returns "" when they agree, else
// a note saying what differed or why it could not run.
std::string check_coop_matrix(const Ops& ops, MatmulKernel kernel = MatmulKernel::Coop);

// The device's Ops (the policy its options ask for), where that policy takes the matrix units,
// after their self-test: on a failure without them, the note saying why (Ops::note).
Ops checked_ops(const vk::Device& device);

}  // namespace model::gpu
