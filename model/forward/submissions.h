// How a forward pass is cut into submissions, so that on a slow GPU none runs into a watchdog
// (amdgpu's default lockup timeout and Windows' TDR are 2 s): a block's work, estimated from its
// FLOPs and bytes against a conservative device rate, decides how many blocks one submission
// takes. A CPU device (lavapipe) has no watchdog, and the model splits there only when asked.
#pragma once
#include <cstdint>

#include "model/formats/config.h"
#include "model/ops/types.h"

namespace model {

struct SubmissionRates {
  // Slower than most devices that run Vulkan compute: an old integrated GPU at a tenth of its
  // peak, what first-draft kernels reach.
  double flops_per_s = 40e9;
  double bytes_per_s = 10e9;
  double budget_s = 0.5;  // what one submission may be expected to take
};

// Seconds one block is expected to take for T new tokens against L keys (L >= T) with weights
// of `weights`: matmul and attention FLOPs, plus the bytes of the weights (read once per 64 rows
// of a prompt, the tiled kernel's tile) and of the keys and values each query reads.
double block_seconds(const Config& c, uint32_t T, uint32_t L, DType weights,
                     const SubmissionRates& rates);

// Seconds the head is expected to take for `rows` rows of logits: the [C, V] matrix read once,
// 2 C V FLOPs per row.
double head_seconds(const Config& c, uint32_t rows, DType weights, const SubmissionRates& rates);

// How long a submission expected to take `expected_s` (at `rates`, already slower than most
// devices) may run before it counts as hung: kTimeoutMargin times that, and never less than the
// device's own timeout `base_s`. So a long submission the user asked for (--split-layers, or one
// block alone past the budget) is not declared hung while it is still plausibly working, and a
// short one keeps the device's bound.
inline constexpr double kTimeoutMargin = 4;
double submission_timeout(double expected_s, double base_s);

// Blocks per submission: the most whose expected time stays within the budget, at least 1;
// n_layer when the whole pass fits one submission.
uint32_t blocks_per_submission(const Config& c, uint32_t T, uint32_t L, DType weights,
                               const SubmissionRates& rates);

}  // namespace model
