// GpuModel's compiling ahead (Model::prepare and its kin): dry recordings of the passes a
// command will run name exactly the pipelines they use, which compile in parallel before the
// first pass, so that none waits for a compiler.
#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "model/forward/gpu_model_impl.h"

namespace model {

size_t GpuModel::compile_ahead(const std::function<void()>& record,
                               const vk::CompileProgress& progress) {
  ops_.kernels().defer(true);
  try {
    record();
  } catch (...) {
    ops_.kernels().defer(false);
    throw;
  }
  ops_.kernels().defer(false);
  return ops_.kernels().compile_deferred(progress);
}

size_t GpuModel::prepare(uint32_t prompt_tokens, uint32_t max_new, uint32_t k, uint32_t window,
                         const vk::CompileProgress& progress) {
  return compile_ahead([&] { record_generate(prompt_tokens, max_new, k, window); }, progress);
}

size_t GpuModel::prepare_source(uint32_t S, uint32_t max_new, uint32_t k, bool own_sources,
                                const vk::CompileProgress& progress) {
  if (!config_.cross_attention || S < 1 || S > config_.n_ctx) return 0;
  // The cross-attention's kernels follow the source's length, and a batch's dispatches which
  // rows share a source: record as if every source were S rows, read by the slots as asked.
  const std::vector<uint32_t> of = source_of_;
  const std::vector<uint32_t> lens =
      std::exchange(source_lens_, std::vector<uint32_t>(sources_, S));
  for (uint32_t i = 0; i < slots_; i++) source_of_[i] = own_sources ? std::min(i, sources_ - 1) : 0;
  const auto restore = [&] { source_lens_ = lens, source_of_ = of; };
  try {
    const size_t made = compile_ahead(
        [&] {
          record_source(0, S, true);
          record_generate(1, max_new, k, 0);
        },
        progress);
    restore();
    return made;
  } catch (...) {
    restore();
    throw;
  }
}

size_t GpuModel::prepare_encode(uint32_t T, bool head, const vk::CompileProgress& progress) {
  if (T < 1 || T > config_.n_ctx) return 0;
  return compile_ahead(
      [&] {
        Pass p = plan_pass(T, 0, true, 0);  // encode()'s
        p.head = head ? Head::AllRows : Head::None;
        record_pass(p, 0, true);
      },
      progress);
}

void GpuModel::record_generate(uint32_t prompt_tokens, uint32_t max_new, uint32_t k,
                               uint32_t window) {
  const Config& c = config_;
  const uint32_t n = window ? std::min(window, c.n_ctx) : c.n_ctx;
  const uint32_t P = std::clamp<uint32_t>(prompt_tokens, 1, n);
  // The passes generate() will run (model/generation/generate.cpp) in a window of n tokens, as
  // (T, pos): the prompt's, and for a causal model one-token passes from pos P on, up to the
  // last position reached (kernel choices change with the cache length only one way, so the
  // first and the last decode cover those between); a full window slides to its last n/2
  // tokens, recomputed, then decodes from there. A bidirectional model has no cache: every step
  // is the whole sequence again, so one pass per length. Each is recorded in the chunks run()
  // cuts it into.
  std::vector<std::pair<uint32_t, uint32_t>> passes{{P, 0}};
  const uint64_t last = uint64_t{P} + max_new - 1;  // tokens seen before the last pass's output
  if (max_new > 1 && !c.causal) {
    for (uint64_t t = P + 1; t <= std::min<uint64_t>(last, n); t++)
      passes.emplace_back(static_cast<uint32_t>(t), 0);
  } else if (max_new > 1) {
    if (P < n) passes.emplace_back(1, P);
    if (last > n) {
      const uint32_t keep = std::max<uint32_t>(1, n / 2);
      passes.emplace_back(keep, 0);
      if (keep < n) passes.emplace_back(1, keep);
    }
    const auto end = static_cast<uint32_t>(std::min<uint64_t>(last, n) - 1);
    if (end > P) passes.emplace_back(1, end);
  }
  for (auto [T, pos] : passes) {
    const std::vector<uint32_t> parts = chunks(T, pos, false);
    uint32_t done = 0;
    for (size_t i = 0; i < parts.size(); done += parts[i++])
      record_pass(plan_pass(parts[i], pos + done, false, k, i + 1 == parts.size()), k, true);
  }
  // With slots, the batches of slot_decode too: every row count (the matmul tiles change with
  // it), the rows at the first and at the last position a slot reaches; and beam search's
  // copies of one slot's cache into another (the copy's kernel follows the length: 1 and 4
  // rows reach both of its kernels, one word and four words an invocation).
  std::vector<SlotToken> rows;
  if (slots_ > 1) {
    ensure_logits(slots_);
    const SlotCopy copy{0, 1};
    for (uint32_t len : {1u, 4u}) record_copies(std::span(&copy, 1), std::span(&len, 1), true);
  }
  for (uint32_t b = 0; b < (slots_ > 1 ? slots_ : 0); b++) {
    rows.push_back({b, 0});
    for (uint32_t at : {0u, slot_ctx_ - 1}) {
      const Batch batch{rows, std::vector<uint32_t>(rows.size(), at)};
      Pass p = plan_pass(b + 1, at, true, 0);
      p.batch = &batch;
      record_pass(p, 0, true);
    }
  }
}

}  // namespace model
