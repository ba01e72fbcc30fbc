// Small random checkpoints for the forward-pass tests, written in the published layout.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/forward/model.h"
#include "model/formats/config.h"
#include "model/formats/random_checkpoint.h"
#include "tests/files.h"
#include "tests/gpu.h"

namespace test {

// A GPT-2 block with the bytes tokenizer: C = 48, 4 heads, 2 layers, n_ctx 32, V = 256.
model::Config tiny_config();

// GPT-2's block and every textbook variant, as changes to tiny_config().
struct Variant {
  const char* name;
  void (*apply)(model::Config&);
};
std::span<const Variant> variants();

// A random checkpoint of `config` in a fresh folder, loaded: weights of std 0.2 by default
// (attention far from uniform at tiny widths), or as `options` say.
struct TinyModel {
  TempDir dir;
  std::unique_ptr<model::Checkpoint> checkpoint;
  explicit TinyModel(const model::Config& config,
                     model::TensorDType dtype = model::TensorDType::F32, uint64_t seed = 1);
  TinyModel(const model::Config& config, const model::RandomCheckpointOptions& options);
};

// Weights of std 1 / sqrt(C): activations of order 1 at any width (the tests at users' widths).
model::RandomCheckpointOptions unit_scale(const model::Config& config);

// A GPU model of `checkpoint` running kernel set `set` on the tests' GPU.
std::unique_ptr<model::Model> gpu_model(Gpu& g, const model::Checkpoint& checkpoint,
                                        model::Precision precision, vk::KernelSet set,
                                        model::Precision kv_cache = model::Precision::F32);
// Every (precision, kernel set) pair: f32 and f16 weights under both kernel sets.
std::vector<std::pair<model::Precision, vk::KernelSet>> precisions_and_kernel_sets();
// "gpu kernels" / "cpu kernels", for test messages.
std::string kernels_name(vk::KernelSet set);

// Every row's largest |value| (at least 1): the scale logit tolerances are relative to.
std::vector<double> row_scale(std::span<const float> x, size_t row);

// |got - ref| <= tol * row_scale(ref) for every element, reported like test::close.
bool close_rows(const std::string& what, std::span<const float> got, std::span<const float> ref,
                size_t row, double tol);

}  // namespace test
