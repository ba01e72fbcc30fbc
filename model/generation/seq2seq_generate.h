// Generation from an encoder-decoder (model/forward/seq2seq.h), as Hugging Face's generate()
// runs it: greedy, or beam search (beam.h).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/forward/seq2seq.h"
#include "model/generation/beam.h"
#include "model/generation/sampler.h"

namespace model {

// Greedy decoding of the source: the start token, then up to max_new ids, each the best of its
// step, ending at eos (kept); where the config has a forced eos, the last step allowed is that
// token. Returns the ids after the start token.
std::vector<int32_t> greedy(Seq2Seq& m, std::span<const int32_t> source, uint32_t max_new);

// Sampling from the source, as generate(do_sample=True) samples: the start token, then up to
// max_new ids, each drawn by `sampler` (its options in Hugging Face's order:
// SamplerOptions::temperature_first) from all V logits of its step, ending at eos (kept); the
// config's forced eos at the last step allowed. Returns the ids after the start token.
std::vector<int32_t> sample(Seq2Seq& m, std::span<const int32_t> source, uint32_t max_new,
                            Sampler& sampler);

// Decoding of several sources, each up to its max_new[i] ids as greedy() decodes it (max_new: one
// per source, or one for all), or with `sampling` as sample() does
// with a Sampler of its own seeded sampling->seed + its index (so a source's text does not
// depend on the others). With batch > 1, up to that many decode together in the decoder's slots,
// each with its source in a source cache of its own (as many as Model::slot_sources() allows):
// a slot takes the next source as soon as its own ends. A row's logits do not depend on the rows
// beside it (Model::slot_decode), so the ids are the same whatever the batch. on_done(i, ids) is
// called as source i's ids (after the start token) are complete, in the order they complete; they
// are returned too, in the sources' order.
std::vector<std::vector<int32_t>> decode_batch(
    Seq2Seq& m, std::span<const std::vector<int32_t>> sources, std::span<const uint32_t> max_new,
    uint32_t batch, const SamplerOptions* sampling = nullptr,
    const std::function<void(size_t, const std::vector<int32_t>&)>& on_done = {});

// Beam search of the source, with the config's start, eos and forced eos over `settings`' own.
// Returns the ids after the start token. Each step runs every beam's prefix again from an empty
// cache: the beams' caches are never copied, at the cost of a step that grows with the prefix.
std::vector<int32_t> beam(Seq2Seq& m, std::span<const int32_t> source, BeamSettings settings);

}  // namespace model
