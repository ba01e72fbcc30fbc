#include "apps/seq2seq_session.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "model/forward/gpu_model.h"

namespace app {

bool seq2seq_folder(const ModelArgs& args) {
  return model::load_config(model_dir(args) / "config.json").family ==
         model::Family::EncoderDecoder;
}

model::SpmFlavor spm_flavor(const model::Config& config) {
  switch (config.tokenizer.kind) {
    case model::TokenizerKind::MarianSpm:
      return model::SpmFlavor::Marian;
    case model::TokenizerKind::T5Spm:
      return model::SpmFlavor::T5;
    default:
      break;
  }
  throw std::runtime_error(
      "config.json: an encoder-decoder whose tokenizer is not SentencePiece "
      "(Marian's source.spm, target.spm and vocab.json, or T5's spiece.model)");
}

Seq2SeqSession open_seq2seq(const ModelArgs& args, bool tokenizers) {
  Seq2SeqSession s;
  const std::filesystem::path dir = model_dir(args);
  s.checkpoint = model::Checkpoint::load(dir);
  const model::Config& c = s.checkpoint->config();
  if (c.family != model::Family::EncoderDecoder)
    throw std::runtime_error(dir.string() + ": not an encoder-decoder (" +
                             (c.family == model::Family::Encoder
                                  ? "a BERT encoder: use embed, fill-mask or classify)"
                                  : "a GPT-2 decoder: use generate)"));
  for (const std::string& w : s.checkpoint->warnings())
    std::fprintf(stderr, "gpt2vk: warning: %s\n", w.c_str());
  if (tokenizers) {
    const model::SpmFlavor flavor = spm_flavor(c);
    s.source = model::load_sentencepiece(dir, flavor, model::SpmSide::Source);
    s.target = model::load_sentencepiece(dir, flavor, model::SpmSide::Target);
    for (const auto* t : {s.source.get(), s.target.get()})
      if (t->vocab_size() > c.n_vocab)
        throw std::runtime_error(dir.string() + ": the tokenizer has " +
                                 std::to_string(t->vocab_size()) +
                                 " tokens, config.json's vocab_size " + std::to_string(c.n_vocab));
  }
  const model::Precision precision = model::parse_precision(args.precision);
  if (args.device == "cpu") {
    s.model = model::make_cpu_seq2seq(*s.checkpoint, precision);
    return s;
  }
  open_device(s.instance, s.device, args);
  model::GpuModelOptions o;
  o.precision = precision;
  o.split_layers = args.split_layers;
  o.slots = std::min(args.slots, model::kMaxSlots);
  o.sources = std::clamp(args.sources, 1u, o.slots);
  s.model = model::make_gpu_seq2seq(*s.checkpoint, *s.device, o);
  return s;
}

namespace {

// The folder's generation_config.json, parsed (null without one), read by `read` with each
// json error named by the file.
template <typename Read>
void with_generation_config(const std::filesystem::path& dir, Read read) {
  const std::filesystem::path file = dir / "generation_config.json";
  if (!std::filesystem::exists(file)) return;
  try {
    read(nlohmann::json::parse(read_file(file.string())), file);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(file.string() + ": " + e.what());
  }
}

}  // namespace

model::BeamSettings generation_config(const std::filesystem::path& dir) {
  model::BeamSettings s;
  s.beams = 1;
  s.max_new_tokens = 19;
  with_generation_config(dir, [&](const nlohmann::json& g, const std::filesystem::path& file) {
    if (g.contains("num_beams")) s.beams = g["num_beams"].get<uint32_t>();
    if (g.contains("max_new_tokens"))
      s.max_new_tokens = g["max_new_tokens"].get<uint32_t>();
    else if (g.contains("max_length"))
      s.max_new_tokens = std::max(2u, g["max_length"].get<uint32_t>()) - 1;
    if (g.contains("length_penalty")) s.length_penalty = g["length_penalty"].get<double>();
    if (g.contains("no_repeat_ngram_size"))
      s.no_repeat_ngram = g["no_repeat_ngram_size"].get<uint32_t>();
    if (g.contains("early_stopping")) {
      const nlohmann::json& e = g["early_stopping"];
      if (e.is_boolean())
        s.early_stopping =
            e.get<bool>() ? model::BeamSettings::Stop::Early : model::BeamSettings::Stop::Heuristic;
      else if (e.get<std::string>() == "never")
        s.early_stopping = model::BeamSettings::Stop::Never;
      else
        throw std::runtime_error(file.string() +
                                 ": early_stopping: expected true, false or \"never\"");
    }
  });
  return s;
}

std::optional<model::SamplerOptions> generation_sampling(const std::filesystem::path& dir) {
  std::optional<model::SamplerOptions> o;
  with_generation_config(dir, [&](const nlohmann::json& g, const std::filesystem::path&) {
    if (!g.value("do_sample", false)) return;
    o = hf_sampling();
    if (g.contains("temperature")) o->temperature = g["temperature"].get<float>();
    if (g.contains("top_k")) o->top_k = g["top_k"].get<uint32_t>();
    if (g.contains("top_p")) o->top_p = g["top_p"].get<float>();
  });
  return o;
}

model::SamplerOptions hf_sampling() {
  model::SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 50;
  o.top_p = 1.0f;
  o.temperature_first = true;
  return o;
}

std::vector<int32_t> encode_source(const Seq2SeqSession& s, const std::string& text,
                                   const std::string& where) {
  std::vector<int32_t> ids = s.source->encode(text);
  const uint32_t n_ctx = s.checkpoint->config().n_ctx;
  if (ids.size() > n_ctx)
    throw std::runtime_error(where + ": " + std::to_string(ids.size()) +
                             " tokens; the model takes at most " + std::to_string(n_ctx) +
                             " (its context)");
  return ids;
}

}  // namespace app
