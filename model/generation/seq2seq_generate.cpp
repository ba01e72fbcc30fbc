#include "model/generation/seq2seq_generate.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>

namespace model {
namespace {

// Beam search's steps on a decoder with a slot per beam: beam b's cache lives in slot slot[b].
// A step's beams continue from their parents: the first child of a parent takes over its slot,
// any other child a copy of it in a slot no beam continues (on the device), then every beam's
// new token runs in one batched pass.
BeamStep slot_steps(Model& decoder) {
  auto slot = std::make_shared<std::vector<uint32_t>>();
  return [&decoder, slot](std::span<const uint32_t> parents, std::span<const int32_t> tokens,
                          std::vector<float>& logits) {
    const auto B = static_cast<uint32_t>(parents.size());
    std::vector<uint32_t> next(B);
    std::vector<Model::SlotCopy> copies;
    if (slot->empty()) {  // the first step: every beam from the fresh state
      for (uint32_t b = 0; b < B; b++) decoder.slot_reset(next[b] = b);
    } else {
      std::vector<bool> taken(decoder.slots());
      std::vector<uint32_t> children;  // beams that need a copy of their parent's slot
      for (uint32_t b = 0; b < B; b++) {
        const uint32_t from = (*slot)[parents[b]];
        if (!taken[from]) {
          taken[from] = true;
          next[b] = from;
        } else {
          children.push_back(b);
        }
      }
      uint32_t free = 0;
      for (uint32_t b : children) {
        while (taken[free]) free++;
        taken[free] = true;
        copies.push_back({(*slot)[parents[b]], free});
        next[b] = free;
      }
      decoder.slot_copy(copies);
    }
    *slot = next;
    std::vector<Model::SlotToken> rows(B);
    for (uint32_t b = 0; b < B; b++) rows[b] = {next[b], tokens[b]};
    logits = decoder.slot_decode(rows);
  };
}

// Beam search's steps on a decoder with fewer slots than beams (the CPU reference): every step
// runs each beam's whole prefix again from an empty cache, so no cache is ever copied.
BeamStep rerun_steps(Model& decoder, const Config& c) {
  auto prefixes = std::make_shared<std::vector<std::vector<int32_t>>>();
  return [&decoder, &c, prefixes](std::span<const uint32_t> parents,
                                  std::span<const int32_t> tokens, std::vector<float>& logits) {
    const size_t V = c.n_vocab;
    std::vector<std::vector<int32_t>> next(parents.size());
    logits.resize(parents.size() * V);
    for (size_t b = 0; b < parents.size(); b++) {
      if (!prefixes->empty()) next[b] = (*prefixes)[parents[b]];
      next[b].push_back(tokens[b]);
      decoder.reset();
      const std::vector<float> row = decoder.next(next[b], 0).logits;
      std::copy(row.begin(), row.end(), logits.begin() + static_cast<std::ptrdiff_t>(b * V));
    }
    *prefixes = std::move(next);
  };
}

// The best of a row's logits, ties to the lower id, as the device's argmax and top-k take it.
int32_t best_id(std::span<const float> row) {
  int32_t best = -1;
  for (size_t v = 0; v < row.size(); v++)
    if (!std::isnan(row[v]) && (best < 0 || row[v] > row[static_cast<size_t>(best)]))
      best = static_cast<int32_t>(v);
  if (best < 0)
    throw std::runtime_error("every logit is NaN: the model's weights or activations are broken");
  return best;
}

// One source from the start token: up to max_new ids, each the best of its step (the head's own
// argmax) or, with a sampler, drawn from all V logits (as a batch's row has them, so that the
// draws are the same either way); ending at eos (kept), the config's forced eos at the last step
// allowed.
std::vector<int32_t> decode_one(Seq2Seq& m, std::span<const int32_t> source, uint32_t max_new,
                                Sampler* sampler) {
  m.set_source(source);
  const Config& c = m.config();
  std::vector<int32_t> out;
  int32_t next = *c.decoder_start_token_id;
  const uint32_t limit = new_token_limit(c, max_new);
  for (uint32_t i = 0; i < limit; i++) {
    const Candidates step = m.decoder().next(std::span(&next, 1), sampler ? 0 : 1);
    next = i + 1 == limit && c.forced_eos_token_id ? *c.forced_eos_token_id
           : sampler                               ? sampler->pick(step)
                                                   : step.ids[0];
    out.push_back(next);
    if (ends_decoding(c, next)) break;
  }
  return out;
}

}  // namespace

std::vector<int32_t> greedy(Seq2Seq& m, std::span<const int32_t> source, uint32_t max_new) {
  return decode_one(m, source, max_new, nullptr);
}

std::vector<int32_t> sample(Seq2Seq& m, std::span<const int32_t> source, uint32_t max_new,
                            Sampler& sampler) {
  return decode_one(m, source, max_new, &sampler);
}

std::vector<std::vector<int32_t>> decode_batch(
    Seq2Seq& m, std::span<const std::vector<int32_t>> sources, std::span<const uint32_t> max_new,
    uint32_t batch, const SamplerOptions* sampling,
    const std::function<void(size_t, const std::vector<int32_t>&)>& on_done) {
  if (max_new.size() != 1 && max_new.size() != sources.size())
    throw std::invalid_argument("decode_batch: " + std::to_string(max_new.size()) + " limits for " +
                                std::to_string(sources.size()) + " sources");
  std::vector<std::vector<int32_t>> out(sources.size());
  std::vector<Sampler> samplers;
  for (size_t i = 0; sampling && i < sources.size(); i++) {
    SamplerOptions o = *sampling;
    o.seed += i;
    samplers.emplace_back(o);
  }
  const Config& c = m.config();
  Model& d = m.decoder();
  batch =
      static_cast<uint32_t>(std::min<size_t>({batch, d.slots(), d.slot_sources(), sources.size()}));
  const auto asked = [&](size_t i) { return max_new[max_new.size() == 1 ? 0 : i]; };
  const auto limit = [&](size_t i) { return new_token_limit(c, asked(i)); };
  if (batch <= 1) {
    for (size_t i = 0; i < sources.size(); i++) {
      out[i] =
          sampling ? sample(m, sources[i], asked(i), samplers[i]) : greedy(m, sources[i], asked(i));
      if (on_done) on_done(i, out[i]);
    }
    return out;
  }
  const size_t V = c.n_vocab;
  // lane[slot]: the source that slot decodes and the id it runs next, or none once the sources
  // have run out.
  struct Lane {
    size_t source;
    int32_t next;
  };
  std::vector<std::optional<Lane>> lane(batch);
  size_t taken = 0;
  const auto take = [&](uint32_t slot) {
    lane[slot].reset();
    for (; taken < sources.size() && limit(taken) == 0; taken++)  // nothing to generate
      if (on_done) on_done(taken, out[taken]);
    if (taken == sources.size()) return;
    m.set_slot_source(slot, sources[taken]);
    lane[slot] = Lane{taken++, *c.decoder_start_token_id};
  };
  for (uint32_t slot = 0; slot < batch; slot++) take(slot);
  std::vector<Model::SlotToken> rows;
  Candidates row;
  while (true) {
    rows.clear();
    for (uint32_t slot = 0; slot < batch; slot++)
      if (lane[slot]) rows.push_back({slot, lane[slot]->next});
    if (rows.empty()) break;
    const std::vector<float> logits = d.slot_decode(rows);
    for (size_t r = 0; r < rows.size(); r++) {
      Lane& l = *lane[rows[r].slot];
      std::vector<int32_t>& ids = out[l.source];
      const std::span<const float> mine = std::span(logits).subspan(r * V, V);
      const bool last = ids.size() + 1 == limit(l.source);
      if (last && c.forced_eos_token_id) {
        l.next = *c.forced_eos_token_id;
      } else if (sampling) {
        row.logits.assign(mine.begin(), mine.end());
        l.next = samplers[l.source].pick(row);
      } else {
        l.next = best_id(mine);
      }
      ids.push_back(l.next);
      if (last || ends_decoding(c, l.next)) {
        if (on_done) on_done(l.source, ids);
        take(rows[r].slot);
      }
    }
  }
  return out;
}

std::vector<int32_t> beam(Seq2Seq& m, std::span<const int32_t> source, BeamSettings settings) {
  const Config& c = m.config();
  settings.start = *c.decoder_start_token_id;
  settings.eos = c.eos_token_id.value_or(-1);
  settings.forced_eos = c.forced_eos_token_id;
  settings.max_new_tokens = new_token_limit(c, settings.max_new_tokens);
  m.set_source(source);
  const BeamStep step = m.decoder().slots() >= settings.beams ? slot_steps(m.decoder())
                                                               : rerun_steps(m.decoder(), c);
  std::vector<int32_t> out = beam_search(settings, c.n_vocab, step);
  out.erase(out.begin());  // the start token
  return out;
}

}  // namespace model
