#include "model/forward/encoder.h"

#include <algorithm>
#include <stdexcept>

#include "model/formats/checkpoint.h"

namespace model {

namespace {

// What encode() and encode_batch() refuse in a sequence.
void check_input(const Config& c, std::span<const int32_t> ids, std::span<const int32_t> types) {
  if (ids.empty()) throw std::runtime_error("no tokens to encode");
  if (ids.size() > c.n_ctx)
    throw std::runtime_error(std::to_string(ids.size()) + " tokens: the model takes at most " +
                             std::to_string(c.n_ctx) + " (max_position_embeddings)");
  if (!types.empty() && types.size() != ids.size())
    throw std::runtime_error(std::to_string(types.size()) + " token types for " +
                             std::to_string(ids.size()) + " tokens");
  check_vocabulary(ids, c.n_vocab);
  for (size_t t = 0; t < types.size(); t++)
    if (types[t] < 0 || static_cast<uint32_t>(types[t]) >= c.n_types)
      throw std::runtime_error("token type " + std::to_string(types[t]) + " at position " +
                               std::to_string(t) + " is outside [0, " +
                               std::to_string(c.n_types) + ") (type_vocab_size)");
}

}  // namespace

Encoded Encoder::encode(std::span<const int32_t> ids, std::span<const int32_t> types, bool head) {
  const Config& c = config();
  check_input(c, ids, types);
  const std::vector<int32_t> zeros(types.empty() ? ids.size() : 0, 0);
  Encoded out;
  run(ids, types.empty() ? std::span<const int32_t>(zeros) : types,
      head && c.head != EncoderHead::None, out);
  return out;
}

std::vector<std::vector<float>> Encoder::encode_batch(std::span<const EncoderInput> inputs) {
  const Config& c = config();
  size_t longest = 0;
  for (size_t i = 0; i < inputs.size(); i++) {
    try {
      check_input(c, inputs[i].ids, inputs[i].types);
    } catch (const std::exception& e) {
      throw std::runtime_error("sequence " + std::to_string(i) + " of the batch: " + e.what());
    }
    longest = std::max(longest, inputs[i].ids.size());
  }
  const std::vector<int32_t> zeros(longest, 0);
  std::vector<EncoderInput> checked(inputs.begin(), inputs.end());
  for (EncoderInput& in : checked)
    if (in.types.empty()) in.types = std::span<const int32_t>(zeros).first(in.ids.size());
  std::vector<std::vector<float>> hidden;
  run_batch(checked, hidden);
  return hidden;
}

void Encoder::run_batch(std::span<const EncoderInput> inputs,
                        std::vector<std::vector<float>>& hidden) {
  hidden.clear();
  for (const EncoderInput& in : inputs) {
    Encoded out;
    run(in.ids, in.types, false, out);
    hidden.push_back(std::move(out.hidden));
  }
}

void require_family(const Checkpoint& checkpoint, Family family) {
  const Family is = checkpoint.config().family;
  if (is == family) return;
  const std::string dir = checkpoint.dir().string();
  if (is == Family::EncoderDecoder)
    throw std::runtime_error(dir + ": an encoder-decoder (" +
                             (checkpoint.config().relative_buckets ? "T5" : "Marian") +
                             "): use seq2seq");
  if (is == Family::Encoder)
    throw std::runtime_error(dir + ": a BERT encoder (" +
                             encoder_head_name(checkpoint.config().head) +
                             "): it has no next-token head; use embed, fill-mask or classify");
  throw std::runtime_error(dir + ": a GPT-2 decoder, not an encoder; use generate, logits or "
                           "perplexity");
}

}  // namespace model
