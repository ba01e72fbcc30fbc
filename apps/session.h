// What the model commands share: the --model, --device and --precision options, and opening
// the checkpoint, the tokenizer and the model on the chosen device (or the CPU reference).
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "model/formats/checkpoint.h"
#include "model/forward/model.h"
#include "model/generation/sampler.h"
#include "model/text/tokenizer.h"
#include "vk/context.h"

namespace app {

struct ModelArgs {
  std::string model;              // folder; "" = the demo model shipped in the repository
  std::string device;             // index, name, or "cpu"; "" = the first GPU
  std::string precision = "f16";  // weight storage: f16 | f32
  std::string kv_cache = "f32";   // the KV cache's elements: f32 | f16
  bool validation = false;
  uint32_t split_layers = 0;  // blocks per submission; 0 = automatic (GpuModelOptions)
  std::string kernels;        // auto | gpu | cpu; "" = GPT2VK_KERNELS, else auto
  // Not options: what serve asks of a GPU model (GpuModelOptions::slots, slot_context).
  uint32_t slots = 1;
  uint32_t slot_context = 0;
  uint32_t sources = 1;        // an encoder-decoder's source caches (GpuModelOptions::sources)
  uint32_t encoder_batch = 1;  // an encoder's sequences per pass (embed --batch, serve)
};

// Adds --model, and unless `model_only`, --device, --precision, --kv-cache, --kernels,
// --split-layers, --validation.
void add_model_options(CLI::App& cmd, ModelArgs& args, bool model_only = false);

// The folder --model names, or the shipped demo model (with a clear error if it is missing).
std::filesystem::path model_dir(const ModelArgs& args);

// --temp, --top-k, --top-p and --seed: how generate and chat sample.
struct SamplingArgs {
  float temp = 0.8f;
  uint32_t top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  bool seed_given = false;
  float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int32_t repeat_last_n = 64;
  // The sampler's options: --seed, or a random seed where none was given.
  model::SamplerOptions options() const;
};

// Adds --temp, --top-k, --top-p, -s/--seed and the penalties (--repeat-penalty,
// --repeat-last-n, --presence-penalty, --frequency-penalty), bound to `args` (which must outlive
// the parse).
void add_sampling_options(CLI::App& cmd, SamplingArgs& args);

struct Session {
  std::unique_ptr<model::Checkpoint> checkpoint;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::unique_ptr<vk::Instance> instance;
  std::unique_ptr<vk::Device> device;
  std::unique_ptr<model::Model> model;
};

// Loads the checkpoint (printing its warnings to stderr) and its tokenizer.
Session open_checkpoint(const ModelArgs& args);
// ... and the model: on the GPU --device names, or the CPU reference for --device cpu.
Session open_session(const ModelArgs& args);
// The model of an open checkpoint, as open_session makes it.
void open_model(Session& s, const ModelArgs& args);
// A GPU model on `device_select` (never the CPU) for an open checkpoint: compare's GPU side.
// The device takes vk::DeviceOptions::from_env() (GPT2VK_FENCE_TIMEOUT, GPT2VK_KERNELS, ...),
// then --kernels. A progress bar on stderr while the weights upload.
void open_gpu(Session& s, const ModelArgs& args);
// The model's load warnings (NaN or infinite weights) on stderr.
void print_warnings(const model::Model& m);
// The summary lines' "N pipelines created in X s" for what a command prepared before its first
// pass; on a driver that compiles at first use (lavapipe, a CPU device) it says so, since the
// compile then falls in the first pass. "" where nothing was made (the CPU reference's null
// device included).
std::string pipelines_note(size_t pipelines, double seconds, const vk::Device* device);
// The instance (validation as the environment and --validation say) and the device --device
// names: what open_gpu and an encoder's session open.
void open_device(std::unique_ptr<vk::Instance>& instance, std::unique_ptr<vk::Device>& device,
                 const ModelArgs& args);
// Whether --model names an encoder's folder (its config.json's model_type): the commands that
// take both families choose their path by it.
bool encoder_folder(const ModelArgs& args);
// The device options the environment and --device, --kernels give.
vk::DeviceOptions device_options(const ModelArgs& args);

}  // namespace app
