#include "model/forward/model.h"

#include <stdexcept>

#include "model/formats/checkpoint.h"

namespace model {

const char* precision_name(Precision p) { return p == Precision::F16 ? "f16" : "f32"; }

Precision parse_precision(const std::string& name) {
  if (name == "f16") return Precision::F16;
  if (name == "f32") return Precision::F32;
  throw std::runtime_error("unknown precision '" + name + "' (expected f16 or f32)");
}

void Model::warn_nonfinite(const Checkpoint& ckpt, const std::string& tensor, uint64_t bad,
                           uint64_t total, const char* as) {
  if (bad == 0) return;
  warnings_.push_back((ckpt.dir() / "model.safetensors").string() + ": " + tensor + ": " +
                      std::to_string(bad) + " of " + std::to_string(total) +
                      " values are NaN or infinite" + (as ? std::string(" as ") + as : ""));
}

void Model::check(std::span<const int32_t> ids, uint32_t length, uint32_t context,
                  const std::string& whose, uint32_t slot) const {
  const Config& c = config();
  if (ids.empty()) throw std::runtime_error("no tokens to run");
  if (c.cross_attention && slot_source_length(slot) == 0)
    throw std::runtime_error(
        slot == 0 ? std::string("a decoder with cross-attention runs after set_source()")
                  : "slot " + std::to_string(slot) +
                        " has no source: slot_set_source() or set_source() first");
  if (length + ids.size() > context)
    throw std::runtime_error(std::to_string(length + ids.size()) + " tokens would pass " + whose +
                             " context of " + std::to_string(context));
  check_vocabulary(ids, c.n_vocab, length);
}

void check_vocabulary(std::span<const int32_t> ids, uint32_t V, size_t first) {
  for (size_t t = 0; t < ids.size(); t++)
    if (ids[t] < 0 || static_cast<uint32_t>(ids[t]) >= V)
      throw std::runtime_error("token id " + std::to_string(ids[t]) + " at position " +
                               std::to_string(first + t) + " is outside the vocabulary [0, " +
                               std::to_string(V) + ")");
}

void Model::check_slot(uint32_t slot) const {
  if (slot >= slots())
    throw std::runtime_error("slot " + std::to_string(slot) + " of a model with " +
                             std::to_string(slots()) + " slots");
}

std::vector<float> Model::logits(std::span<const int32_t> ids) {
  check(ids, length_, config().n_ctx, "the model's");
  std::vector<float> out;
  std::vector<int32_t> unused;
  attention_.clear();  // the backend fills it for a tapped pass
  run(ids, true, 0, out, unused);
  length_ += static_cast<uint32_t>(ids.size());
  return out;
}

Candidates Model::next(std::span<const int32_t> ids, uint32_t k) {
  check(ids, length_, config().n_ctx, "the model's");
  if (k > kMaxCandidates || k > config().n_vocab)
    throw std::runtime_error("asked for " + std::to_string(k) + " candidates; at most " +
                             std::to_string(kMaxCandidates) + " and the vocabulary size");
  Candidates c;
  attention_.clear();  // only logits() passes are tapped
  run(ids, false, k, c.logits, c.ids);
  length_ += static_cast<uint32_t>(ids.size());
  return c;
}

uint32_t Model::source_rows(std::span<const float> hidden) const {
  const Config& c = config();
  if (!c.cross_attention)
    throw std::runtime_error("set_source: this decoder has no cross-attention");
  if (hidden.empty() || hidden.size() % c.n_embd != 0)
    throw std::runtime_error("set_source: " + std::to_string(hidden.size()) +
                             " floats are not whole rows of " + std::to_string(c.n_embd));
  const auto S = static_cast<uint32_t>(hidden.size() / c.n_embd);
  if (S > c.n_ctx)
    throw std::runtime_error("set_source: a source of " + std::to_string(S) +
                             " tokens; the model takes at most " + std::to_string(c.n_ctx));
  return S;
}

void Model::set_source(std::span<const float> hidden) {
  const uint32_t S = source_rows(hidden);
  source_length_ = 0;  // until the pass has run
  run_source(hidden, S);
  source_length_ = S;
}

void Model::slot_set_source(uint32_t slot, std::span<const float> hidden) {
  check_slot(slot);
  if (slots() == 1) return set_source(hidden);
  run_slot_source(slot, hidden, source_rows(hidden));
}

uint32_t Model::slot_source_length(uint32_t slot) const {
  check_slot(slot);
  return source_length_;
}

// One slot: the model's own cache.
uint32_t Model::slot_length(uint32_t slot) const {
  check_slot(slot);
  return length_;
}

void Model::slot_reset(uint32_t slot) {
  check_slot(slot);
  reset();
}

void Model::slot_truncate(uint32_t slot, uint32_t n) {
  check_slot(slot);
  check_truncate(n, length_);
  length_ = n;
}

void Model::check_truncate(uint32_t n, uint32_t length) const {
  if (n > length)
    throw std::runtime_error("a slot holding " + std::to_string(length) +
                             " tokens cannot keep " + std::to_string(n));
}

std::vector<float> Model::slot_prefill(uint32_t slot, std::span<const int32_t> ids,
                                       bool all_rows) {
  check_slot(slot);
  return all_rows ? logits(ids) : next(ids, 0).logits;
}

void Model::slot_copy(std::span<const SlotCopy> copies) {
  for (const SlotCopy& c : copies) {
    check_slot(c.from);
    check_slot(c.to);
    if (c.from != c.to) throw std::runtime_error("slot_copy: this model has one slot");
  }
}

std::vector<float> Model::slot_decode(std::span<const SlotToken> rows) {
  if (rows.size() != 1) throw std::runtime_error("this model decodes one slot at a time");
  check_slot(rows[0].slot);
  return next(std::span(&rows[0].id, 1), 0).logits;
}

}  // namespace model
