// gpt2vk seq2seq: translation or summarisation with an encoder-decoder folder (Marian, T5): each
// source text is tokenized by the folder's SentencePiece model (Marian's source.spm and
// vocab.json, T5's spiece.model), encoded once, and decoded
// greedily or by beam search as Hugging Face's generate() does (model/generation/
// seq2seq_generate.h), with generation_config.json's settings where the command line gives none.
// --sample draws each token as generate(do_sample=True) does. Greedy or sampled sources of a -f
// file decode several together on a GPU, a decoder slot each (--batch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "apps/commands.h"
#include "apps/seq2seq_session.h"
#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/generation/seq2seq_generate.h"

namespace app {
namespace {

struct Seq2SeqArgs {
  ModelArgs model;
  std::string prompt, file;
  std::optional<uint32_t> beams, max_new, no_repeat_ngram, batch;
  std::optional<double> length_penalty;
  std::string early_stopping;  // true | false | never; "" = generation_config.json's
  bool sample = false;
  std::optional<float> temp, top_p;
  std::optional<uint32_t> top_k;
  std::optional<uint64_t> seed;
};

// The search generate() would run: generation_config.json's (generation_config()), the command
// line over it.
model::BeamSettings settings(const std::filesystem::path& dir, const Seq2SeqArgs& a) {
  model::BeamSettings s = generation_config(dir);
  if (a.beams) s.beams = *a.beams;
  if (a.max_new) s.max_new_tokens = *a.max_new;
  if (a.length_penalty) s.length_penalty = *a.length_penalty;
  if (a.no_repeat_ngram) s.no_repeat_ngram = *a.no_repeat_ngram;
  const std::string& stop = a.early_stopping;
  if (stop == "true") s.early_stopping = model::BeamSettings::Stop::Early;
  else if (stop == "false") s.early_stopping = model::BeamSettings::Stop::Heuristic;
  else if (stop == "never") s.early_stopping = model::BeamSettings::Stop::Never;
  else if (!stop.empty()) throw std::runtime_error("early_stopping " + stop + ": expected true, false or never");
  if (s.beams < 1 || s.beams > 64)
    throw std::runtime_error("--beams " + std::to_string(s.beams) + ": 1 to 64");
  if (s.max_new_tokens < 1) throw std::runtime_error("-n 0: nothing to generate");
  return s;
}

// How each token is drawn where it is not the best one: with --sample or generation_config.json's
// do_sample, Hugging Face's sampling (generation_sampling()) with the command line over it, the
// seed --seed's or a random one; none (greedy or beams) otherwise, or at --temp 0.
std::optional<model::SamplerOptions> sampling(const std::filesystem::path& dir,
                                              const Seq2SeqArgs& a, uint32_t beams) {
  std::optional<model::SamplerOptions> o = generation_sampling(dir);
  if (a.sample && !o) o = hf_sampling();
  if (!o) {
    if (a.temp || a.top_k || a.top_p || a.seed)
      throw std::runtime_error(
          "--temp, --top-k, --top-p and --seed are for sampling: add --sample (or do_sample in "
          "generation_config.json)");
    return o;
  }
  if (a.temp) o->temperature = *a.temp;
  if (a.top_k) o->top_k = *a.top_k;
  if (a.top_p) o->top_p = *a.top_p;
  const auto text = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", double{v});
    return std::string(b);
  };
  if (!(o->temperature >= 0 && o->temperature <= 100))
    throw std::runtime_error("temperature " + text(o->temperature) + ": 0 (greedy) to 100");
  if (!(o->top_p > 0 && o->top_p <= 1))
    throw std::runtime_error("top-p " + text(o->top_p) + ": above 0, at most 1");
  if (o->temperature == 0) return std::nullopt;
  if (beams > 1)
    throw std::runtime_error(
        "sampling (--sample, or generation_config.json's do_sample) with " + std::to_string(beams) +
        " beams: beam sampling is not supported; --beams 1 samples, --temp 0 searches beams "
        "without sampling");
  o->seed = a.seed ? *a.seed : std::random_device{}();
  return o;
}

// Sources decoded together (decode_batch): --batch, else as many as the slots hold on a GPU;
// beams take the slots for themselves.
uint32_t batch_size(const Seq2SeqArgs& a, const model::BeamSettings& s, size_t texts) {
  if (a.batch && (*a.batch < 1 || *a.batch > model::kMaxSlots))
    throw std::runtime_error("--batch " + std::to_string(*a.batch) + ": 1 to " +
                             std::to_string(model::kMaxSlots) + " sources together");
  if (s.beams > 1) {
    if (a.batch.value_or(1) > 1)
      throw std::runtime_error("--batch " + std::to_string(*a.batch) + " with " +
                               std::to_string(s.beams) +
                               " beams: sources decode together without beams only (the beams take "
                               "the slots)");
    return 1;
  }
  if (a.batch) return static_cast<uint32_t>(std::min<size_t>(*a.batch, texts));
  if (a.model.device == "cpu") return 1;  // the CPU reference has one slot
  return static_cast<uint32_t>(std::min<size_t>(texts, model::kMaxSlots));
}

int seq2seq(Seq2SeqArgs a) {
  const std::vector<std::string> texts = read_texts(a.prompt, a.file);
  const model::BeamSettings s = settings(model_dir(a.model), a);
  const std::optional<model::SamplerOptions> sampled = sampling(model_dir(a.model), a, s.beams);
  uint32_t batch = batch_size(a, s, texts.size());
  // A slot per beam keeps every beam's caches on the device (seq2seq_generate.h); a slot and a
  // source cache per source decoded together.
  if (s.beams > 1 && s.beams <= model::kMaxSlots) a.model.slots = s.beams;
  if (batch > 1) a.model.slots = a.model.sources = batch;
  Seq2SeqSession session = open_seq2seq(a.model);
  const model::Config& c = session.checkpoint->config();
  if (2 * s.beams > c.n_vocab)
    throw std::runtime_error("--beams " + std::to_string(s.beams) + ": at most half the vocabulary (" +
                             std::to_string(c.n_vocab / 2) + ")");
  model::Seq2Seq* m = session.model.get();
  batch = std::min(batch, m->decoder().slot_sources());  // the CPU reference: one at a time
  const model::SentencePieceTokenizer* target = session.target.get();

  // Every source tokenized and checked before anything is generated, and the pipelines their
  // lengths need compiled before the clock starts, as generate does.
  std::vector<std::vector<int32_t>> sources;
  std::vector<uint32_t> lengths;
  for (size_t i = 0; i < texts.size(); i++) {
    sources.push_back(encode_source(
        session, texts[i], a.file.empty() ? "the prompt" : a.file + ":" + std::to_string(i + 1)));
    lengths.push_back(static_cast<uint32_t>(sources.back().size()));
  }
  auto t0 = std::chrono::steady_clock::now();
  const size_t pipelines =
      m->prepare(lengths, s.max_new_tokens, s.beams, batch > 1, sampled.has_value());
  const double compile_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  t0 = std::chrono::steady_clock::now();
  size_t made = 0, read = 0;
  const auto print = [&](const std::vector<int32_t>& out) {
    std::printf("%s\n", target->decode_generated(out, c.n_vocab).c_str());
    std::fflush(stdout);
    made += out.size();
  };
  for (const std::vector<int32_t>& ids : sources) read += ids.size();
  if (s.beams == 1) {
    // Each source's text as soon as it and those before it are done, in the file's order.
    std::vector<std::optional<std::vector<int32_t>>> done(sources.size());
    size_t printed = 0;
    const uint32_t max_new[] = {s.max_new_tokens};
    model::decode_batch(*m, sources, max_new, batch, sampled ? &*sampled : nullptr,
                        [&](size_t i, const std::vector<int32_t>& ids) {
                          done[i] = ids;
                          for (; printed < sources.size() && done[printed]; printed++) {
                            print(*done[printed]);
                            done[printed].reset();
                          }
                        });
  } else {
    for (const std::vector<int32_t>& ids : sources) print(model::beam(*m, ids, s));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string compile = pipelines_note(pipelines, compile_s, session.device.get());
  if (!compile.empty()) compile += ", then ";
  std::string search = s.beams > 1 ? std::to_string(s.beams) + " beams"
                       : sampled   ? "sampled, seed " + std::to_string(sampled->seed)
                                   : "greedy";
  if (batch > 1) search += ", " + std::to_string(batch) + " sources together";
  std::fprintf(stderr,
               "gpt2vk: %s%zu source(s), %zu tokens read, %zu generated (%s) in %.2f s on %s\n",
               compile.c_str(), texts.size(), read, made, search.c_str(), secs,
               m->decoder().device_name().c_str());
  return 0;
}

}  // namespace

Command add_seq2seq(CLI::App& cli) {
  auto args = std::make_shared<Seq2SeqArgs>();
  CLI::App* cmd = cli.add_subcommand("seq2seq", "translate or summarise with an encoder-decoder (Marian, T5)");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "one source text");
  cmd->add_option("-f,--file", args->file, "source texts, one per line");
  cmd->add_option("--beams", args->beams, "beam search with this many beams (1: greedy)");
  cmd->add_option("--batch", args->batch,
                  "without beams: decode this many sources together (default: up to 8 on a GPU)");
  cmd->add_flag("--sample", args->sample,
                "draw each token as generate(do_sample=True): temperature, top-k, top-p");
  cmd->add_option("--temp", args->temp, "sampling temperature (default 1; 0: greedy)");
  cmd->add_option("--top-k", args->top_k, "sample among the k best (default 50; 0: all)");
  cmd->add_option("--top-p", args->top_p, "sample within this probability mass (default 1)");
  cmd->add_option("--seed", args->seed,
                  "the draws' seed (source i of a file: seed + i); default: random");
  cmd->add_option("-n,--n-predict", args->max_new, "at most this many new tokens");
  cmd->add_option("--length-penalty", args->length_penalty, "beam scores / length^this");
  cmd->add_option("--no-repeat-ngram", args->no_repeat_ngram, "no n-gram of this size twice");
  cmd->add_option("--early-stopping", args->early_stopping, "true | false | never");
  return {cmd, [args] { return seq2seq(*args); }};
}

}  // namespace app
