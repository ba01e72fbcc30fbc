// BERT's names and layout -> the canonical ones (bert_tensors.h).
#include "model/formats/bert_tensors.h"

#include <cstring>
#include <set>

#include "model/formats/checkpoint.h"
#include "model/formats/json_util.h"

namespace model {
namespace {

// Where a canonical tensor comes from: one or more of the file's tensors (query, key, value
// for c_attn), each transposed where `linear` (an nn.Linear weight [out, in]), and laid side by
// side along the output dimension.
struct Source {
  std::vector<std::string> parts;
  bool linear = false;
};

// The file's name for each canonical tensor of expected_tensors(c).
std::map<std::string, Source> sources(const Config& c) {
  std::map<std::string, Source> m;
  auto vector = [&](const std::string& to, const std::string& from) { m[to] = {{from}, false}; };
  auto linear = [&](const std::string& to, const std::string& from) {
    m[to + ".weight"] = {{from + ".weight"}, true};
    vector(to + ".bias", from + ".bias");
  };
  auto norm = [&](const std::string& to, const std::string& from) {
    vector(to + ".weight", from + ".weight");
    vector(to + ".bias", from + ".bias");
  };
  vector("wte.weight", "embeddings.word_embeddings.weight");
  vector("wpe.weight", "embeddings.position_embeddings.weight");
  vector("wtt.weight", "embeddings.token_type_embeddings.weight");
  norm("ln_e", "embeddings.LayerNorm");
  for (uint32_t i = 0; i < c.n_layer; i++) {
    const std::string h = "h." + std::to_string(i) + ".";
    const std::string l = "encoder.layer." + std::to_string(i) + ".";
    const std::string self = l + "attention.self.";
    m[h + "attn.c_attn.weight"] = {{self + "query.weight", self + "key.weight", self + "value.weight"}, true};
    m[h + "attn.c_attn.bias"] = {{self + "query.bias", self + "key.bias", self + "value.bias"}, false};
    linear(h + "attn.c_proj", l + "attention.output.dense");
    norm(h + "ln_1", l + "attention.output.LayerNorm");
    linear(h + "mlp.c_fc", l + "intermediate.dense");
    linear(h + "mlp.c_proj", l + "output.dense");
    norm(h + "ln_2", l + "output.LayerNorm");
  }
  linear("mlm.dense", "cls.predictions.transform.dense");
  norm("mlm.ln", "cls.predictions.transform.LayerNorm");
  vector("mlm.bias", "cls.predictions.bias");
  vector("lm_head.weight", "cls.predictions.decoder.weight");
  linear("pooler", "pooler.dense");
  linear("classifier", "classifier");
  return m;
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

// A part's shape in the file: [N / parts, K] for a linear layer's canonical [K, N], else the
// canonical shape split along its one dimension.
std::vector<uint64_t> part_shape(const ExpectedTensor& e, const Source& src) {
  const auto parts = static_cast<uint64_t>(src.parts.size());
  if (src.linear) return {e.shape[1] / parts, e.shape[0]};
  if (parts == 1) return e.shape;
  return {e.shape[0] / parts};
}

}  // namespace

std::vector<ExpectedTensor> bert_file_tensors(const Config& c) {
  const std::map<std::string, Source> from = sources(c);
  std::vector<ExpectedTensor> out;
  for (const ExpectedTensor& e : expected_tensors(c)) {
    const Source& src = from.at(e.name);
    for (const std::string& name : src.parts) {
      const bool body = !name.starts_with("cls.") && !name.starts_with("classifier.");
      out.push_back({(body && c.head != EncoderHead::None ? "bert." : "") + name, part_shape(e, src)});
    }
  }
  return out;
}

BertTensors bert_tensors(const SafeTensors& file, const Config& c) {
  BertTensors out;
  std::map<std::string, const TensorView*, std::less<>> present;
  for (const TensorView& t : file.tensors())
    if (!present.emplace(plain_name(t.name), &t).second)
      out.problems.push_back(json_util::show(t.name) + ": stored twice (with and without \"bert.\", "
                             "or as LayerNorm weight and gamma)");
  std::map<std::string, std::string, std::less<>> other;  // name -> a dtype this engine does not read
  for (const SafeTensors::Unsupported& t : file.unsupported()) other.emplace(plain_name(t.name), t.dtype);
  // The decoder's bias is the predictions' bias, tied (older files hold both, or only it).
  if (!present.contains("cls.predictions.bias"))
    if (const auto it = present.find("cls.predictions.decoder.bias"); it != present.end())
      present.emplace("cls.predictions.bias", it->second);
  std::set<std::string, std::less<>> used{"cls.predictions.decoder.bias"};

  const std::map<std::string, Source> from = sources(c);
  for (const ExpectedTensor& e : expected_tensors(c)) {
    const Source& src = from.at(e.name);
    // The shape each part must have: [N / parts, K] for a linear layer's [K, N], else e's own
    // split along its one dimension.
    const auto parts = static_cast<uint64_t>(src.parts.size());
    const std::vector<uint64_t> shape = part_shape(e, src);
    std::vector<const TensorView*> found;
    for (const std::string& name : src.parts) {
      const auto it = present.find(name);
      if (it == present.end()) {
        const auto o = other.find(name);
        out.problems.push_back(o == other.end() ? "missing " + name + " " + json_util::shape_str(shape)
                                                : name + ": unsupported dtype " + o->second +
                                                      " (supported: F32, F16, BF16)");
        continue;
      }
      used.insert(name);
      if (it->second->shape != shape) {
        out.problems.push_back(name + ": shape " + json_util::shape_str(it->second->shape) +
                               " but the config implies " + json_util::shape_str(shape));
        continue;
      }
      if (!found.empty() && it->second->dtype != found[0]->dtype) {
        out.problems.push_back(name + ": dtype " + dtype_name(it->second->dtype) + " but " +
                               src.parts[0] + " is " + dtype_name(found[0]->dtype));
        continue;
      }
      found.push_back(it->second);
    }
    if (found.size() != src.parts.size()) continue;
    if (found.size() == 1 && !src.linear) {  // as stored
      TensorView v = *found[0];
      v.name = e.name;
      out.views.emplace(e.name, v);
      continue;
    }
    // Transposed and side by side: out[k, p * n + j] = part_p[j, k] (a linear layer), or the
    // parts one after another (biases).
    const size_t es = dtype_size(found[0]->dtype);
    std::vector<std::byte>& bytes = out.storage.emplace_back(e.elements() * es);
    if (!src.linear) {
      size_t at = 0;
      for (const TensorView* t : found) {
        std::memcpy(bytes.data() + at, t->bytes.data(), t->bytes.size());
        at += t->bytes.size();
      }
    } else {
      const uint64_t K = e.shape[0], N = e.shape[1], n = N / parts;
      for (uint64_t p = 0; p < parts; p++)
        for (uint64_t j = 0; j < n; j++)
          for (uint64_t k = 0; k < K; k++)
            std::memcpy(bytes.data() + (k * N + p * n + j) * es,
                        found[p]->bytes.data() + (j * K + k) * es, es);
    }
    out.views.emplace(e.name, TensorView{e.name, found[0]->dtype, e.shape, bytes});
  }

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
