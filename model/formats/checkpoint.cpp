// A Hugging Face GPT-2 folder: the tensors config.json implies, checked against
// model.safetensors all at once so that one error lists everything that does not fit.
#include "model/formats/checkpoint.h"

#include <map>
#include <stdexcept>

#include "model/formats/bert_tensors.h"
#include "model/formats/seq2seq_tensors.h"
#include "model/formats/json_util.h"
#include "model/formats/relative_bias.h"

namespace model {

using json_util::shape_str;
using json_util::show;

std::vector<ExpectedTensor> expected_tensors(const Config& c) {
  const uint64_t C = c.n_embd, A = c.attn_width(), V = c.n_vocab, F = c.n_inner;
  std::vector<ExpectedTensor> out;
  if (c.family == Family::EncoderDecoder) {  // the encoder's under "enc.", the shared wte once
    for (ExpectedTensor& e : expected_tensors(encoder_side(c)))
      if (e.name != "wte.weight") {
        e.name = "enc." + e.name;
        out.push_back(std::move(e));
      }
    for (ExpectedTensor& e : expected_tensors(decoder_side(c))) out.push_back(std::move(e));
    return out;
  }
  auto add = [&](std::string name, std::vector<uint64_t> shape) {
    out.push_back({std::move(name), std::move(shape)});
  };
  auto add_norm = [&](const std::string& name) {
    add(name + ".weight", {C});
    if (c.layer_norm != model::LayerNormKind::Rms) add(name + ".bias", {C});  // RMSNorm has none
  };
  // Conv1D: weight [in, out], y = x W + b.
  auto add_linear = [&](const std::string& name, uint64_t in, uint64_t out_dim, bool bias) {
    add(name + ".weight", {in, out_dim});
    if (bias) add(name + ".bias", {out_dim});
  };
  add("wte.weight", {V, C});
  if (c.positions == model::PositionKind::Learned) add("wpe.weight", {c.n_ctx, C});
  if (c.n_types) add("wtt.weight", {c.n_types, C});
  if (c.embedding_norm) add_norm("ln_e");
  if (c.relative_buckets)
    out.push_back({kRelativeBias, {c.n_head, relative_bias_span(c)},
                   uint64_t{c.relative_buckets} * c.n_head});
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    if (!c.attention_only) add_norm(h + "ln_1");
    // Attention A wide (Config::n_attn): q, k, v [C] -> [A], the output [A] -> [C].
    add_linear(h + "attn.c_attn", C, 3 * A, c.attention_bias);
    add_linear(h + "attn.c_proj", A, C, c.attention_bias);
    if (c.attention_only) continue;
    if (c.cross_attention) {
      add_norm(h + "ln_x");
      for (const char* name : {"cross.c_q", "cross.c_k", "cross.c_v"})
        add_linear(h + name, C, A, c.attention_bias);
      add_linear(h + "cross.c_proj", A, C, c.attention_bias);
    }
    add_norm(h + "ln_2");
    add_linear(h + "mlp.c_fc", C, c.gated_mlp ? 2 * F : F, c.mlp_bias);  // gated: act, gate
    add_linear(h + "mlp.c_proj", F, C, c.mlp_bias);
  }
  if (c.final_norm) add_norm("ln_f");
  const uint64_t L = c.labels.size();
  switch (c.family == Family::Encoder ? c.head : EncoderHead::MaskedLm) {
    case EncoderHead::None: break;
    case EncoderHead::MaskedLm:  // (an encoder's transform first)
      if (c.family == Family::Encoder) {
        add_linear("mlm.dense", C, C, true);
        add_norm("mlm.ln");
        add("mlm.bias", {V});
      }
      if (!c.tie_word_embeddings) add("lm_head.weight", {V, C});
      if (c.logits_bias && c.family == Family::Decoder) add("head.bias", {V});
      break;
    case EncoderHead::SequenceClassification:
      add_linear("pooler", C, C, true);
      add_linear("classifier", C, L, true);
      break;
    case EncoderHead::TokenClassification:
      add_linear("classifier", C, L, true);
      break;
  }
  return out;
}

uint64_t ExpectedTensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t parameter_count(const Config& config) {
  uint64_t n = 0;
  for (const ExpectedTensor& t : expected_tensors(config)) n += t.learned ? t.learned : t.elements();
  return n;
}

namespace {

// h.{i}.attn.bias and h.{i}.attn.masked_bias: the causal-mask buffers older transformers saved.
bool is_mask_buffer(std::string_view name) {
  if (!name.starts_with("h.")) return false;
  name.remove_prefix(2);
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits == 0) return false;
  name.remove_prefix(digits);
  return name == ".attn.bias" || name == ".attn.masked_bias";
}

constexpr size_t kMaxListed = 20;  // problems named in one error; the rest are counted
// "<file>: N tensor(s) <what>: " and the first kMaxListed problems, the rest counted.
std::string listed(const std::string& file, const std::vector<std::string>& problems,
                   const char* what) {
  std::string msg = file + ": " + std::to_string(problems.size()) + " tensor(s) " + what + ": ";
  for (size_t i = 0; i < problems.size() && i < kMaxListed; ++i)
    msg += (i ? "; " : "") + problems[i];
  if (problems.size() > kMaxListed)
    msg += "; and " + std::to_string(problems.size() - kMaxListed) + " more";
  return msg;
}

constexpr const char* kFolder =
    "a model folder holds config.json and model.safetensors, as Hugging Face publishes them";

