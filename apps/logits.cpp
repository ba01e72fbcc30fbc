// gpt2vk logits: int32 ids in, float32 logits [T, V] out (an encoder's hidden states [T, C]; an
// encoder-decoder's decoder logits, teacher-forced, for a --source), for comparison with other
// engines.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "apps/commands.h"
#include "apps/encoder_session.h"
#include "apps/seq2seq_session.h"
#include "apps/session.h"

namespace app {
namespace {

struct LogitsArgs {
  ModelArgs model;
  std::string ids, out;
  std::string source, hidden_out;  // an encoder-decoder's source ids; its encoder's output
};

std::vector<int32_t> read_ids(const std::string& file) {
  const std::string data = read_file(file);
  if (data.empty() || data.size() % 4 != 0)
    throw std::runtime_error(file + ": " + std::to_string(data.size()) +
                             " bytes is not a non-empty list of int32 ids");
  std::vector<int32_t> ids(data.size() / 4);
  std::memcpy(ids.data(), data.data(), data.size());
  return ids;
}

void write_floats(const std::string& file, const std::vector<float>& v) {
  std::ofstream o(file, std::ios::binary | std::ios::trunc);
  o.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  if (!o) throw std::runtime_error(file + ": cannot write");
}

// Throws, naming the file, unless every id is in the vocabulary and they fit the context.
void check_ids(const std::string& file, const std::vector<int32_t>& ids, const model::Config& c) {
  try {
    model::check_vocabulary(ids, c.n_vocab);
  } catch (const std::exception& e) {
    throw std::runtime_error(file + ": " + e.what());
  }
  if (ids.size() > c.n_ctx)
    throw std::runtime_error(file + ": " + std::to_string(ids.size()) +
                             " ids, more than the model's context of " + std::to_string(c.n_ctx));
}

// An encoder-decoder's: the source encoded, then the decoder's ids (the start token first) run
// teacher-forced over it: logits [T, V], and with --hidden-out the encoder's output [S, C].
int seq2seq_logits(const LogitsArgs& args, const std::vector<int32_t>& ids) {
  if (args.source.empty())
    throw std::runtime_error("an encoder-decoder needs --source: the int32 ids of its source");
  const std::vector<int32_t> source = read_ids(args.source);
  Seq2SeqSession s = open_seq2seq(args.model, false);
  const model::Config& c = s.checkpoint->config();
  check_ids(args.source, source, c);
  check_ids(args.ids, ids, c);
  const std::vector<float> hidden = s.model->set_source(source);
  write_floats(args.out, s.model->decoder().logits(ids));
  if (!args.hidden_out.empty()) write_floats(args.hidden_out, hidden);
  model::Model& d = s.model->decoder();
  std::fprintf(stderr, "gpt2vk: logits [%zu, %u] over a source of %zu ids written to %s (%s, %s)\n",
               ids.size(), c.n_vocab, source.size(), args.out.c_str(), d.device_name().c_str(),
               model::precision_name(d.precision()));
  if (!args.hidden_out.empty())
    std::fprintf(stderr, "gpt2vk: the encoder's output [%zu, %u] written to %s\n", source.size(),
                 c.n_embd, args.hidden_out.c_str());
  return 0;
}

int logits(const LogitsArgs& args) {
  const std::vector<int32_t> ids = read_ids(args.ids);
  if (seq2seq_folder(args.model)) return seq2seq_logits(args, ids);
  if (!args.source.empty() || !args.hidden_out.empty())
    throw std::runtime_error(std::string(args.source.empty() ? "--hidden-out" : "--source") +
                             ": only for an encoder-decoder (Marian, T5)");

  if (encoder_folder(args.model)) {
    // An encoder's: the ids as the model reads them ([CLS] ... [SEP] included), all type 0.
    EncoderSession e = open_encoder(args.model);
    write_floats(args.out, e.encoder->encode(ids, {}, false).hidden);
    std::fprintf(stderr, "gpt2vk: hidden states [%zu, %u] written to %s (%s, %s)\n", ids.size(),
                 e.checkpoint->config().n_embd, args.out.c_str(), e.encoder->device_name().c_str(),
                 model::precision_name(e.encoder->precision()));
    return 0;
  }
  Session s = open_session(args.model);
  write_floats(args.out, s.model->logits(ids));
  std::fprintf(stderr, "gpt2vk: logits [%zu, %u] written to %s (%s, %s)\n", ids.size(),
               s.model->config().n_vocab, args.out.c_str(), s.model->device_name().c_str(),
               model::precision_name(s.model->precision()));
  return 0;
}

}  // namespace

Command add_logits(CLI::App& cli) {
  auto args = std::make_shared<LogitsArgs>();
  CLI::App* cmd = cli.add_subcommand("logits", "int32 ids in, float32 logits [T, V] out (an encoder: hidden states [T, C]; an "
      "encoder-decoder: teacher-forced, over --source)");
  add_model_options(*cmd, args->model);
  cmd->add_option("--ids", args->ids,
                  "int32 little-endian token ids (an encoder-decoder: the decoder's, the start "
                  "token first)")
      ->required();
  cmd->add_option("-o,--out", args->out, "float32 little-endian logits [T, V]")->required();
  cmd->add_option("--source", args->source,
                  "an encoder-decoder's source: int32 little-endian ids (eos included)");
  cmd->add_option("--hidden-out", args->hidden_out,
                  "an encoder-decoder: its encoder's output [S, C], float32 little-endian");
  return {cmd, [args] { return logits(*args); }};
}

}  // namespace app
