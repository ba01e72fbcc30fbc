// A model's parameters on the host, in fp32, one vector per tensor the config implies, named
// canonically as model/formats/checkpoint.h names them: what training starts from (a checkpoint
// or GPT-2's initialisation) and what it saves.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/formats/config.h"
#include "model/forward/graph.h"

namespace model::training {

class Parameters {
 public:
  // Every tensor of the config, zero.
  explicit Parameters(const Config& config);
  // The checkpoint's tensors, converted to fp32.
  static Parameters from_checkpoint(const Checkpoint& checkpoint);

  // GPT-2's initialisation (and nanoGPT's, llm.c's): every weight matrix and embedding ~N(0,
  // 0.02), the residual projections (attn.c_proj, mlp.c_proj) ~N(0, 0.02 / sqrt(2 n_layer)),
  // biases 0, LayerNorm gains 1 and shifts 0. The normals come from a seeded 64-bit Mersenne
  // Twister through Box-Muller written here, so the same seed gives the same bits everywhere
  // (std::normal_distribution's algorithm is the library's choice).
  void init_gpt2(uint64_t seed);

  const Config& config() const { return config_; }
  // The canonical names, in expected_tensors() order, and their shapes.
  const std::vector<ExpectedTensor>& tensors() const { return expected_; }
  std::vector<float>& tensor(const std::string& name);
  const std::vector<float>& tensor(const std::string& name) const;
  uint64_t count() const;  // elements of every tensor
  // The tensors as graph.h's weights (a tied head reads wte's vector): a decoder's, or one side
  // of an encoder-decoder's (Family::Encoder or Decoder, with encoder_side()'s or
  // decoder_side()'s config; the two share wte's vector).
  ModelWeights<float*> weights();
  ModelWeights<float*> weights(Family side);

 private:
  Config config_;
  std::vector<ExpectedTensor> expected_;
  std::map<std::string, std::vector<float>> values_;
};

}  // namespace model::training