// What to do about a missing folder: the two ways to get one, at the path the user gave.
std::string get_one(const std::filesystem::path& dir) {
  return "; scripts/download_gpt2.sh gpt2 " + dir.string() +
         " fetches GPT-2 from Hugging Face, and gpt2vk make-model --shape small -o " +
         dir.string() + " writes one with random weights";
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::load(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw std::runtime_error(dir.string() + ": not a folder (" + kFolder + ")" + get_one(dir));
  for (const char* name : {"config.json", "model.safetensors"}) {
    if (std::filesystem::exists(dir / name, ec)) continue;
    // Older downloads carry only PyTorch's pickle, which this engine does not read.
    const bool pickle = std::filesystem::exists(dir / "pytorch_model.bin", ec);
    throw std::runtime_error(dir.string() + ": no " + name + " in this folder (" + kFolder + ")" +
                             (pickle && name == std::string_view("model.safetensors")
                                  ? "; pytorch_model.bin is not read: fetch model.safetensors, "
                                    "e.g. with scripts/download_gpt2.sh"
                                  : get_one(dir)));
  }
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir;
  ck->config_ = load_config(dir / "config.json");
  ck->file_ = SafeTensors::open(dir / "model.safetensors");
  const std::string file = ck->file_->path().string();
  if (ck->config_.family == Family::Encoder) {
    ck->load_converted(bert_tensors(*ck->file_, ck->config_), "a BERT folder");
    return ck;
  }
  if (ck->config_.family == Family::EncoderDecoder) {
    ck->load_converted(seq2seq_tensors(*ck->file_, ck->config_),
                       ck->config_.relative_buckets ? "a T5 folder" : "a Marian folder");
    return ck;
  }

  // Canonical names: GPT2LMHeadModel saves the body as "transformer.*".
  std::map<std::string, const TensorView*, std::less<>> present;
  for (const TensorView& t : ck->file_->tensors()) {
    std::string_view name = t.name;
    if (name.starts_with("transformer.")) name.remove_prefix(12);
    if (!present.emplace(name, &t).second)
      throw std::runtime_error(file + ": " + show(name) +
                               ": stored twice, with and without the \"transformer.\" prefix");
  }

  std::map<std::string, std::string, std::less<>> other;  // canonical name -> unsupported dtype
  for (const SafeTensors::Unsupported& t : ck->file_->unsupported()) {
    std::string_view name = t.name;
    if (name.starts_with("transformer.")) name.remove_prefix(12);
    other.emplace(name, t.dtype);
  }

  std::vector<std::string> problems;
  for (const ExpectedTensor& e : expected_tensors(ck->config_)) {
    const auto it = present.find(e.name);
    if (it == present.end()) {
      const auto o = other.find(e.name);
      problems.push_back(o == other.end() ? "missing " + e.name + " " + shape_str(e.shape)
                                          : e.name + ": unsupported dtype " + o->second +
                                                " (supported: F32, F16, BF16)");
      if (o != other.end()) other.erase(o);
      continue;
    }
    if (it->second->shape != e.shape)
      problems.push_back(e.name + ": shape " + shape_str(it->second->shape) +
                         " but the config implies " + shape_str(e.shape));
    ck->by_name_.emplace_back(e.name, it->second);
    present.erase(it);
  }
  if (!problems.empty())
    throw std::runtime_error(listed(file, problems, "do not match config.json"));

  for (const auto& [name, dtype] : other)
    if (!is_mask_buffer(name))
      ck->warnings_.push_back(file + ": " + show(name) + ": not used by this config, ignored (" +
                              dtype + ")");
  for (const auto& [name, t] : present) {
    if (is_mask_buffer(name)) continue;
    if (name == "lm_head.weight")
      ck->warnings_.push_back(
          file +
          ": lm_head.weight ignored: tie_word_embeddings is true, the head reads wte.weight");
    else
      ck->warnings_.push_back(file + ": " + show(name) + ": not used by this config, ignored");
  }
  return ck;
}

void Checkpoint::load_converted(ConvertedTensors tensors, const char* kind) {
  const std::string file = file_->path().string();
  converted_ = std::make_shared<ConvertedTensors>(std::move(tensors));
  if (!converted_->problems.empty())
    throw std::runtime_error(listed(file, converted_->problems,
                                    ("do not match config.json (" + std::string(kind) + ")").c_str()));
  for (const ExpectedTensor& e : expected_tensors(config_))
    by_name_.emplace_back(e.name, &converted_->views.at(e.name));
  for (const std::string& name : converted_->unused)
    warnings_.push_back(file + ": " + show(name) + ": not used by this config, ignored");
}

std::unique_ptr<Checkpoint> Checkpoint::side(Family family) const {
  if (config_.family != Family::EncoderDecoder || family == Family::EncoderDecoder)
    throw std::invalid_argument(dir_.string() + ": side() of a checkpoint that is not an "
                                "encoder-decoder's, or for both sides");
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir_;
  ck->config_ = family == Family::Encoder ? encoder_side(config_) : decoder_side(config_);
  ck->file_ = file_;
  ck->converted_ = converted_;
  // The encoder's tensors are "enc." + a lone encoder's names; the shared wte is both sides'.
  const std::string prefix = family == Family::Encoder ? "enc." : "";
  for (const ExpectedTensor& e : expected_tensors(ck->config_)) {
    const std::string whole = e.name == "wte.weight" ? e.name : prefix + e.name;
    ck->by_name_.emplace_back(e.name, &tensor(whole));
  }
  return ck;
}

const TensorView* Checkpoint::find(std::string_view canonical_name) const {
  for (const auto& [name, t] : by_name_)
    if (name == canonical_name) return t;
  return nullptr;
}

const TensorView& Checkpoint::tensor(std::string_view canonical_name) const {
  if (const TensorView* t = find(canonical_name)) return *t;
  throw std::runtime_error(dir_.string() + ": " + std::string(canonical_name) +
                           ": not a tensor this config uses");
}

uint64_t Checkpoint::weight_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : by_name_) n += t->bytes.size();
  return n;
}

}  // namespace model
