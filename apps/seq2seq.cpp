// gpt2vk seq2seq: translation or summarisation with an encoder-decoder folder (Marian): each
// source text is tokenized by the folder's source.spm and vocab.json, encoded once, and decoded
// greedily or by beam search as Hugging Face's generate() does (model/generation/
// seq2seq_generate.h), with generation_config.json's settings where the command line gives none.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/commands.h"
#include "apps/session.h"
#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/forward/seq2seq.h"
#include "model/generation/seq2seq_generate.h"
#include "model/text/sentencepiece.h"

namespace app {
namespace {

struct Seq2SeqArgs {
  ModelArgs model;
  std::string prompt, file;
  std::optional<uint32_t> beams, max_new, no_repeat_ngram;
  std::optional<double> length_penalty;
  std::string early_stopping;  // true | false | never; "" = generation_config.json's
};

// The search generate() would run: generation_config.json's keys (absent: transformers'
// defaults, 1 beam and max_length 20, the start token included), the command line over them.
model::BeamSettings settings(const std::filesystem::path& dir, const Seq2SeqArgs& a) {
  model::BeamSettings s;
  s.beams = 1;
  s.max_new_tokens = 19;
  std::string stop = "false";
  const std::filesystem::path file = dir / "generation_config.json";
  if (std::filesystem::exists(file)) {
    nlohmann::json g;
    try {
      g = nlohmann::json::parse(read_file(file.string()));
      if (g.contains("num_beams")) s.beams = g["num_beams"].get<uint32_t>();
      if (g.contains("max_new_tokens")) s.max_new_tokens = g["max_new_tokens"].get<uint32_t>();
      else if (g.contains("max_length")) s.max_new_tokens = std::max(1u, g["max_length"].get<uint32_t>() - 1);
      if (g.contains("length_penalty")) s.length_penalty = g["length_penalty"].get<double>();
      if (g.contains("no_repeat_ngram_size")) s.no_repeat_ngram = g["no_repeat_ngram_size"].get<uint32_t>();
      if (g.contains("early_stopping"))
        stop = g["early_stopping"].is_boolean() ? (g["early_stopping"].get<bool>() ? "true" : "false")
                                                : g["early_stopping"].get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(file.string() + ": " + e.what());
    }
  }
  if (a.beams) s.beams = *a.beams;
  if (a.max_new) s.max_new_tokens = *a.max_new;
  if (a.length_penalty) s.length_penalty = *a.length_penalty;
  if (a.no_repeat_ngram) s.no_repeat_ngram = *a.no_repeat_ngram;
  if (!a.early_stopping.empty()) stop = a.early_stopping;
  if (stop == "true") s.early_stopping = model::BeamSettings::Stop::Early;
  else if (stop == "false") s.early_stopping = model::BeamSettings::Stop::Heuristic;
  else if (stop == "never") s.early_stopping = model::BeamSettings::Stop::Never;
  else throw std::runtime_error("early_stopping " + stop + ": expected true, false or never");
  if (s.beams < 1 || s.beams > 64)
    throw std::runtime_error("--beams " + std::to_string(s.beams) + ": 1 to 64");
  if (s.max_new_tokens < 1) throw std::runtime_error("-n 0: nothing to generate");
  return s;
}

int seq2seq(const Seq2SeqArgs& a) {
  const std::vector<std::string> texts = read_texts(a.prompt, a.file);
  const std::filesystem::path dir = model_dir(a.model);
  auto checkpoint = model::Checkpoint::load(dir);
  if (checkpoint->config().family != model::Family::EncoderDecoder)
    throw std::runtime_error(dir.string() + ": not an encoder-decoder (seq2seq takes a Marian "
                             "or T5 folder; " + (checkpoint->config().family == model::Family::Encoder
                                               ? "a BERT encoder: use embed, fill-mask or classify)"
                                               : "a GPT-2 decoder: use generate)"));
  for (const std::string& w : checkpoint->warnings()) std::fprintf(stderr, "gpt2vk: warning: %s\n", w.c_str());
  const model::Config& c = checkpoint->config();
  const model::BeamSettings s = settings(dir, a);
  if (2 * s.beams > c.n_vocab)
    throw std::runtime_error("--beams " + std::to_string(s.beams) + ": at most half the vocabulary (" +
                             std::to_string(c.n_vocab / 2) + ")");
  // Marian's two sides have a model each; T5's one model serves both.
  const model::SpmFlavor flavor =
      c.tokenizer.kind == model::TokenizerKind::T5Spm ? model::SpmFlavor::T5 : model::SpmFlavor::Marian;
  auto source = model::load_sentencepiece(dir, flavor, model::SpmSide::Source);
  auto target = model::load_sentencepiece(dir, flavor, model::SpmSide::Target);
  for (auto* t : {source.get(), target.get()})
    if (t->vocab_size() > c.n_vocab)
      throw std::runtime_error(dir.string() + ": the tokenizer has " + std::to_string(t->vocab_size()) +
                               " tokens, config.json's vocab_size " + std::to_string(c.n_vocab));

  const model::Precision precision = model::parse_precision(a.model.precision);
  std::unique_ptr<vk::Instance> instance;
  std::unique_ptr<vk::Device> device;
  std::unique_ptr<model::Seq2Seq> m;
  if (a.model.device == "cpu") {
    m = model::make_cpu_seq2seq(*checkpoint, precision);
  } else {
    open_device(instance, device, a.model);
    model::GpuModelOptions o;
    o.precision = precision;
    o.split_layers = a.model.split_layers;
    // A slot per beam keeps every beam's caches on the device (seq2seq_generate.h).
    if (s.beams > 1 && s.beams <= model::kMaxSlots) o.slots = s.beams;
    m = model::make_gpu_seq2seq(*checkpoint, *device, o);
  }

  const auto t0 = std::chrono::steady_clock::now();
  size_t made = 0, read = 0;
  for (size_t i = 0; i < texts.size(); i++) {
    const std::vector<int32_t> ids = source->encode(texts[i]);
    if (ids.size() > c.n_ctx)
      throw std::runtime_error((a.file.empty() ? std::string("the prompt") : a.file + ":" + std::to_string(i + 1)) +
                               ": " + std::to_string(ids.size()) + " tokens; the model takes at most " +
                               std::to_string(c.n_ctx) + " (max_position_embeddings)");
    const std::vector<int32_t> out =
        s.beams == 1 ? model::greedy(*m, ids, s.max_new_tokens) : model::beam(*m, ids, s);
    std::printf("%s\n", target->decode(out).c_str());
    std::fflush(stdout);
    made += out.size(), read += ids.size();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "gpt2vk: %zu source(s), %zu tokens read, %zu generated (%u beam%s) in %.2f s on %s\n",
               texts.size(), read, made, s.beams, s.beams == 1 ? "" : "s", secs,
               m->decoder().device_name().c_str());
  return 0;
}

}  // namespace

Command add_seq2seq(CLI::App& cli) {
  auto args = std::make_shared<Seq2SeqArgs>();
  CLI::App* cmd = cli.add_subcommand("seq2seq", "translate or summarise with an encoder-decoder (Marian)");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "one source text");
  cmd->add_option("-f,--file", args->file, "source texts, one per line");
  cmd->add_option("--beams", args->beams, "beam search with this many beams (1: greedy)");
  cmd->add_option("-n,--n-predict", args->max_new, "at most this many new tokens");
  cmd->add_option("--length-penalty", args->length_penalty, "beam scores / length^this");
  cmd->add_option("--no-repeat-ngram", args->no_repeat_ngram, "no n-gram of this size twice");
  cmd->add_option("--early-stopping", args->early_stopping, "true | false | never");
  return {cmd, [args] { return seq2seq(*args); }};
}

}  // namespace app
