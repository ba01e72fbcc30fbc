#include "model/forward/cpu_model.h"
#include "model/forward/encoder.h"
#include "apps/session.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "apps/options.h"
#include "apps/progress.h"
#include "apps/shipped.h"
#include "model/forward/gpu_model.h"
#include "vk/pipeline_cache.h"

namespace app {

void add_model_options(CLI::App& cmd, ModelArgs& args, bool model_only) {
  cmd.add_option("-m,--model", args.model,
                 "model folder (config.json, model.safetensors, tokenizer files); default: the "
                 "demo model in models/");
  if (model_only) return;
  cmd.add_option("--device", args.device, "GPU index or name, or cpu for the CPU reference");
  cmd.add_option("--precision", args.precision, "weight storage: f16 (default) or f32")
      ->check(CLI::IsMember({"f16", "f32"}));
  cmd.add_option("--kv-cache", args.kv_cache,
                 "KV cache storage: f32 (default) or f16 (half the memory and of the bytes each "
                 "decoded token's attention reads; logits move by about 1e-3 of their scale, "
                 "docs/benchmark.md)")
      ->check(CLI::IsMember({"f16", "f32"}));
  cmd.add_option("--kernels", args.kernels,
                 "the kernel set: gpu (what GPUs get), cpu (what CPU Vulkan devices such as "
                 "lavapipe get) or auto (by the device; default, or GPT2VK_KERNELS)")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  cmd.add_option("--split-layers", args.split_layers,
                 "submit each forward pass in parts of N blocks, for GPU drivers whose watchdog "
                 "ends long submissions (default 0: on a GPU, parts no slow GPU should take over "
                 "0.5 s to run, by the pass's estimated cost; on a CPU device one submission)")
      ->check(whole_number(0, 1u << 20));
  cmd.add_flag("--validation", args.validation,
               "enable the Khronos validation layer (also: GPT2VK_VALIDATION=1)");
}

void add_sampling_options(CLI::App& cmd, SamplingArgs& args) {
  cmd.add_option("--temp", args.temp, "temperature; 0 = greedy (default 0.8)")
      ->check(CLI::Range(0.0f, 100.0f));
  cmd.add_option("--top-k", args.top_k, "keep the k likeliest tokens; 0 = all (default 40)")
      ->check(whole_number(0, UINT32_MAX));
  cmd.add_option("--top-p", args.top_p, "keep the likeliest tokens up to this mass (default 0.95)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("-s,--seed", args.seed, "seed for reproducible sampling (default: random)")
      ->check(whole_number(0, UINT64_MAX))
      ->each([&args](const std::string&) { args.seed_given = true; });
  cmd.add_option("--repeat-penalty", args.repeat_penalty,
                 "divide the positive logits (multiply the negative ones) of tokens among the "
                 "last --repeat-last-n by this, as llama.cpp; 1 = off (default 1)")
      ->check(real_number(0, INFINITY, true));
  cmd.add_option("--repeat-last-n", args.repeat_last_n,
                 "the last N tokens of prompt and text the penalties look at; 0 = none, "
                 "-1 = the whole context (default 64)")
      ->check(whole_number(-1, INT32_MAX, " (0: none, -1: the whole context)"));
  cmd.add_option("--presence-penalty", args.presence_penalty,
                 "subtract this from the logit of every token among the last --repeat-last-n, "
                 "as OpenAI's; -2 to 2, 0 = off (default 0)")
      ->check(real_number(-2, 2));
  cmd.add_option("--frequency-penalty", args.frequency_penalty,
                 "subtract this times its count there from each token's logit, as OpenAI's; "
                 "-2 to 2, 0 = off (default 0)")
      ->check(real_number(-2, 2));
}

model::SamplerOptions SamplingArgs::options() const {
  model::SamplerOptions o{temp, top_k, top_p, seed_given ? seed : std::random_device{}()};
  o.repeat_penalty = repeat_penalty;
  o.repeat_last_n = repeat_last_n;
  o.presence_penalty = presence_penalty;
  o.frequency_penalty = frequency_penalty;
  return o;
}

std::filesystem::path model_dir(const ModelArgs& args) {
  if (!args.model.empty()) return args.model;
  const std::optional<std::filesystem::path> demo = find_shipped("models/kjv/config.json");
  if (!demo)
    throw std::runtime_error("no --model given, and the demo model is not found (" +
                             shipped_missing("models/kjv") +
                             "); pass --model DIR (a Hugging Face GPT-2 folder)");
  return demo->parent_path();
}

Session open_checkpoint(const ModelArgs& args) {
  Session s;
  const std::filesystem::path dir = model_dir(args);
  s.checkpoint = model::Checkpoint::load(dir);
  model::require_family(*s.checkpoint, model::Family::Decoder);  // an encoder has its commands
  for (const std::string& w : s.checkpoint->warnings())
    std::fprintf(stderr, "gpt2vk: warning: %s\n", w.c_str());
  s.tokenizer = model::load_tokenizer(dir, s.checkpoint->config().tokenizer);
  return s;
}

vk::DeviceOptions device_options(const ModelArgs& args) {
  vk::DeviceOptions d = vk::DeviceOptions::from_env();
  d.select = args.device;
  d.pipeline_cache_dir = vk::default_cache_dir();
  if (!args.kernels.empty()) d.kernels = vk::parse_kernel_set(args.kernels, "--kernels");
  return d;
}

void open_device(std::unique_ptr<vk::Instance>& instance, std::unique_ptr<vk::Device>& device,
                 const ModelArgs& args) {
  vk::InstanceOptions io = vk::InstanceOptions::from_env();
  io.validation = io.validation || args.validation;
  instance = std::make_unique<vk::Instance>(io);
  device = std::make_unique<vk::Device>(*instance, device_options(args));
}

bool encoder_folder(const ModelArgs& args) {
  return model::load_config(model_dir(args) / "config.json").family == model::Family::Encoder;
}

void open_gpu(Session& s, const ModelArgs& args) {
  open_device(s.instance, s.device, args);
  model::GpuModelOptions o;
  o.precision = model::parse_precision(args.precision);
  o.kv_cache = model::parse_precision(args.kv_cache);
  o.split_layers = args.split_layers;
  o.slots = args.slots;
  o.slot_context = args.slot_context;
  std::unique_ptr<Progress> bar;
  uint64_t shown = 0;
  o.on_upload = [&](uint64_t done, uint64_t total) {
    if (!bar) bar = std::make_unique<Progress>("uploading weights", total);
    bar->advance(done - shown);
    shown = done;
  };
  s.model = model::make_gpu_model(*s.checkpoint, *s.device, o);
  if (bar) bar->finish();
  print_warnings(*s.model);
}

void print_warnings(const model::Model& m) {
  for (const std::string& w : m.warnings())
    std::fprintf(stderr, "gpt2vk: warning: %s\n", w.c_str());
}

std::string pipelines_note(size_t pipelines, double seconds, const vk::Device* device) {
  if (!pipelines) return "";
  const bool lazy = device && device->caps().type == VK_PHYSICAL_DEVICE_TYPE_CPU;
  char note[128];
  std::snprintf(note, sizeof note, "%zu pipelines created in %.2f s%s", pipelines, seconds,
                lazy ? " (this driver compiles them at first use)" : "");
  return note;
}

void open_model(Session& s, const ModelArgs& args) {
  if (args.device == "cpu") {
    if (args.slots > 1)
      throw std::runtime_error("the CPU reference decodes one sequence at a time; decoding " +
                               std::to_string(args.slots) + " together needs a GPU");
    s.model = model::make_cpu_model(*s.checkpoint, model::parse_precision(args.precision),
                                    model::parse_precision(args.kv_cache));
    print_warnings(*s.model);
  } else {
    open_gpu(s, args);
  }
}

Session open_session(const ModelArgs& args) {
  Session s = open_checkpoint(args);
  open_model(s, args);
  return s;
}

}  // namespace app
