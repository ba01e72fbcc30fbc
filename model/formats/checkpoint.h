// A model folder as Hugging Face publishes GPT-2: config.json, model.safetensors, and the
// tokenizer files. The checkpoint checks that every tensor the config implies is present with
// its shape, and presents them under canonical names (without the optional "transformer."
// prefix): "wte.weight", "wpe.weight", "h.{i}.ln_1.weight", "h.{i}.attn.c_attn.weight", ...,
// "ln_f.weight", and "lm_head.weight" when the head is not tied.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/formats/config.h"
#include "model/formats/safetensors.h"

namespace model {

struct ConvertedTensors;

// A tensor the config requires, with its shape as published. Conv1D weights are [in, out]
// (y = x W + b): c_attn [C, 3C], attn.c_proj [C, C], c_fc [C, n_inner], mlp.c_proj [n_inner, C];
// wte [V, C], wpe [n_ctx, C], lm_head [V, C], LayerNorm weight/bias [C].
// T5's relative position bias as the attention op reads it: [H, 2 n_ctx - 1], the file's
// learned table [buckets, H] expanded per head and relative position where the checkpoint
// presents its tensors (model/formats/relative_bias.h), so no backend knows of buckets.
inline constexpr const char* kRelativeBias = "rel_bias.weight";

struct ExpectedTensor {
  std::string name;
  std::vector<uint64_t> shape;
  // The values training would learn where fewer than the elements (the relative bias: its
  // table's buckets x H); 0: elements().
  uint64_t learned = 0;
  uint64_t elements() const;  // product of shape
  // A weight matrix, stored at the model's precision (fp16 or fp32); the rest (norms, biases,
  // the relative position bias) stays fp32.
  bool matrix() const {
    return shape.size() == 2 && !std::string_view(name).ends_with(kRelativeBias);
  }
};
std::vector<ExpectedTensor> expected_tensors(const Config& config);
// Learned values of all expected tensors. parse_config's limits keep this below 2^50, so byte counts
// of any dtype fit in 64 bits.
uint64_t parameter_count(const Config& config);

class Checkpoint {
 public:
  // Reads dir/config.json and dir/model.safetensors and validates them against each other.
  // Missing tensors and wrong shapes are listed together in one error. Causal-mask buffers
  // (h.{i}.attn.bias, h.{i}.attn.masked_bias) are skipped; other unknown tensors become
  // warnings().
  static std::unique_ptr<Checkpoint> load(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const Config& config() const { return config_; }
  const TensorView& tensor(std::string_view canonical_name) const;  // throws when absent
  const TensorView* find(std::string_view canonical_name) const;
  const std::vector<std::string>& warnings() const { return warnings_; }
  uint64_t weight_bytes() const;  // bytes of the tensors the model uses, as stored

  // One stack of an encoder-decoder's checkpoint (Family Encoder or Decoder) as a checkpoint
  // of its own: encoder_side() or decoder_side() of the config, the stack's tensors under the
  // names a lone encoder or decoder has. It shares this one's file and tensors; it may outlive
  // it. Throws for a checkpoint that is not an encoder-decoder's.
  std::unique_ptr<Checkpoint> side(Family family) const;

 private:
  // A file in another library's names (BERT, Marian), converted into the canonical tensors.
  void load_converted(ConvertedTensors tensors, const char* kind);
  std::filesystem::path dir_;
  Config config_;
  std::shared_ptr<SafeTensors> file_;
  std::vector<std::pair<std::string, const TensorView*>> by_name_;  // canonical name -> tensor
  std::vector<std::string> warnings_;
  std::shared_ptr<ConvertedTensors> converted_;  // an encoder's tensors as the canonical ones
};

}  // namespace model
