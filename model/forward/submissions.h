// How a forward pass is cut into submissions, so that on a slow GPU none runs into a watchdog
// (amdgpu's default lockup timeout and Windows' TDR are 2 s): a block's work, estimated from its
// FLOPs and bytes against a conservative device rate, decides how many blocks one submission
// takes; where one block alone is over budget (a long prompt on a large model), a causal
// model's prompt runs in chunks, each a pass of its own. A CPU device (lavapipe) has no
// watchdog, and the model splits there only when asked.
#pragma once
#include <cstdint>
#include <vector>

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

// The device's speed as measured, as a multiple of `nominal`: a pass estimated at `nominal_s`
// there took `wall_s` (host recording and waits included, which only makes it slower). The
// rates a device runs at are nominal's times the best such speed seen, divided by
// kSpeedMargin: a submission sized to the budget then takes a quarter of it where the device
// ran as measured. A GPU that ran XL's 512-token prompt 350 times faster than the nominal
// rates cut it into 144 submissions with a wait each (H200: 367 ms for 109 ms of GPU time).
inline constexpr double kSpeedMargin = 4;
inline constexpr double kMaxSpeed = 1e5;  // no device is this fast: a broken clock is ignored
double observed_speed(double nominal_s, double wall_s);
SubmissionRates calibrated(const SubmissionRates& nominal, double speed);

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

// The passes that run T new tokens at `pos`: their token counts, in order, summing to T. One
// pass where a block over all T fits the budget; otherwise chunks, each the most tokens whose
// block fits (at least 1, and a multiple of 64, the tiled matmul's rows, where it is shorter
// than what is left), so that a block over the keys the chunk attends to stays in budget. A
// causal query attends only to keys before it, so the cache the earlier chunks filled gives it
// exactly what one pass would; a bidirectional model's queries attend to keys after them too,
// and its pass is never cut (its blocks still are). With all_rows (every row's logits asked
// for), the head over a chunk's rows must fit the budget as well.
std::vector<uint32_t> prompt_chunks(const Config& c, uint32_t T, uint32_t pos, DType weights,
                                    const SubmissionRates& rates, bool all_rows = false);

}  // namespace model
