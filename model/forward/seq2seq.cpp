#include "model/forward/seq2seq.h"

#include <algorithm>
#include <stdexcept>

#include "model/formats/checkpoint.h"
#include "model/forward/cpu_model.h"
#include "model/forward/gpu_model.h"

namespace model {

Seq2Seq::Seq2Seq(const Config& config, std::unique_ptr<Encoder> encoder,
                 std::unique_ptr<Model> decoder)
    : config_(config), encoder_(std::move(encoder)), decoder_(std::move(decoder)) {}

namespace {

// The encoder's output [S, C] for a source, refused where it is empty.
std::vector<float> encoded(Encoder& encoder, std::span<const int32_t> source) {
  if (source.empty()) throw std::runtime_error("an empty source: nothing to translate");
  return std::move(encoder.encode(source, {}, false).hidden);
}

}  // namespace

std::vector<float> Seq2Seq::set_source(std::span<const int32_t> source) {
  std::vector<float> hidden = encoded(*encoder_, source);
  decoder_->set_source(hidden);
  decoder_->reset();
  return hidden;
}

void Seq2Seq::set_slot_source(uint32_t slot, std::span<const int32_t> source) {
  decoder_->slot_set_source(slot, encoded(*encoder_, source));
  decoder_->slot_reset(slot);
}

size_t Seq2Seq::prepare(std::span<const uint32_t> source_lengths, uint32_t max_new, uint32_t beams,
                        bool batched, bool sampled) {
  // Greedy steps take the best id (k 1), sampled ones all logits (k 0); beams in slots, and
  // decode_batch's slots, run slot_decode's batches, which the decoder's prepare records
  // whatever k is.
  const uint32_t k = beams > 1 || batched || sampled ? 0 : 1;
  const uint32_t steps = new_token_limit(config_, max_new);
  std::vector<uint32_t> lengths(source_lengths.begin(), source_lengths.end());
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  size_t made = 0;
  for (uint32_t S : lengths)
    made += encoder_->prepare(S, false) + decoder_->prepare_source(S, steps, k, batched);
  return made;
}

namespace {

void require_seq2seq(const Checkpoint& checkpoint) {
  if (checkpoint.config().family == Family::EncoderDecoder) return;
  throw std::runtime_error(checkpoint.dir().string() + ": not an encoder-decoder (" +
                           (checkpoint.config().family == Family::Encoder
                                ? "a BERT encoder: use embed, fill-mask or classify"
                                : "a GPT-2 decoder: use generate") +
                           ")");
}

}  // namespace

std::unique_ptr<Seq2Seq> make_cpu_seq2seq(const Checkpoint& checkpoint, Precision precision) {
  require_seq2seq(checkpoint);
  return std::make_unique<Seq2Seq>(
      checkpoint.config(), make_cpu_encoder(*checkpoint.side(Family::Encoder), precision),
      make_cpu_model(*checkpoint.side(Family::Decoder), precision, Precision::F32));
}

std::unique_ptr<Seq2Seq> make_gpu_seq2seq(const Checkpoint& checkpoint, const vk::Device& device,
                                          const GpuModelOptions& options) {
  require_seq2seq(checkpoint);
  GpuModelOptions encoder_options = options;
  encoder_options.slots = 1;
  encoder_options.sources = 1;
  return std::make_unique<Seq2Seq>(
      checkpoint.config(),
      make_gpu_encoder(*checkpoint.side(Family::Encoder), device, encoder_options),
      make_gpu_model(*checkpoint.side(Family::Decoder), device, options));
}

}  // namespace model
