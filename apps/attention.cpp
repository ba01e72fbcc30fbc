// gpt2vk attention: runs a prompt once with the attention tap on and shows what every head
// attends to: a page (-o), a JSON file (--json), or one head in the terminal.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "apps/attention_view.h"
#include "apps/commands.h"
#include "apps/encoder_session.h"
#include "apps/options.h"
#include "apps/seq2seq_session.h"
#include "apps/session.h"
#include "model/generation/generate.h"
#include "model/generation/seq2seq_generate.h"

namespace app {
namespace {

struct AttentionArgs {
  ModelArgs model;
  std::string prompt, file;
  std::string out;                // the HTML page
  std::string json;               // the weights and tokens as JSON
  std::optional<uint32_t> layer;  // only this layer (the terminal view: default 0)
  std::optional<uint32_t> head;   // only this head (the terminal view: default 0)
  // An encoder-decoder's: which attention (cross: the decoder's over the source; decoder: its
  // own, causal; encoder: the encoder's over the source), and the target its decoder reads (the
  // text, or empty: the greedy translation, at most max_new tokens, else as many as the
  // folder's generation_config.json allows).
  std::string part, target;  // part empty: cross
  std::optional<uint32_t> max_new;
};

// The most weights a page or JSON file takes: GPT-2 small's 12 x 12 heads over 256 tokens are
// 9.4 M (a 25 MB page); past 32 M a browser struggles, and a shorter prompt or --layer/--head
// says more anyway.
constexpr uint64_t kMaxWeights = uint64_t{32} << 20;

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(path + ": cannot write");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) throw std::runtime_error(path + ": cannot write (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot write");
  }
}

// Throws for a --layer or --head the model does not have.
void check_layer_head(const AttentionArgs& args, const model::Config& c) {
  if (args.layer && *args.layer >= c.n_layer)
    throw std::runtime_error("--layer " + std::to_string(*args.layer) + ": the model has " +
                             std::to_string(c.n_layer) + " layers (0.." +
                             std::to_string(c.n_layer - 1) + ")");
  if (args.head && *args.head >= c.n_head)
    throw std::runtime_error("--head " + std::to_string(*args.head) + ": the model has " +
                             std::to_string(c.n_head) + " heads (0.." +
                             std::to_string(c.n_head - 1) + ")");
}

bool files(const AttentionArgs& args) {
  return !args.out.empty() || !args.json.empty();
}

// The layers to tap: --layer's, else every one for a file; the terminal shows one head, so only
// its layer is tapped. Throws where the weights asked for (T queries over K keys) are more than
// a file takes.
std::optional<uint32_t> tapped_layer(const AttentionArgs& args, const model::Config& c,
                                     uint64_t T, uint64_t K) {
  const std::optional<uint32_t> only_layer =
      files(args) ? args.layer : args.layer.value_or(0);
  const uint64_t layers = only_layer ? 1 : c.n_layer;
  const uint64_t heads = args.head || !files(args) ? 1 : c.n_head;
  if (files(args) && layers * heads * T * K > kMaxWeights)
    throw std::runtime_error(
        std::to_string(layers) + " layers x " + std::to_string(heads) + " heads x " +
        std::to_string(T) + " x " + std::to_string(K) + " tokens are " +
        std::to_string(layers * heads * T * K) + " weights, over the " +
        std::to_string(kMaxWeights) +
        " a page or JSON file takes: choose one with --layer and/or --head, or a shorter prompt");
  return only_layer;
}

