// Marian's and T5's names and layouts -> the canonical ones (seq2seq_tensors.h).
#include "model/formats/seq2seq_tensors.h"

#include <map>
#include <string>

#include "model/formats/json_util.h"
#include "model/formats/relative_bias.h"

namespace model {
namespace {

// The file's name for each canonical tensor of expected_tensors(c).
std::map<std::string, TensorSource> sources(const Config& c) {
  TensorSources m;
  // One stack's layers: "enc.h.{i}." <- "model.encoder.layers.{i}.", "h.{i}." <- the decoder's.
  auto layers = [&](const std::string& to, const std::string& from, uint32_t n, bool cross) {
    for (uint32_t i = 0; i < n; i++) {
      const std::string h = to + "h." + std::to_string(i) + ".";
      const std::string l = from + std::to_string(i) + ".";
      const std::string a = l + "self_attn.";
      m.fused_qkv(h + "attn.c_attn", a + "q_proj", a + "k_proj", a + "v_proj");
      m.linear(h + "attn.c_proj", a + "out_proj");
      m.norm(h + "ln_1", l + "self_attn_layer_norm");
      if (cross) {
        m.linear(h + "cross.c_q", l + "encoder_attn.q_proj");
        m.linear(h + "cross.c_k", l + "encoder_attn.k_proj");
        m.linear(h + "cross.c_v", l + "encoder_attn.v_proj");
        m.linear(h + "cross.c_proj", l + "encoder_attn.out_proj");
        m.norm(h + "ln_x", l + "encoder_attn_layer_norm");
      }
      m.linear(h + "mlp.c_fc", l + "fc1");
      m.linear(h + "mlp.c_proj", l + "fc2");
      m.norm(h + "ln_2", l + "final_layer_norm");
    }
  };
  m.vector("wte.weight", "model.shared.weight");
  layers("enc.", "model.encoder.layers.", c.n_encoder_layer, false);
  layers("", "model.decoder.layers.", c.n_layer, true);
  m.map["head.bias"] = {{"final_logits_bias"}, false, {1, c.n_vocab}};
  m.vector("lm_head.weight", "lm_head.weight");
  return m.map;
}

// T5's: "encoder.block.{i}.layer.{j}." with j the sublayer (self-attention, then the decoder's
// EncDecAttention, then DenseReluDense), no biases, RMSNorm weights only, block 0's
// relative_attention_bias for the whole stack, and the decoder's output scale folded into its
// final norm.
std::map<std::string, TensorSource> t5_sources(const Config& c) {
  TensorSources m;
  auto stack = [&](const std::string& to, const std::string& from, const Config& side, bool cross) {
    // [buckets, H] in the file; [H, span] as the attention op reads it, for this side's
    // direction (relative_bias.h).
    m.computed(to + kRelativeBias, from + "block.0.layer.0.SelfAttention.relative_attention_bias.weight",
               {side.relative_buckets, side.n_head},
               [side](std::vector<float> table) { return relative_bias_rows(side, table); });
    const uint32_t n = side.n_layer;
    for (uint32_t i = 0; i < n; i++) {
      const std::string h = to + "h." + std::to_string(i) + ".";
      const std::string l = from + "block." + std::to_string(i) + ".layer.";
      const std::string a = l + "0.SelfAttention.";
      m.weights(h + "attn.c_attn", {a + "q", a + "k", a + "v"});
      m.weights(h + "attn.c_proj", {a + "o"});
      m.vector(h + "ln_1.weight", l + "0.layer_norm.weight");
      if (cross) {
        const std::string x = l + "1.EncDecAttention.";
        for (auto [ours, theirs] : {std::pair{"c_q", "q"}, {"c_k", "k"}, {"c_v", "v"}, {"c_proj", "o"}})
          m.weights(h + "cross." + ours, {x + theirs});
        m.vector(h + "ln_x.weight", l + "1.layer_norm.weight");
      }
      const std::string f = l + (cross ? "2" : "1") + ".";
      if (c.gated_mlp)
        m.weights(h + "mlp.c_fc", {f + "DenseReluDense.wi_0", f + "DenseReluDense.wi_1"});
      else
        m.weights(h + "mlp.c_fc", {f + "DenseReluDense.wi"});
      m.weights(h + "mlp.c_proj", {f + "DenseReluDense.wo"});
      m.vector(h + "ln_2.weight", f + "layer_norm.weight");
    }
  };
  m.vector("wte.weight", "shared.weight");
  stack("enc.", "encoder.", encoder_side(c), false);
  m.vector("enc.ln_f.weight", "encoder.final_layer_norm.weight");
  stack("", "decoder.", decoder_side(c), true);
  m.scaled("ln_f.weight", "decoder.final_layer_norm.weight", c.output_scale);
  m.vector("lm_head.weight", "lm_head.weight");
  return m.map;
}

// Which library's names the config's folder uses: T5's has the relative position bias.
std::map<std::string, TensorSource> file_sources(const Config& c) {
  return c.relative_buckets ? t5_sources(c) : sources(c);
}

// What a file may hold that the engine has no use for: the sinusoid tables, and the stacks'
// and the head's copies of the shared embedding (tied).
bool skipped(const std::string& name, const Config& c) {
  return name == "encoder.embed_tokens.weight" || name == "decoder.embed_tokens.weight" ||
         name == "model.encoder.embed_positions.weight" ||
         name == "model.decoder.embed_positions.weight" ||
         name == "model.encoder.embed_tokens.weight" ||
         name == "model.decoder.embed_tokens.weight" ||
         (name == "lm_head.weight" && c.tie_word_embeddings);
}

}  // namespace

std::vector<ExpectedTensor> seq2seq_file_tensors(const Config& c) {
  const std::map<std::string, TensorSource> from = file_sources(c);
  std::vector<ExpectedTensor> out;
  for (const ExpectedTensor& e : expected_tensors(c)) {
    const TensorSource& src = from.at(e.name);
    for (const std::string& name : src.parts) out.push_back({name, part_shape(e, src)});
  }
  return out;
}

std::vector<FileTensor> seq2seq_file_values(
    const Config& c,
    const std::function<const std::vector<float>&(const std::string&)>& canonical) {
  if (c.relative_buckets)
    throw std::invalid_argument(
        "seq2seq_file_values: T5's files are not written (its relative "
        "bias tables and scaled final norm have no inverse here)");
  const std::map<std::string, TensorSource> from = sources(c);
  std::vector<FileTensor> out;
  for (const ExpectedTensor& e : expected_tensors(c)) {
    const TensorSource& src = from.at(e.name);
    std::vector<std::vector<float>> parts = file_parts(e, src, canonical(e.name));
    for (size_t p = 0; p < parts.size(); p++)
      out.push_back({{src.parts[p], part_shape(e, src)}, std::move(parts[p])});
  }
  return out;
}

ConvertedTensors seq2seq_tensors(const SafeTensors& file, const Config& c) {
  ConvertedTensors out;
  PresentTensors present;
  for (const TensorView& t : file.tensors()) present.emplace(t.name, &t);
  OtherTensors other;  // name -> a dtype this engine does not read
  for (const SafeTensors::Unsupported& t : file.unsupported()) other.emplace(t.name, t.dtype);
  const auto used = convert_tensors(present, other, expected_tensors(c), file_sources(c), out);
  for (const auto& [name, t] : present)
    if (!used.contains(name) && !skipped(name, c)) out.unused.push_back(t->name);
  for (const auto& [name, dtype] : other)
    if (!used.contains(name) && !skipped(name, c)) out.unused.push_back(name + " (" + dtype + ")");
  return out;
}

}  // namespace model
