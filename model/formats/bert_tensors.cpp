// BERT's names and layout -> the canonical ones (bert_tensors.h).
#include "model/formats/bert_tensors.h"

#include <cstring>
#include <set>

#include "model/formats/checkpoint.h"
#include "model/formats/converted_tensors.h"
#include "model/formats/json_util.h"

namespace model {
namespace {

// The file's name for each canonical tensor of expected_tensors(c).
std::map<std::string, TensorSource> sources(const Config& c) {
  TensorSources m;
  m.vector("wte.weight", "embeddings.word_embeddings.weight");
  m.vector("wpe.weight", "embeddings.position_embeddings.weight");
  m.vector("wtt.weight", "embeddings.token_type_embeddings.weight");
  m.norm("ln_e", "embeddings.LayerNorm");
  for (uint32_t i = 0; i < c.n_layer; i++) {
    const std::string h = "h." + std::to_string(i) + ".";
    const std::string l = "encoder.layer." + std::to_string(i) + ".";
    const std::string self = l + "attention.self.";
    m.fused_qkv(h + "attn.c_attn", self + "query", self + "key", self + "value");
    m.linear(h + "attn.c_proj", l + "attention.output.dense");
    m.norm(h + "ln_1", l + "attention.output.LayerNorm");
    m.linear(h + "mlp.c_fc", l + "intermediate.dense");
    m.linear(h + "mlp.c_proj", l + "output.dense");
    m.norm(h + "ln_2", l + "output.LayerNorm");
  }
  m.linear("mlm.dense", "cls.predictions.transform.dense");
  m.norm("mlm.ln", "cls.predictions.transform.LayerNorm");
  m.vector("mlm.bias", "cls.predictions.bias");
  m.vector("lm_head.weight", "cls.predictions.decoder.weight");
  m.linear("pooler", "pooler.dense");
  m.linear("classifier", "classifier");
  return m.map;
}

// The file's name without the "bert." of BertFor*, and with LayerNorm's old gamma / beta.
std::string plain_name(std::string_view name) {
  if (name.starts_with("bert.")) name.remove_prefix(5);
  std::string s(name);
  for (const auto& [old_name, now] : {std::pair{".LayerNorm.gamma", ".LayerNorm.weight"},
                                      std::pair{".LayerNorm.beta", ".LayerNorm.bias"}})
    if (s.ends_with(old_name)) s = s.substr(0, s.size() - std::strlen(old_name)) + now;
  return s;
}

}  // namespace

std::vector<ExpectedTensor> bert_file_tensors(const Config& c) {
  const std::map<std::string, TensorSource> from = sources(c);
  std::vector<ExpectedTensor> out;
  for (const ExpectedTensor& e : expected_tensors(c)) {
    const TensorSource& src = from.at(e.name);
    for (const std::string& name : src.parts) {
      const bool body = !name.starts_with("cls.") && !name.starts_with("classifier.");
      out.push_back({(body && c.head != EncoderHead::None ? "bert." : "") + name, part_shape(e, src)});
    }
  }
  return out;
}

ConvertedTensors bert_tensors(const SafeTensors& file, const Config& c) {
  ConvertedTensors out;
  PresentTensors present;
  for (const TensorView& t : file.tensors())
    if (!present.emplace(plain_name(t.name), &t).second)
      out.problems.push_back(json_util::show(t.name) + ": stored twice (with and without \"bert.\", "
                             "or as LayerNorm weight and gamma)");
  OtherTensors other;  // name -> a dtype this engine does not read
  for (const SafeTensors::Unsupported& t : file.unsupported()) other.emplace(plain_name(t.name), t.dtype);
  // The decoder's bias is the predictions' bias, tied (older files hold both, or only it).
  if (!present.contains("cls.predictions.bias"))
    if (const auto it = present.find("cls.predictions.decoder.bias"); it != present.end())
      present.emplace("cls.predictions.bias", it->second);
  std::set<std::string, std::less<>> used{"cls.predictions.decoder.bias"};

  used.merge(convert_tensors(present, other, expected_tensors(c), sources(c), out));

  for (const auto& [name, t] : present) {
    if (used.contains(name)) continue;
    if (name.starts_with("pooler.") && c.head != EncoderHead::SequenceClassification) continue;
    if (name == "cls.predictions.decoder.weight" && c.tie_word_embeddings) continue;  // a tied copy
    out.unused.push_back(t->name);
  }
  for (const auto& [name, dtype] : other)
    if (name != "embeddings.position_ids" && !used.contains(name))
      out.unused.push_back(name + " (" + dtype + ")");
  return out;
}

}  // namespace model