// The map's layers, heads and weights from a pass's tap ([layer][H, T, T]); then the page, the
// JSON and the terminal view, as asked.
int show(const AttentionArgs& args, AttentionMap& map, std::optional<uint32_t> only_layer,
         const std::vector<std::vector<float>>& probs) {
  const bool to_files = files(args);
  for (uint32_t l = 0; l < map.n_layer; l++)
    if (!only_layer || *only_layer == l) map.layers.push_back(l);
  for (uint32_t h = 0; h < map.n_head; h++)
    if ((to_files && !args.head) || h == args.head.value_or(0)) map.heads.push_back(h);
  const size_t TT = size_t(map.T()) * map.K();
  for (uint32_t l : map.layers) {
    const std::vector<float>& p = probs.at(l);  // [H, T, K]
    if (p.size() != map.n_head * TT)
      throw std::logic_error("the attention tap of layer " + std::to_string(l) + " is missing");
    for (uint32_t h : map.heads)
      map.probs.insert(map.probs.end(), p.data() + h * TT, p.data() + (h + 1) * TT);
  }

  if (!args.out.empty()) write_file(args.out, html_page(map));
  if (!args.json.empty()) write_file(args.json, to_json(map));
  if (args.out.empty()) std::fputs(text_view(map, 0, 0).c_str(), stdout);
  const std::string tokens = map.key_ids.empty() ? std::to_string(map.T()) + " tokens"
                                                 : std::to_string(map.T()) + " target x " +
                                                       std::to_string(map.K()) + " source tokens";
  std::fprintf(stderr, "attention: %s, %zu layer(s) x %zu head(s), %s, %s weights%s%s%s%s\n",
               tokens.c_str(), map.layers.size(), map.heads.size(), map.device.c_str(),
               map.precision.c_str(), args.out.empty() ? "" : "; page: ", args.out.c_str(),
               args.json.empty() ? "" : "; JSON: ", args.json.c_str());
  return 0;
}

// The map's header: the model, what ran it, and the tokens' ids (their text is the caller's).
AttentionMap start_map(const AttentionArgs& args, const std::string& text, const model::Config& c,
                       std::string device, model::Precision precision, bool causal,
                       std::vector<int32_t> ids) {
  AttentionMap map;
  map.model = model_dir(args.model).string();
  map.title = map.model + ": \"" + text.substr(0, 60) + (text.size() > 60 ? "...\"" : "\"");
  map.device = std::move(device);
  map.precision = model::precision_name(precision);
  map.n_layer = c.n_layer;
  map.n_head = c.n_head;
  map.causal = causal;
  map.ids = std::move(ids);
  return map;
}

// A decoder: the prompt's tokens, causal.
int decoder_attention(const AttentionArgs& args, const std::string& text) {
  Session s = open_checkpoint(args.model);
  const model::Config& c = s.checkpoint->config();
  check_layer_head(args, c);
  const std::vector<int32_t> ids = s.tokenizer->encode(text);
  model::check_prompt(c, ids.size());
  const std::optional<uint32_t> only_layer = tapped_layer(args, c, ids.size(), ids.size());

  open_model(s, args.model);
  s.model->set_attention_taps(true, only_layer);
  s.model->logits(ids);

  AttentionMap map = start_map(args, text, c, s.model->device_name(), s.model->precision(),
                               c.causal, ids);
  for (int32_t id : ids) map.tokens.push_back(display_token(s.tokenizer->token_bytes(id)));
  return show(args, map, only_layer, s.model->attention_probs());
}

// An encoder (BERT): [CLS] text [SEP] in WordPiece tokens, every token seeing every other.
int encoder_attention(const AttentionArgs& args, const std::string& text) {
  EncoderSession s = open_encoder(args.model);
  const model::Config& c = s.checkpoint->config();
  check_layer_head(args, c);
  const model::WordPieceEncoding e = encode_text(s, text, "the prompt");
  const std::optional<uint32_t> only_layer = tapped_layer(args, c, e.ids.size(), e.ids.size());
  s.encoder->set_attention_taps(true, only_layer);
  s.encoder->encode(e.ids, e.type_ids, false);

  AttentionMap map = start_map(args, text, c, s.encoder->device_name(), s.encoder->precision(),
                               false, e.ids);
  for (int32_t id : e.ids) map.tokens.push_back(display_token(s.wordpiece->token(id)));
  return show(args, map, only_layer, s.encoder->attention_probs());
}

