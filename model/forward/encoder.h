// An encoder (BERT) ready to run: the CPU reference or a GPU behind one interface, as Model is
// for decoders. No cache and no next token: each sequence is encoded whole, every token
// attending to all of its own sequence, and its hidden states and head come out. A batch of
// sequences of different lengths (encode_batch) runs on the GPU in passes of several sequences,
// each padded to the pass's longest; a query sees only its own sequence's keys, so a padded
// position never takes part (what a padding mask gives).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/formats/config.h"
#include "model/forward/model.h"

namespace vk {
class Device;
}

namespace model {

class Checkpoint;
struct GpuModelOptions;

// One sequence of a batch: its ids and token types (empty: all 0), as encode() takes them.
struct EncoderInput {
  std::span<const int32_t> ids, types;
};

struct Encoded {
  std::vector<float> hidden;  // [T, C] the last block's output
  // The head's (Config::head): masked-LM [T, V], token classes [T, labels], sequence classes
  // [1, labels]; empty for a model without a head or when not asked for.
  std::vector<float> logits;
};

class Encoder {
 public:
  virtual ~Encoder() = default;
  virtual const Config& config() const = 0;
  virtual std::string device_name() const = 0;
  virtual Precision precision() const = 0;
  // What loading found worth telling (Model::warnings()).
  virtual const std::vector<std::string>& warnings() const = 0;

  // One sequence: its ids and each token's type (BERT's segment: 0 for the first text and its
  // [CLS] and [SEP], 1 for a pair's second; empty: all 0). Throws for an empty sequence, one
  // longer than n_ctx, an id or a type out of range, or types of another length.
  Encoded encode(std::span<const int32_t> ids, std::span<const int32_t> types = {},
                 bool head = true);

  // The hidden states [T_i, C] of each sequence, in the order given, checked as encode()
  // checks one. Each equals encode()'s within rounding (the matmuls reduce the same values in
  // tiles chosen by the pass's rows), and is the same bits whichever sequences it is batched
  // with, alone included. No head, and no attention tap (a pass of one sequence).
  std::vector<std::vector<float>> encode_batch(std::span<const EncoderInput> inputs);

  // Makes ready what encode() of T tokens (with or without its head) will use: a GPU encoder
  // compiles those pipelines now, in parallel, as Model::prepare() does. Returns how many it
  // compiled; the CPU reference has nothing to prepare.
  virtual size_t prepare(uint32_t T, bool head,
                         const std::function<void(size_t, size_t)>& progress = {}) {
    (void)T, (void)head, (void)progress;
    return 0;
  }

  // The attention tap, as Model's: with it on, encode() also keeps the softmax weights of every
  // layer, or of `only_layer`, from the pass's own kernels. attention_probs()[layer] is [H, T, T]
  // for the last encode() of T tokens (every query sees every key); empty for a layer not tapped.
  virtual void set_attention_taps(bool on, std::optional<uint32_t> only_layer = std::nullopt) = 0;
  virtual const std::vector<std::vector<float>>& attention_probs() const = 0;

 protected:
  // types has ids' length (encode() fills the zeros).
  virtual void run(std::span<const int32_t> ids, std::span<const int32_t> types, bool head,
                   Encoded& out) = 0;
  // Checked inputs, every types span of its ids' length; hidden gets one [T_i, C] per input.
  // Here: one run() each (the CPU reference's way).
  virtual void run_batch(std::span<const EncoderInput> inputs,
                         std::vector<std::vector<float>>& hidden);
};

// The encoder interface over a model that has an encode pass (CpuModel, GpuModel: the same
// backends a decoder runs on): each call is one of its passes.
template <class M>
class EncoderOver final : public Encoder {
 public:
  template <class... Args>
  explicit EncoderOver(Args&&... args) : model_(std::forward<Args>(args)...) {}
  const Config& config() const override { return model_.config(); }
  std::string device_name() const override { return model_.device_name(); }
  Precision precision() const override { return model_.precision(); }
  const std::vector<std::string>& warnings() const override { return model_.warnings(); }
  void set_attention_taps(bool on, std::optional<uint32_t> only_layer) override {
    model_.set_attention_taps(on, only_layer);
  }
  const std::vector<std::vector<float>>& attention_probs() const override {
    return model_.attention_probs();
  }
  size_t prepare(uint32_t T, bool head,
                 const std::function<void(size_t, size_t)>& progress) override {
    if constexpr (requires { model_.prepare_encode(T, head, progress); })
      return model_.prepare_encode(T, head, progress);
    else
      return Encoder::prepare(T, head, progress);
  }
  const M& model() const { return model_; }  // gpu_timings(const Encoder&) reads a GPU's

 protected:
  void run(std::span<const int32_t> ids, std::span<const int32_t> types, bool head,
           Encoded& out) override {
    model_.encode(ids, types, head, out);
  }
  void run_batch(std::span<const EncoderInput> inputs,
                 std::vector<std::vector<float>>& hidden) override {
    if constexpr (requires { model_.encode_batch(inputs, hidden); })
      model_.encode_batch(inputs, hidden);
    else
      Encoder::run_batch(inputs, hidden);
  }

 private:
  M model_;
};

// The CPU reference and a GPU encoder, from an encoder's checkpoint (Config::family Encoder;
// a decoder's is refused, as make_cpu_model and make_gpu_model refuse an encoder's).
std::unique_ptr<Encoder> make_cpu_encoder(const Checkpoint& checkpoint, Precision precision);
std::unique_ptr<Encoder> make_gpu_encoder(const Checkpoint& checkpoint, const vk::Device& device,
                                          const GpuModelOptions& options);

// Throws unless the checkpoint's family is `family`, naming what to use instead.
void require_family(const Checkpoint& checkpoint, Family family);

}  // namespace model
