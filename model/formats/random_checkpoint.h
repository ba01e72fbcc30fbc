// Model folders with random weights in the layout Hugging Face publishes GPT-2 in: for tests,
// benchmarks and `gpt2vk make-model`. Values are deterministic given the seed, and the same for
// every dtype (drawn in fp32, then converted).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "model/formats/config.h"
#include "model/formats/safetensors.h"

namespace model {

struct RandomCheckpointOptions {
  TensorDType dtype = TensorDType::F32;
  uint64_t seed = 1;
  bool prefix = false;        // name the body "transformer.*" as GPT2LMHeadModel saves it
  bool mask_buffers = false;  // add h.{i}.attn.bias [1, 1, n_ctx, n_ctx] (tril of ones) and
                              // h.{i}.attn.masked_bias [] (-1e4), as the published files carry
  float scale = 0.02f;        // ~N(0, scale) for every tensor; LayerNorm weights add 1
};

// Writes dir/config.json (config_json as given) and dir/model.safetensors for `config`,
// streaming: memory use stays small even for GPT-2 XL.
void write_random_checkpoint(const std::filesystem::path& dir, const Config& config,
                             const std::string& config_json,
                             const RandomCheckpointOptions& options);

// The fp32 values of elements [first, first + count) of one tensor of such a checkpoint, as drawn
// before conversion to options.dtype. `name` is canonical (no "transformer." prefix); the mask
// buffers' names give their values too (n_ctx from config).
void random_tensor_values(std::string_view name, const Config& config,
                          const RandomCheckpointOptions& options, float* dst, uint64_t first,
                          uint64_t count);

}  // namespace model
