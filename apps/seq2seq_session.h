// What the encoder-decoder commands and the server share: opening a Marian or T5 folder (its
// checkpoint, the source and target SentencePiece tokenizers, the model on the chosen device)
// and the search its generation_config.json asks for.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/session.h"
#include "model/forward/seq2seq.h"
#include "model/generation/beam.h"
#include "model/generation/sampler.h"
#include "model/text/sentencepiece.h"

namespace app {

struct Seq2SeqSession {
  std::unique_ptr<model::Checkpoint> checkpoint;
  // The source text's ids and the generated ids' text (Marian: a model each; T5: one, twice).
  std::unique_ptr<model::SentencePieceTokenizer> source, target;
  std::unique_ptr<vk::Instance> instance;
  std::unique_ptr<vk::Device> device;
  std::unique_ptr<model::Seq2Seq> model;
};

// Whether --model names an encoder-decoder's folder (config.json's model_type).
bool seq2seq_folder(const ModelArgs& args);

// The SentencePiece flavour of an encoder-decoder's tokenizer kind; throws for another kind.
model::SpmFlavor spm_flavor(const model::Config& config);

// The checkpoint (an encoder-decoder's, else a clear error naming what to use), its tokenizers
// (checked against the vocabulary), and the model on the device --device names (the CPU
// reference for "cpu"), with args.slots slots on a GPU (up to kMaxSlots: a beam's caches each,
// or a source's) and args.sources source caches (up to the slots);
// warnings on stderr. Without `tokenizers` (bench and logits, which take ids) source and target
// stay null, and a folder without tokenizer files opens.
Seq2SeqSession open_seq2seq(const ModelArgs& args, bool tokenizers = true);

// A source text's ids (the session's source tokenizer), refused past the model's context with
// `where` (the prompt, or file:line) named.
std::vector<int32_t> encode_source(const Seq2SeqSession& s, const std::string& text,
                                   const std::string& where);

// The search generate() would run from the folder's generation_config.json (absent keys, or no
// file: transformers' defaults, 1 beam and max_length 20, the start token included), the
// config's start and eos not yet filled in (model::beam does). Throws naming the file for a
// value of the wrong type.
model::BeamSettings generation_config(const std::filesystem::path& dir);

// Sampling as generate(do_sample=True) draws: temperature 1, top-k 50, top-p 1, in its order
// (SamplerOptions::temperature_first); the seed 0.
model::SamplerOptions hf_sampling();

// The folder's generation_config.json's sampling where it says do_sample (its temperature,
// top_k and top_p over hf_sampling()'s); none where it does not, or there is no file. Throws
// naming the file for a value of the wrong type.
std::optional<model::SamplerOptions> generation_sampling(const std::filesystem::path& dir);

}  // namespace app
