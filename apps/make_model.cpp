// gpt2vk make-model: a checkpoint of a published GPT-2 (or BERT, Marian, T5) shape with random
// weights, in the published layout, with a tokenizer: benchmarks and large-model tests need no
// download.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <unistd.h>

#include "apps/commands.h"
#include "apps/options.h"
#include "apps/shipped.h"
#include "model/formats/config.h"
#include "model/formats/random_checkpoint.h"
#include "model/text/sentencepiece.h"

namespace app {
namespace {

struct MakeModelArgs {
  std::string arch = "gpt2";    // gpt2 | bert | marian | t5
  std::string shape;            // gpt2: tiny | small | medium | large | xl (default small);
                                // bert: tiny | minilm | base | large (default base);
                                // marian: tiny | base (opus-mt's, the default);
                                // t5: tiny | tiny-gated | tiny-narrow | tiny-wide | small |
                                // small-gated | v1_1-small (default small)
  std::string spm;              // marian, t5: the SentencePiece model
  std::string head = "mlm";     // bert: none | mlm | seqcls | tokcls
  std::string dtype = "f16";    // f32 | f16 | bf16
  std::string out;
  uint64_t seed = 1;
};

// The weights' dtype and seed as the flags give them.
model::RandomCheckpointOptions random_options(const MakeModelArgs& args) {
  model::RandomCheckpointOptions o;
  o.dtype = args.dtype == "f32"    ? model::TensorDType::F32
            : args.dtype == "bf16" ? model::TensorDType::BF16
                                   : model::TensorDType::F16;
  o.seed = args.seed;
  return o;
}

// BERT's vocabulary layout (bert-base-uncased: 30,522 tokens, [PAD] 0, [UNK] 100, [CLS] 101,
// [SEP] 102, [MASK] 103, [unusedN] fillers), here with printable ASCII and its "##"
// continuations as the only real tokens: enough for any ASCII text, a character at a time.
std::string bert_vocab(uint32_t V) {
  std::vector<std::string> v(V);
  const std::pair<uint32_t, const char*> special[] = {
      {0, "[PAD]"}, {100, "[UNK]"}, {101, "[CLS]"}, {102, "[SEP]"}, {103, "[MASK]"}};
  for (const auto& [id, t] : special) v.at(id) = t;
  uint32_t next = 104;
  for (const char* prefix : {"", "##"})
    for (char c = '!'; c <= '~'; c++)
      if (!(c >= 'A' && c <= 'Z')) v.at(next++) = prefix + std::string(1, c);  // uncased
  uint32_t unused = 0;
  std::string out;
  for (std::string& t : v) out += (t.empty() ? "[unused" + std::to_string(unused++) + "]" : t) + "\n";
  return out;
}

int make_bert(const MakeModelArgs& args) {
  struct Shape {
    uint32_t n_embd, n_layer, n_head;
  };
  const std::map<std::string, Shape> shapes = {{"tiny", {128, 2, 2}},
                                               {"minilm", {384, 6, 12}},  // all-MiniLM-L6-v2's
                                               {"base", {768, 12, 12}},
                                               {"large", {1024, 24, 16}}};
  const std::string name = args.shape.empty() ? "base" : args.shape;
  const auto it = shapes.find(name);
  if (it == shapes.end())
    throw std::runtime_error("unknown BERT shape '" + name + "' (tiny, minilm, base, large)");
  model::Config c;
  c.family = model::Family::Encoder;
  c.n_vocab = 30522, c.n_ctx = 512, c.n_types = 2, c.pad_token_id = 0;
  c.n_embd = it->second.n_embd, c.n_layer = it->second.n_layer, c.n_head = it->second.n_head;
  c.n_inner = 4 * c.n_embd;
  c.layer_norm_epsilon = 1e-12f;
  c.activation = model::Activation::GeluErf;
  c.pre_norm = false, c.final_norm = false, c.causal = false, c.embedding_norm = true;
  c.tokenizer.kind = model::TokenizerKind::WordPiece;
  const std::map<std::string, model::EncoderHead> heads = {
      {"none", model::EncoderHead::None},
      {"mlm", model::EncoderHead::MaskedLm},
      {"seqcls", model::EncoderHead::SequenceClassification},
      {"tokcls", model::EncoderHead::TokenClassification}};
  c.head = heads.at(args.head);
  if (c.head == model::EncoderHead::SequenceClassification) c.labels = {"NEGATIVE", "POSITIVE"};
  if (c.head == model::EncoderHead::TokenClassification) c.labels = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"};

  model::RandomCheckpointOptions o = random_options(args);
  o.scale = 1.0f / std::sqrt(float(c.n_embd));  // activations of order 1, as a trained model's
  const std::filesystem::path dir = args.out;
  std::filesystem::create_directories(dir);
  model::write_random_checkpoint(dir, c, model::config_json(c), o);
  std::ofstream vocab(dir / "vocab.txt", std::ios::binary | std::ios::trunc);
  vocab << bert_vocab(c.n_vocab);
  if (!vocab) throw std::runtime_error((dir / "vocab.txt").string() + ": cannot write");
  std::fprintf(stderr, "gpt2vk: wrote %s: BERT %s shape (%u layers, width %u, %u heads), %s, %s, seed %llu\n",
               dir.c_str(), name.c_str(), c.n_layer, c.n_embd, c.n_head,
               model::encoder_head_name(c.head), args.dtype.c_str(),
               static_cast<unsigned long long>(args.seed));
  return 0;
}

// The SentencePiece model --spm names, or the one tests/data/spm ships.
std::filesystem::path spm_model(const MakeModelArgs& args) {
  if (!args.spm.empty()) return args.spm;
  const auto shipped = find_shipped("tests/data/spm/unigram.model");
  if (!shipped)
    throw std::runtime_error("--arch " + args.arch + " needs a SentencePiece model: give one with --spm");
  return *shipped;
}

// A SentencePiece model file read as T5's tokenizer reads spiece.model (its pieces, then the
// 100 <extra_id_k> sentinels), through a folder of its own that is removed after.
std::unique_ptr<model::SentencePieceTokenizer> t5_tokenizer(const std::filesystem::path& spm) {
  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / ("gpt2vk-spm-" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  std::filesystem::copy_file(spm, tmp / "spiece.model", std::filesystem::copy_options::overwrite_existing);
  std::unique_ptr<model::SentencePieceTokenizer> t;
  try {
    t = model::load_sentencepiece(tmp, model::SpmFlavor::T5);
  } catch (...) {
    std::filesystem::remove_all(tmp);
    throw;
  }
  std::filesystem::remove_all(tmp);
  return t;
}

// Marian's vocab.json over a SentencePiece model's pieces, in Marian's order: "</s>" 0, "<unk>"
// 1, the pieces, "<unusedN>" fillers, "<pad>" last (V - 1, also the decoder's start).
nlohmann::json marian_vocab(const std::filesystem::path& spm, uint32_t V) {
  const auto t = t5_tokenizer(spm);
  nlohmann::json vocab = {{"</s>", 0}, {"<unk>", 1}};
  for (int32_t id = 0; id + 100 < static_cast<int32_t>(t->vocab_size()) && vocab.size() + 1 < V; id++) {
    const std::string p = t->piece(id);
    if (p.front() != '<' && !vocab.contains(p)) vocab[p] = vocab.size();
  }
  for (uint32_t filler = 0; vocab.size() + 1 < V; filler++)
    vocab["<unused" + std::to_string(filler) + ">"] = vocab.size();
  vocab["<pad>"] = V - 1;
  return vocab;
}

int make_marian(const MakeModelArgs& args) {
  struct Shape {
    uint32_t n_embd, layers, n_head, V;
  };
  // opus-mt-en-de's (d_model 512, 6 + 6 layers, 8 heads, F 2048, 58,101 tokens), and a tiny one.
  const std::map<std::string, Shape> shapes = {{"tiny", {64, 2, 4, 4096}},
                                               {"base", {512, 6, 8, 58101}}};
  const std::string name = args.shape.empty() ? "base" : args.shape;
  const auto it = shapes.find(name);
  if (it == shapes.end()) throw std::runtime_error("unknown Marian shape '" + name + "' (tiny, base)");
  const Shape& s = it->second;
  const std::filesystem::path spm = spm_model(args);
  const model::Config c = model::marian_config(s.n_embd, s.layers, s.n_head, s.V);
  const nlohmann::json vocab = marian_vocab(spm, c.n_vocab);
  model::RandomCheckpointOptions o = random_options(args);
  o.scale = 1.0f / std::sqrt(float(c.n_embd));  // activations of order 1, as a trained model's
  const std::filesystem::path dir = args.out;
  std::filesystem::create_directories(dir);
  model::write_random_checkpoint(dir, c, model::config_json(c), o);
  for (const char* side : {"source.spm", "target.spm"})
    std::filesystem::copy_file(spm, dir / side, std::filesystem::copy_options::overwrite_existing);
  std::ofstream out(dir / "vocab.json", std::ios::binary | std::ios::trunc);
  out << vocab.dump(1) << "\n";
  if (!out) throw std::runtime_error((dir / "vocab.json").string() + ": cannot write");
  std::fprintf(stderr, "gpt2vk: wrote %s: Marian %s shape (%u + %u layers, width %u, %u heads, %u tokens), %s, seed %llu\n",
               dir.c_str(), name.c_str(), c.n_encoder_layer, c.n_layer, c.n_embd, c.n_head,
               c.n_vocab, args.dtype.c_str(), static_cast<unsigned long long>(args.seed));
  return 0;
}

int make_t5(const MakeModelArgs& args) {
  struct Shape {
    uint32_t n_embd, n_inner, layers, n_head;
    bool gated;
    uint32_t d_kv = 0;  // each head's width; 0: n_embd / n_head
  };
  // t5-small's (d_model 512, d_ff 2048, 6 + 6 layers, 8 heads; v1.0: ReLU, tied head), the
  // same with v1.1's gated GELU and untied head, t5-v1_1-small's and flan-t5-small's (d_ff
  // 1024, 8 + 8 layers, 6 heads of 64: attention 384 wide in a 512-wide model), and tiny ones,
  // two with attention narrower (4 heads of 8 in 64) and wider (4 heads of 32) than the model.
  // The vocabulary is the SentencePiece model's with T5's 100 sentinels (t5-small's is 32,128).
  const std::map<std::string, Shape> shapes = {{"tiny", {64, 128, 2, 4, false}},
                                               {"tiny-gated", {64, 128, 2, 4, true}},
                                               {"tiny-narrow", {64, 128, 2, 4, true, 8}},
                                               {"tiny-wide", {64, 128, 2, 4, true, 32}},
                                               {"small", {512, 2048, 6, 8, false}},
                                               {"small-gated", {512, 2048, 6, 8, true}},
                                               {"v1_1-small", {512, 1024, 8, 6, true, 64}}};
  const std::string name = args.shape.empty() ? "small" : args.shape;
  const auto it = shapes.find(name);
  if (it == shapes.end())
    throw std::runtime_error("unknown T5 shape '" + name +
                             "' (tiny, tiny-gated, tiny-narrow, tiny-wide, small, small-gated, "
                             "v1_1-small)");
  const Shape& s = it->second;
  const std::filesystem::path spm = spm_model(args);
  const model::Config c = model::t5_config(s.n_embd, s.n_inner, s.layers, s.n_head,
                                           t5_tokenizer(spm)->vocab_size(), s.gated, s.d_kv);
  model::RandomCheckpointOptions o = random_options(args);
  o.scale = 1.0f / std::sqrt(float(c.n_embd));  // activations of order 1, as a trained model's
  const std::filesystem::path dir = args.out;
  std::filesystem::create_directories(dir);
  model::write_random_checkpoint(dir, c, model::config_json(c), o);
  std::filesystem::copy_file(spm, dir / "spiece.model", std::filesystem::copy_options::overwrite_existing);
  std::fprintf(stderr, "gpt2vk: wrote %s: T5 %s shape (%u + %u layers, width %u, %u heads of %u, %u tokens), %s, seed %llu\n",
               dir.c_str(), name.c_str(), c.n_encoder_layer, c.n_layer, c.n_embd, c.n_head,
               c.head_dim(), c.n_vocab, args.dtype.c_str(), static_cast<unsigned long long>(args.seed));
  return 0;
}

int make_model(const MakeModelArgs& args) {
  if (args.arch == "bert") return make_bert(args);
  if (args.arch == "marian") return make_marian(args);
  if (args.arch == "t5") return make_t5(args);
  if (args.head != "mlm") throw std::runtime_error("--head is for --arch bert");
  struct Shape {
    uint32_t n_embd, n_layer, n_head;
  };
  // GPT-2's four published sizes, and a small one of width 128 for quick runs.
  const std::map<std::string, Shape> shapes = {{"tiny", {128, 4, 4}},     {"small", {768, 12, 12}},
                                               {"medium", {1024, 24, 16}}, {"large", {1280, 36, 20}},
                                               {"xl", {1600, 48, 25}}};
  const std::string name = args.shape.empty() ? "small" : args.shape;
  const auto it = shapes.find(name);
  if (it == shapes.end())
    throw std::runtime_error("unknown GPT-2 shape '" + name + "' (tiny, small, medium, large, xl)");
  const model::Config c = model::gpt2_config(it->second.n_embd, it->second.n_layer, it->second.n_head);

  const model::RandomCheckpointOptions o = random_options(args);
  const std::filesystem::path dir = args.out;
  std::filesystem::create_directories(dir);
  model::write_random_checkpoint(dir, c, model::config_json(c), o);
  const std::optional<std::filesystem::path> vocab = find_shipped("data/gpt2/vocab.json");
  if (!vocab)
    throw std::runtime_error("GPT-2's tokenizer files are not found (" +
                             shipped_missing("data/gpt2") + ")");
  const std::filesystem::path data = vocab->parent_path();
  for (const char* f : {"vocab.json", "merges.txt"})
    std::filesystem::copy_file(data / f, dir / f, std::filesystem::copy_options::overwrite_existing);
  std::fprintf(stderr, "gpt2vk: wrote %s: GPT-2 %s shape (%u layers, width %u, %u heads), %s, seed %llu\n",
               dir.c_str(), name.c_str(), c.n_layer, c.n_embd, c.n_head, args.dtype.c_str(),
               static_cast<unsigned long long>(args.seed));
  return 0;
}

}  // namespace

Command add_make_model(CLI::App& cli) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "make-model", "write a random-weight checkpoint of a GPT-2, BERT, Marian or T5 shape, with a tokenizer");
  cmd->add_option("--arch", args->arch, "gpt2 (default), bert, marian or t5")
      ->check(CLI::IsMember({"gpt2", "bert", "marian", "t5"}));
  cmd->add_option("--shape", args->shape,
                  "gpt2: tiny (4 layers, width 128), small (124M, default), medium, large, xl "
                  "(1.5B); bert: tiny, minilm (MiniLM-L6), base (default), large; marian: tiny, "
                  "base (opus-mt's, default); t5: tiny, tiny-gated, tiny-narrow and tiny-wide "
                  "(attention narrower and wider than the model), small (t5-small's, default), "
                  "small-gated (v1.1's gated GELU), v1_1-small (t5-v1_1-small's and "
                  "flan-t5-small's: 6 heads of 64 in 512)")
      ->check(CLI::IsMember({"tiny", "small", "medium", "large", "xl", "minilm", "base",
                             "tiny-gated", "small-gated", "tiny-narrow", "tiny-wide",
                             "v1_1-small"}));
  cmd->add_option("--spm", args->spm,
                  "marian, t5: the SentencePiece model (default: tests/data/spm's)");
  cmd->add_option("--head", args->head, "bert: none, mlm (default), seqcls, tokcls")
      ->check(CLI::IsMember({"none", "mlm", "seqcls", "tokcls"}));
  cmd->add_option("--dtype", args->dtype, "stored dtype (default f16)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("-o,--out", args->out, "the folder to write")->required();
  cmd->add_option("-s,--seed", args->seed, "seed of the weights")
      ->check(whole_number(0, UINT64_MAX));
  return {cmd, [args] { return make_model(*args); }};
}

}  // namespace app
