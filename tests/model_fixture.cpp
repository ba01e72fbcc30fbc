#include "tests/model_fixture.h"

#include <algorithm>
#include <cmath>

#include "model/forward/gpu_model.h"
#include "tests/compare.h"

namespace test {

model::Config tiny_config() {
  model::Config c;
  c.n_vocab = 256;
  c.n_ctx = 32;
  c.n_embd = 48;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_inner = 4 * 48;
  c.tokenizer.kind = model::TokenizerKind::Bytes;
  return c;
}

namespace {
const Variant kVariants[] = {
    {"gpt-2", [](model::Config&) {}},
    {"post-norm", [](model::Config& c) { c.pre_norm = false; }},
    {"no final norm", [](model::Config& c) { c.final_norm = false; }},
    {"sinusoidal positions",
     [](model::Config& c) { c.positions = model::PositionKind::Sinusoidal; }},
    {"no positions", [](model::Config& c) { c.positions = model::PositionKind::None; }},
    {"gelu erf", [](model::Config& c) { c.activation = model::Activation::GeluErf; }},
    {"relu", [](model::Config& c) { c.activation = model::Activation::Relu; }},
    {"no biases", [](model::Config& c) { c.attention_bias = c.mlp_bias = false; }},
    {"untied head", [](model::Config& c) { c.tie_word_embeddings = false; }},
    {"bidirectional", [](model::Config& c) { c.causal = false; }},
    {"std + eps", [](model::Config& c) { c.layer_norm = model::LayerNormKind::StdPlusEps; }},
    {"attention only",
     [](model::Config& c) {
       c.attention_only = true;
       c.attention_scale = 2.0f;
     }},
    {"n_inner 3C, one head, odd vocab",
     [](model::Config& c) {
       c.n_inner = 3 * c.n_embd;
       c.n_head = 1;
       c.n_vocab = 301;
       c.tokenizer.kind = model::TokenizerKind::Gpt2;  // any; 301 is not 256
     }},
};
}  // namespace

std::span<const Variant> variants() {
  return kVariants;
}


std::unique_ptr<model::Model> gpu_model(Gpu& g, const model::Checkpoint& checkpoint,
                                        model::Precision precision, vk::KernelSet set,
                                        model::Precision kv_cache) {
  model::GpuModelOptions o;
  o.precision = precision;
  o.kv_cache = kv_cache;
  return model::make_gpu_model(checkpoint, g.with_kernels(set), o);
}

std::vector<std::pair<model::Precision, vk::KernelSet>> precisions_and_kernel_sets() {
  std::vector<std::pair<model::Precision, vk::KernelSet>> all;
  for (model::Precision p : {model::Precision::F32, model::Precision::F16})
    for (vk::KernelSet ks : kKernelSets) all.emplace_back(p, ks);
  return all;
}

std::string kernels_name(vk::KernelSet set) {
  return std::string(vk::kernel_set_name(set)) + " kernels";
}

TinyModel::TinyModel(const model::Config& config, model::TensorDType dtype, uint64_t seed) {
  model::RandomCheckpointOptions o;
  o.dtype = dtype;
  o.seed = seed;
  // Larger than GPT-2's 0.02, so that attention is not uniform and logits spread out.
  o.scale = 0.2f;
  model::write_random_checkpoint(dir.path(), config, model::config_json(config), o);
  checkpoint = model::Checkpoint::load(dir.path());
}

TinyModel::TinyModel(const model::Config& config, const model::RandomCheckpointOptions& options) {
  model::write_random_checkpoint(dir.path(), config, model::config_json(config), options);
  checkpoint = model::Checkpoint::load(dir.path());
}

model::RandomCheckpointOptions unit_scale(const model::Config& config) {
  model::RandomCheckpointOptions o;
  o.scale = 1.0f / std::sqrt(float(config.n_embd));
  return o;
}

std::vector<double> row_scale(std::span<const float> x, size_t row) {
  std::vector<double> s(x.size() / row, 1.0);
  for (size_t i = 0; i < x.size(); i++) s[i / row] = std::max(s[i / row], double{std::fabs(x[i])});
  return s;
}

bool close_rows(const std::string& what, std::span<const float> got, std::span<const float> ref,
                size_t row, double tol) {
  const std::vector<double> s = row_scale(ref, row);
  std::vector<float> g(got.size()), r(ref.size());
  for (size_t i = 0; i < got.size() && i < ref.size(); i++) {
    g[i] = static_cast<float>(double{got[i]} / s[i / row]);
    r[i] = static_cast<float>(double{ref[i]} / s[i / row]);
  }
  return close(what + ", values / row scale", g, r, {tol, 0});
}

}  // namespace test