// An encoder-decoder (Marian, T5): the source, and a target its decoder reads teacher-forced,
// the start token first: --target's ids, or the greedy translation's. A row of the decoder's
// maps is one of those inputs, the query that predicts the next target token. --part says
// which attention: cross (the decoder's over the source: target rows, source columns), decoder
// (its own, causal) or encoder (the encoder's over the source, bidirectional).
int seq2seq_attention(const AttentionArgs& args, const std::string& text) {
  Seq2SeqSession s = open_seq2seq(args.model);
  model::Seq2Seq& m = *s.model;
  const bool encoder = args.part == "encoder";
  const model::Config& c = encoder ? m.encoder().config() : m.decoder().config();
  check_layer_head(args, c);
  const std::vector<int32_t> source = encode_source(s, text, "the prompt");
  const auto piece = [](const model::SentencePieceTokenizer& t, int32_t id) {
    return display_token(t.piece(id));
  };
  if (encoder) {
    if (!args.target.empty() || args.max_new)
      throw std::runtime_error("--part encoder shows the encoder's attention over the source "
                               "alone: --target and -n are the decoder's");
    const std::optional<uint32_t> only_layer = tapped_layer(args, c, source.size(), source.size());
    m.encoder().set_attention_taps(true, only_layer);
    m.set_source(source);
    AttentionMap map = start_map(args, text, c, m.encoder().device_name(),
                                 m.encoder().precision(), false, source);
    for (int32_t id : source) map.tokens.push_back(piece(*s.source, id));
    return show(args, map, only_layer, m.encoder().attention_probs());
  }

  // The decoder's inputs: the start token, then the target but its last token (which no row
  // reads: the last row predicts it).
  std::vector<int32_t> target;
  if (!args.target.empty()) {
    target = s.target->encode(args.target);  // ends with </s>, as the model learned to
  } else {
    target = model::greedy(
        m, source, args.max_new.value_or(generation_config(model_dir(args.model)).max_new_tokens));
  }
  std::vector<int32_t> inputs{m.config().decoder_start_token_id.value_or(0)};
  inputs.insert(inputs.end(), target.begin(), target.end() - (target.empty() ? 0 : 1));
  if (inputs.size() > c.n_ctx)
    throw std::runtime_error("the target is " + std::to_string(target.size()) +
                             " tokens: the decoder reads at most " + std::to_string(c.n_ctx));
  const bool cross = args.part.empty() || args.part == "cross";
  const std::optional<uint32_t> only_layer =
      tapped_layer(args, c, inputs.size(), cross ? source.size() : inputs.size());
  m.set_source(source);  // the decoder's cache empty
  m.decoder().set_attention_taps(true, only_layer);
  m.decoder().logits(inputs);
  AttentionMap map = start_map(args, text, c, m.decoder().device_name(), m.decoder().precision(),
                               !cross, inputs);
  for (int32_t id : inputs) map.tokens.push_back(piece(*s.target, id));
  if (cross) {
    map.key_ids = source;
    for (int32_t id : source) map.key_tokens.push_back(piece(*s.source, id));
  }
  return show(args, map, only_layer,
              cross ? m.decoder().cross_attention_probs() : m.decoder().attention_probs());
}

int attention(const AttentionArgs& args) {
  const std::string text = read_text(args.prompt, args.file);
  const bool seq2seq = seq2seq_folder(args.model);
  if (!seq2seq && (!args.part.empty() || !args.target.empty()))
    throw std::runtime_error(std::string(args.part.empty() ? "--target" : "--part") +
                             " is an encoder-decoder's (a Marian or T5 folder)");
  if (seq2seq) return seq2seq_attention(args, text);
  return encoder_folder(args.model) ? encoder_attention(args, text)
                                    : decoder_attention(args, text);
}

}  // namespace

Command add_attention(CLI::App& cli) {
  auto args = std::make_shared<AttentionArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "attention",
      "run a prompt once and show every head's attention: a page, JSON, or one head here");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "the text to run");
  cmd->add_option("-f,--file", args->file, "read the text from a file");
  cmd->add_option("-o,--out", args->out,
                  "write a self-contained HTML page of every layer x head here (without it: "
                  "one head as text on stdout)");
  cmd->add_option("--json", args->json, "write the weights and tokens as JSON here");
  cmd->add_option("--layer", args->layer, "only this layer (0-based)")
      ->check(whole_number(0, UINT32_MAX));
  cmd->add_option("--head", args->head, "only this head (0-based)")
      ->check(whole_number(0, UINT32_MAX));
  cmd->add_option("--part", args->part,
                  "an encoder-decoder's attention to show: cross (the decoder's over the source, "
                  "default), decoder (its own) or encoder")
      ->check(CLI::IsMember({"cross", "decoder", "encoder"}));
  cmd->add_option("--target", args->target,
                  "an encoder-decoder's target, which its decoder reads after the start token "
                  "(default: the greedy translation of the prompt)");
  cmd->add_option("-n,--max-new", args->max_new,
                  "without --target, the greedy translation's most tokens (default: the folder's "
                  "generation_config.json)")
      ->check(whole_number(1, 1u << 20));
  return {cmd, [args] { return attention(*args); }};
}

}  // namespace app
