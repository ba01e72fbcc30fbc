// The encoder commands (a BERT folder): embed (sentence embeddings as sentence-transformers
// computes them), fill-mask (the masked-LM head) and classify (a sequence or token classifier).
// Each text is tokenized by the folder's WordPiece vocabulary and encoded whole, one sequence at
// a time (model/forward/encoder.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/encoder_session.h"
#include "apps/session.h"
#include "model/ops/cpu/topk.h"
#include "model/text/wordpiece.h"

namespace app {
namespace {

// Where each text came from, for notes: "the prompt" or "FILE:LINE".
std::string where(const std::string& file, size_t i) {
  return file.empty() ? "the prompt" : file + ":" + std::to_string(i + 1);
}

std::vector<double> softmax(std::span<const float> logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); i++) sum += p[i] = std::exp(double{logits[i]} - top);
  for (double& v : p) v /= sum;
  return p;
}

// Writes `bytes` to a temporary beside `path`, then renames it: never a half-written file.
void write_whole(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error(path + ": cannot write");
  }
  std::filesystem::rename(tmp, path);
}

// ---- embed

struct EmbedArgs {
  ModelArgs model;
  std::string prompt, file, out;
  std::string pooling;  // mean | cls; "" = the folder's 1_Pooling/config.json, else mean
  bool normalize = false, similarity = false;
  uint32_t batch = 32;  // sentences per pass (sentence-transformers' default batch_size)
};

