#include "model/formats/random_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "model/formats/bert_tensors.h"
#include "model/formats/seq2seq_tensors.h"
#include "model/formats/checkpoint.h"
#include "model/formats/safetensors_writer.h"

namespace model {

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// ~N(0, 1): the sum of four 16-bit uniforms from one 64-bit draw (Irwin-Hall, variance 4/12),
// centred and scaled. Within +-3.46 sigma, which random weights do not miss.
float normal(uint64_t bits) {
  float sum = 0;
  for (int k = 0; k < 4; ++k, bits >>= 16) sum += (static_cast<float>(bits & 0xffffu) + 0.5f);
  return (sum / 65536.0f - 2.0f) * 1.7320508f;
}

bool ends_with_layer(std::string_view name, std::string_view suffix, size_t* digits_end) {
  if (!name.starts_with("h.") || !name.ends_with(suffix)) return false;
  size_t i = 2;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  *digits_end = i;
  return i > 2 && i + suffix.size() == name.size();
}

bool is_layer_norm_weight(std::string_view name) {
  return name == "ln_f.weight" || name.ends_with(".ln_1.weight") ||
         name.ends_with(".ln_2.weight") || name.ends_with("LayerNorm.weight") ||
         name.ends_with("layer_norm.weight");  // Marian's
}

// Elements per chunk when streaming: 1 MiB of fp32.
constexpr uint64_t kChunk = 1u << 18;

void convert(const float* src, uint64_t n, TensorDType dtype, std::byte* dst) {
  if (dtype == TensorDType::F32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == TensorDType::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

}  // namespace

void random_tensor_values(std::string_view name, const Config& config,
                          const RandomCheckpointOptions& options, float* dst, uint64_t first,
                          uint64_t count) {
  size_t at = 0;
  if (ends_with_layer(name, ".attn.masked_bias", &at)) {
    std::fill(dst, dst + count, -1e4f);
    return;
  }
  if (ends_with_layer(name, ".attn.bias", &at)) {  // [1, 1, n_ctx, n_ctx]: 1 where col <= row
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t e = first + i;
      dst[i] = e % config.n_ctx <= e / config.n_ctx ? 1.0f : 0.0f;
    }
    return;
  }
  // Counter-based (value i depends on seed, name and i only), so chunks can come in any size.
  const uint64_t key = mix(options.seed * kGolden + kGolden) ^ fnv1a(name);
  const float base = is_layer_norm_weight(name) ? 1.0f : 0.0f;
  for (uint64_t i = 0; i < count; ++i)
    dst[i] = base + options.scale * normal(mix(key + (first + i + 1) * kGolden));
}

void write_random_checkpoint(const std::filesystem::path& dir, const Config& config,
                             const std::string& config_json,
                             const RandomCheckpointOptions& options) {
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json", std::ios::binary | std::ios::trunc);
    out << config_json;
    if (!out) throw std::runtime_error((dir / "config.json").string() + ": cannot write");
  }
  std::vector<TensorSpec> canonical;
  // An encoder's file holds BERT's names and layout, an encoder-decoder's Marian's, each drawn
  // by its own name.
  const bool gpt2 = config.family == Family::Decoder;
  for (const ExpectedTensor& e : config.family == Family::Encoder ? bert_file_tensors(config)
                                 : gpt2 ? std::vector<ExpectedTensor>{}
                                        : seq2seq_file_tensors(config))
    canonical.push_back({e.name, options.dtype, e.shape});
  for (const ExpectedTensor& e : gpt2 ? expected_tensors(config) : std::vector<ExpectedTensor>{}) {
    canonical.push_back({e.name, options.dtype, e.shape});
    const std::string_view n = e.name;
    if (options.mask_buffers && n.ends_with(".attn.c_attn.weight")) {  // the published place
      const std::string h(n.substr(0, n.size() - std::string_view("c_attn.weight").size()));
      canonical.push_back({h + "bias", options.dtype, {1, 1, config.n_ctx, config.n_ctx}});
      canonical.push_back({h + "masked_bias", options.dtype, {}});
    }
  }
  std::vector<TensorSpec> stored = canonical;
  if (options.prefix)
    for (TensorSpec& t : stored)
      if (t.name != "lm_head.weight") t.name = "transformer." + t.name;

  SafeTensorsWriter writer(dir / "model.safetensors", stored, {{"format", "pt"}});
  std::vector<float> values(kChunk);
  std::vector<std::byte> bytes(kChunk * 4);
  for (const TensorSpec& t : canonical) {
    uint64_t elements = 1;
    for (uint64_t d : t.shape) elements *= d;
    for (uint64_t first = 0; first < elements; first += kChunk) {
      const uint64_t n = std::min(kChunk, elements - first);
      random_tensor_values(t.name, config, options, values.data(), first, n);
      convert(values.data(), n, t.dtype, bytes.data());
      writer.write(std::span(bytes.data(), n * dtype_size(t.dtype)));
    }
  }
  writer.finish();
}

}  // namespace model
