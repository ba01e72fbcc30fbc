// An encoder-decoder ready to run (Marian): its encoder (encoder.h) and its decoder (a Model
// with cross-attention) on the CPU reference or a GPU, from one checkpoint. A source is encoded
// once; the decoder's cross-attention reads its output, projected once per source, at every
// step. Generation over it: model/generation/seq2seq_generate.h.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/formats/config.h"
#include "model/forward/encoder.h"
#include "model/forward/model.h"

namespace vk {
class Device;
}

namespace model {

class Checkpoint;
struct GpuModelOptions;

class Seq2Seq {
 public:
  // config: the whole model's (Family::EncoderDecoder); the two sides from Checkpoint::side().
  Seq2Seq(const Config& config, std::unique_ptr<Encoder> encoder, std::unique_ptr<Model> decoder);
  const Config& config() const { return config_; }
  Encoder& encoder() { return *encoder_; }
  Model& decoder() { return *decoder_; }

  // Encodes the source ids and gives the output to the decoder, whose cache it resets: the
  // decoder then starts from decoder_start_token_id. Returns the encoder's output [S, C]. Throws
  // for an empty source, one past n_ctx, or an id outside the vocabulary.
  std::vector<float> set_source(std::span<const int32_t> source);
  // The same into one decoder slot with a source cache of its own (Model::slot_set_source), its
  // cache reset: several sources decode together, a slot each (decode_batch). With one slot:
  // set_source().
  void set_slot_source(uint32_t slot, std::span<const int32_t> source);

  // Makes ready what generating from sources of these lengths will use, up to max_new tokens
  // each (greedy, or `beams` beams in the decoder's slots, or with `batched` decode_batch's
  // slots of their own sources; `sampled`: each step's logits whole, as sample() takes them): on
  // a GPU, the encoder's and the decoder's pipelines compiled now, in parallel, so that no pass
  // waits for a compiler. Returns how many were compiled.
  size_t prepare(std::span<const uint32_t> source_lengths, uint32_t max_new, uint32_t beams,
                 bool batched = false, bool sampled = false);

 private:
  Config config_;
  std::unique_ptr<Encoder> encoder_;
  std::unique_ptr<Model> decoder_;
};

// The new ids a source's decoding may have when `asked` for that many: the decoder's context
// bounds the start token and the new ids together.
inline uint32_t new_token_limit(const Config& c, uint32_t asked) {
  return std::min<uint32_t>(asked, c.n_ctx - 1);
}

// Whether `id` ends a source's decoding (the config's eos; kept as its last id).
inline bool ends_decoding(const Config& c, int32_t id) {
  return c.eos_token_id && id == *c.eos_token_id;
}

// Both sides on the CPU reference, or on one GPU (the options apply to both; slots to the
// decoder). A checkpoint of another family is refused, naming what to use.
std::unique_ptr<Seq2Seq> make_cpu_seq2seq(const Checkpoint& checkpoint, Precision precision);
std::unique_ptr<Seq2Seq> make_gpu_seq2seq(const Checkpoint& checkpoint, const vk::Device& device,
                                          const GpuModelOptions& options);

}  // namespace model