int embed(EmbedArgs args) {
  const std::vector<std::string> texts = read_texts(args.prompt, args.file);
  if (!args.out.empty() && !args.out.ends_with(".npy") && !args.out.ends_with(".json"))
    throw std::runtime_error(args.out + ": -o writes .npy (float32 [texts, C]) or .json");
  if (args.batch < 1) throw std::runtime_error("--batch 0: a pass holds at least one text");
  args.model.encoder_batch = args.batch;
  EncoderSession s = open_encoder(args.model);
  const Pooling pooling = folder_pooling(s.checkpoint->dir(), {args.pooling, args.normalize});
  const uint32_t C = s.checkpoint->config().n_embd;
  std::vector<float> all;  // [texts, C]
  size_t tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  // The texts in groups of --batch, each group's passes as the encoder packs them.
  std::vector<model::WordPieceEncoding> group;
  std::vector<model::EncoderInput> inputs;
  for (size_t first = 0; first < texts.size(); first += args.batch) {
    group.clear();
    inputs.clear();
    for (size_t i = first; i < std::min(texts.size(), first + args.batch); i++)
      group.push_back(encode_text(s, texts[i], where(args.file, i)));
    for (const model::WordPieceEncoding& e : group) inputs.push_back({e.ids, e.type_ids});
    const std::vector<std::vector<float>> hidden = s.encoder->encode_batch(inputs);
    for (size_t i = 0; i < group.size(); i++) {
      tokens += group[i].ids.size();
      const std::vector<float> v = pool(hidden[i], group[i].ids.size(), C, pooling);
      all.insert(all.end(), v.begin(), v.end());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (args.similarity) {
    for (size_t i = 0; i < texts.size(); i++) {
      for (size_t j = 0; j < texts.size(); j++) {
        double dot = 0, a = 0, b = 0;
        for (uint32_t c = 0; c < C; c++) {
          dot += double{all[i * C + c]} * double{all[j * C + c]};
          a += double{all[i * C + c]} * double{all[i * C + c]};
          b += double{all[j * C + c]} * double{all[j * C + c]};
        }
        std::printf(j ? " %.4f" : "%.4f", dot / std::sqrt(a * b));
      }
      std::printf("\n");
    }
  } else if (args.out.empty()) {
    for (size_t i = 0; i < texts.size(); i++)
      for (uint32_t c = 0; c < C; c++) std::printf(c + 1 < C ? "%.7g " : "%.7g\n", double{all[i * C + c]});
  }
  if (args.out.ends_with(".npy")) {
    // NumPy's format 1.0: magic, version, a header padded to 64 bytes, then the data.
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                         std::to_string(texts.size()) + ", " + std::to_string(C) + "), }";
    header.append(64 - (10 + header.size() + 1) % 64, ' ');
    header += '\n';
    std::string bytes = "\x93NUMPY\x01";
    bytes += '\0';
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    bytes += header;
    bytes.append(reinterpret_cast<const char*>(all.data()), all.size() * 4);
    write_whole(args.out, bytes);
  } else if (args.out.ends_with(".json")) {
    nlohmann::json j;
    j["pooling"] = pooling.mode;
    j["normalized"] = pooling.normalize;
    j["embeddings"] = nlohmann::json::array();
    for (size_t i = 0; i < texts.size(); i++)
      j["embeddings"].push_back(std::vector<float>(all.begin() + static_cast<long>(i * C),
                                                   all.begin() + static_cast<long>((i + 1) * C)));
    write_whole(args.out, j.dump() + "\n");
  }
  if (!args.out.empty())
    std::fprintf(stderr, "gpt2vk: %zu embeddings of %u written to %s (%s pooling%s; %s)\n",
                 texts.size(), C, args.out.c_str(), pooling.mode.c_str(),
                 pooling.normalize ? ", normalized" : "",
                 s.encoder->device_name().c_str());
  // Tokenizing and encoding, after the model loaded (the first text's pipelines compile in it).
  std::fprintf(stderr, "gpt2vk: %zu text%s, %zu tokens in %.3f s: %.0f tokens/s\n",
               texts.size(), texts.size() == 1 ? "" : "s", tokens, seconds,
               double(tokens) / seconds);
  return 0;
}

// ---- fill-mask

struct FillMaskArgs {
  ModelArgs model;
  std::string prompt;
  uint32_t top_k = 5;
};

int fill_mask(const FillMaskArgs& args) {
  const std::string text = read_text(args.prompt, "");
  EncoderSession s = open_encoder(args.model);
  const model::Config& c = s.checkpoint->config();
  if (c.head != model::EncoderHead::MaskedLm)
    throw std::runtime_error(s.checkpoint->dir().string() + ": a " + model::encoder_head_name(c.head) +
                             ", without the masked-LM head fill-mask needs (BertForMaskedLM)");
  const auto mask = s.wordpiece->mask();
  if (!mask) throw std::runtime_error(s.checkpoint->dir().string() + ": the vocabulary has no " +
                                      s.wordpiece->options().mask + " token");
  const model::WordPieceEncoding e = encode_text(s, text, "the prompt");
  std::vector<size_t> masks;
  for (size_t t = 0; t < e.ids.size(); t++)
    if (e.ids[t] == *mask) masks.push_back(t);
  if (masks.empty())
    throw std::runtime_error("the prompt has no " + s.wordpiece->options().mask +
                             " token to fill (e.g. \"Paris is the " + s.wordpiece->options().mask +
                             " of France.\")");
  if (args.top_k == 0) throw std::runtime_error("--top-k must be at least 1");
  const model::Encoded out = s.encoder->encode(e.ids, e.type_ids);
  const uint32_t V = c.n_vocab, k = std::min(args.top_k, V);
  for (size_t m = 0; m < masks.size(); m++) {
    const std::span<const float> row = std::span(out.logits).subspan(masks[m] * V, V);
    const std::vector<double> p = softmax(row);
    std::vector<int32_t> ids(k);  // the best k, ties to the lower id, as the sampler's top-k
    std::vector<float> best(k);
    model::cpu::topk(ids.data(), best.data(), row.data(), V, k);
    if (masks.size() > 1) std::printf("%s %zu (token %zu):\n", s.wordpiece->options().mask.c_str(), m + 1, masks[m]);
    for (uint32_t i = 0; i < k; i++) {
      const auto id = static_cast<size_t>(ids[i]);
      const std::string token =
          id < s.wordpiece->size() ? s.wordpiece->token(ids[i]) : "<id " + std::to_string(id) + ">";
      std::printf("%s%-16s %.4f\n", masks.size() > 1 ? "  " : "", token.c_str(), p[id]);
    }
  }
  return 0;
}

// ---- classify

struct ClassifyArgs {
  ModelArgs model;
  std::string prompt, file;
};

int classify(const ClassifyArgs& args) {
  const std::vector<std::string> texts = read_texts(args.prompt, args.file);
  EncoderSession s = open_encoder(args.model);
  const model::Config& c = s.checkpoint->config();
  const bool tokens = c.head == model::EncoderHead::TokenClassification;
  if (c.head != model::EncoderHead::SequenceClassification && !tokens)
    throw std::runtime_error(s.checkpoint->dir().string() + ": a " + model::encoder_head_name(c.head) +
                             ", without a classifier (BertForSequenceClassification or "
                             "BertForTokenClassification)");
  const size_t L = c.labels.size();
  for (size_t i = 0; i < texts.size(); i++) {
    const model::WordPieceEncoding e = encode_text(s, texts[i], where(args.file, i));
    const model::Encoded out = s.encoder->encode(e.ids, e.type_ids);
    if (!tokens) {  // the labels, best first, with their probabilities
      const std::vector<double> p = softmax(out.logits);
      std::vector<size_t> order(L);
      for (size_t l = 0; l < L; l++) order[l] = l;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
      for (size_t l = 0; l < L; l++)
        std::printf(l ? "  %s %.4f" : "%s %.4f", c.labels[order[l]].c_str(), p[order[l]]);
      std::printf("\n");
      continue;
    }
    // A label per word: a word's pieces joined, labelled by its first piece (the "first"
    // aggregation), [CLS] and [SEP] left out.
    std::string line;
    for (size_t t = 1; t + 1 < e.ids.size(); t++) {
      const std::string& piece = s.wordpiece->token(e.ids[t]);
      const std::string& prefix = s.wordpiece->options().prefix;
      if (piece.starts_with(prefix) && !line.empty()) {
        const size_t slash = line.rfind('/');
        line.insert(slash, piece.substr(prefix.size()));
        continue;
      }
      const std::vector<double> p = softmax(std::span(out.logits).subspan(t * L, L));
      const size_t best = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
      line += (line.empty() ? "" : " ") + piece + "/" + c.labels[best];
    }
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace

Command add_embed(CLI::App& cli) {
  auto args = std::make_shared<EmbedArgs>();
  CLI::App* cmd = cli.add_subcommand("embed", "sentence embeddings from a BERT folder");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "one text");
  cmd->add_option("-f,--file", args->file, "texts, one per line");
  cmd->add_option("--pooling", args->pooling,
                  "mean | cls (default: the folder's 1_Pooling/config.json, else mean)");
  cmd->add_flag("--normalize", args->normalize,
                "unit length (the default where modules.json lists Normalize)");
  cmd->add_flag("--similarity", args->similarity, "print the texts' cosine similarity matrix");
  cmd->add_option("-o,--out", args->out, "write .npy (float32 [texts, C]) or .json");
  cmd->add_option("--batch", args->batch,
                  "texts per GPU pass, each padded to the pass's longest (default 32)");
  return {cmd, [args] { return embed(*args); }};
}

Command add_fill_mask(CLI::App& cli) {
  auto args = std::make_shared<FillMaskArgs>();
  CLI::App* cmd = cli.add_subcommand("fill-mask", "the likeliest tokens for each [MASK]");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "a text with [MASK] in it")->required();
  cmd->add_option("--top-k", args->top_k, "tokens per mask (default 5)");
  return {cmd, [args] { return fill_mask(*args); }};
}

Command add_classify(CLI::App& cli) {
  auto args = std::make_shared<ClassifyArgs>();
  CLI::App* cmd = cli.add_subcommand("classify", "labels of texts (or of their words)");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "one text");
  cmd->add_option("-f,--file", args->file, "texts, one per line");
  return {cmd, [args] { return classify(*args); }};
}

}  // namespace app
