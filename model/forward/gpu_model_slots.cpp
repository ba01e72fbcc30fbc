// GpuModel's slots (gpt2vk serve, beam search, sources decoded together): each slot a KV cache
// of its own, batches of one token per slot in one pass, copies of one slot's cache into
// another; and a decoder's source caches, which slots read through source_of_ (one for every
// slot after set_source(), one of its own after slot_set_source(), its original's after a copy).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/forward/gpu_model_impl.h"
#include "model/ops/gpu/activation.h"

namespace model {

void GpuModel::check_slots() const {
  const Config& c = config_;
  if (slots_ < 1 || slots_ > kMaxSlots)
    throw std::runtime_error(std::to_string(slots_) + " slots: a model decodes 1 to " +
                             std::to_string(kMaxSlots) + " sequences together");
  if (slot_ctx_ < 1 || slot_ctx_ > c.n_ctx)
    throw std::runtime_error("a slot of " + std::to_string(slot_ctx_) +
                             " tokens: the model's context is " + std::to_string(c.n_ctx));
  if (sources_ < 1 || sources_ > slots_)
    throw std::runtime_error(std::to_string(sources_) + " source caches for " +
                             std::to_string(slots_) + " slots: 1 to one per slot");
  if (slots_ > 1 && !c.causal)
    throw std::runtime_error("a bidirectional model has no cache to decode several sequences from");
  // A batch's rows are views of the activations at row offsets (C floats, and the attention's
  // A), which must be aligned.
  const uint64_t align =
      std::max(device_.caps().storage_buffer_alignment, device_.caps().texel_buffer_alignment);
  for (const uint32_t width : {c.n_embd, c.attn_width()})
    if (slots_ > 1 && (uint64_t{width} * 4) % align != 0)
      throw std::runtime_error("decoding several sequences together needs a row of " +
                               std::to_string(width) + " floats to be a multiple of " +
                               std::to_string(align) + " bytes, this device's offset alignment");
}

uint32_t GpuModel::slot_length(uint32_t slot) const {
  if (slots_ == 1) return Model::slot_length(slot);
  check_slot(slot);
  return slot_len_[slot];
}

void GpuModel::slot_reset(uint32_t slot) {
  if (slots_ == 1) return Model::slot_reset(slot);
  check_slot(slot);
  slot_len_[slot] = 0;
}

void GpuModel::slot_truncate(uint32_t slot, uint32_t n) {
  if (slots_ == 1) return Model::slot_truncate(slot, n);
  check_slot(slot);
  check_truncate(n, slot_len_[slot]);
  slot_len_[slot] = n;
}

std::vector<float> GpuModel::slot_prefill(uint32_t slot, std::span<const int32_t> ids,
                                          bool all_rows) {
  if (slots_ == 1) return Model::slot_prefill(slot, ids, all_rows);
  check_slot(slot);
  check(ids, slot_len_[slot], slot_ctx_, "the slot's", slot);
  std::vector<float> logits;
  std::vector<int32_t> unused;
  run_at(slot, slot_len_[slot], ids, all_rows, 0, logits, unused);
  slot_len_[slot] += static_cast<uint32_t>(ids.size());
  return logits;
}

std::vector<float> GpuModel::slot_decode(std::span<const SlotToken> rows) {
  if (slots_ == 1) return Model::slot_decode(rows);
  const Config& c = config_;
  const auto B = static_cast<uint32_t>(rows.size());
  if (B == 0 || B > slots_)
    throw std::runtime_error("a batch of " + std::to_string(B) + " rows for " +
                             std::to_string(slots_) + " slots");
  Batch batch{rows, {}};
  std::vector<bool> seen(slots_);
  uint32_t last = 0;
  for (const SlotToken& r : rows) {
    check_slot(r.slot);
    if (seen[r.slot])
      throw std::runtime_error("slot " + std::to_string(r.slot) + " twice in a batch");
    seen[r.slot] = true;
    check(std::span(&r.id, 1), slot_len_[r.slot], slot_ctx_,
          "slot " + std::to_string(r.slot) + "'s", r.slot);
    batch.pos.push_back(slot_len_[r.slot]);
    last = std::max(last, slot_len_[r.slot]);
  }
  rec_.wait();  // a submission still running (after a timed-out wait) may read what follows
  ensure_logits(B);
  for (uint32_t b = 0; b < B; b++) {
    std::memcpy(params_.span(ids_).mapped + b * 4, &rows[b].id, 4);
    const uint32_t at[2] = {batch.pos[b], static_cast<uint32_t>(rows[b].slot * slot_stride_ / 16)};
    std::memcpy(params_.span(batch_rows_).mapped + b * 8, at, 8);
  }
  {
    // Every dispatch reads the rows' ids and positions from the buffers just written, so the
    // steps of a batch of the same size record the same commands (not where the longest row
    // crosses a 64-key block of the split attention, a prompt chunk ran in between, or the pass
    // is cut into submissions): a dry recording says so, and the last real one is submitted
    // again, as for a single sequence's decode steps (run_pass).
    Pass p = plan_pass(B, last, true, 0);
    p.batch = &batch;
    submit_pass(p, 0, true);
    rec_.wait();
  }
  stats_ = rec_.stats();
  std::vector<float> logits(size_t(B) * c.n_vocab);
  vk::download(device_, logits.data(), logits_, logits.size() * 4);
  for (const SlotToken& r : rows) slot_len_[r.slot]++;
  return logits;
}

// Copies of the cached rows only, as identity activations (a compute copy the recorder orders
// like any other op): each of a layer's keys and values, in one submission.
void GpuModel::slot_copy(std::span<const SlotCopy> copies) {
  if (slots_ == 1) return Model::slot_copy(copies);
  std::vector<bool> source(slots_), dest(slots_);
  for (const SlotCopy& c : copies) {
    check_slot(c.from);
    check_slot(c.to);
    source[c.from] = true;
    if (dest[c.to])
      throw std::runtime_error("slot_copy: slot " + std::to_string(c.to) + " written twice");
    dest[c.to] = true;
  }
  for (uint32_t i = 0; i < slots_; i++)
    if (source[i] && dest[i])
      throw std::runtime_error("slot_copy: slot " + std::to_string(i) + " both read and written");
  rec_.wait();  // a submission still running may read the caches
  std::vector<uint32_t> rows;
  for (const SlotCopy& c : copies) rows.push_back(slot_len_[c.from]);
  record_copies(copies, rows, false);
  rec_.submit();
  rec_.wait();
  for (const SlotCopy& c : copies) {
    slot_len_[c.to] = slot_len_[c.from];
    if (config_.cross_attention) source_of_[c.to] = source_of_[c.from];  // the same source
  }
}

void GpuModel::record_copies(std::span<const SlotCopy> copies, std::span<const uint32_t> rows,
                             bool dry) {
  if (dry)
    rec_.begin_dry();
  else
    rec_.begin();
  const GpuState s = pass_state();
  // Whole 32-bit words: an fp16 cache's rows hold A halves, A even (check_slots).
  const uint64_t row_words = uint64_t{config_.attn_width()} * dtype_bytes(kv_cache_) / 4;
  for (size_t i = 0; i < copies.size(); i++) {
    const SlotCopy& c = copies[i];
    const auto n = static_cast<uint32_t>(rows[i] * row_words);
    for (uint32_t layer = 0; layer < config_.n_layer; layer++) {
      gpu::activation(
          ops_, rec_,
          {.out = s.k(layer, c.to), .x = s.k(layer, c.from), .n = n, .kind = Activation::None});
      gpu::activation(
          ops_, rec_,
          {.out = s.v(layer, c.to), .x = s.v(layer, c.from), .n = n, .kind = Activation::None});
    }
  }
  rec_.end();
}

// The source pass: the encoder's output into X, then every layer's source keys and values
// into source cache `source`.
void GpuModel::store_source(uint32_t source, std::span<const float> hidden, uint32_t S) {
  rec_.wait();               // a submission still running may read X or the cache
  source_lens_[source] = 0;  // until the pass has run
  vk::upload(device_, state_.span(x_), hidden.data(), hidden.size_bytes());
  record_source(source, S, false);
  rec_.submit();
  rec_.wait();
  source_lens_[source] = S;
}

// set_source(): every slot reads source cache 0.
void GpuModel::run_source(std::span<const float> hidden, uint32_t S) {
  source_of_.assign(slots_, kNoSource);
  store_source(0, hidden, S);
  source_of_.assign(slots_, 0);
}

void GpuModel::run_slot_source(uint32_t slot, std::span<const float> hidden, uint32_t S) {
  if (slot >= sources_)
    throw std::runtime_error("slot " + std::to_string(slot) + " has no source cache of its own (" +
                             std::to_string(sources_) +
                             " source caches: GpuModelOptions::sources)");
  source_of_[slot] = kNoSource;    // none until its own is in
  for (uint32_t& of : source_of_)  // the slots that read what this overwrites
    if (of == slot) of = kNoSource;
  store_source(slot, hidden, S);
  source_of_[slot] = slot;
}

uint32_t GpuModel::slot_source_length(uint32_t slot) const {
  check_slot(slot);
  if (!config_.cross_attention || source_of_[slot] == kNoSource) return 0;
  return source_lens_[source_of_[slot]];
}

void GpuModel::record_source(uint32_t source, uint32_t S, bool dry) {
  if (dry)
    rec_.begin_dry();
  else
    rec_.begin();
  const GpuState s = pass_state();
  Pass p;
  p.T = S;
  p.source = source;
  GpuBackend b{ops_, rec_, config_, w_, s, p};
  model::source(b, w_, S);
  rec_.end();
}

}  // namespace model
