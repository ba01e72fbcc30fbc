#include "apps/session.h"

#include <cstdio>

#include "model/gpu_model.h"

namespace app {

void add_model_options(CLI::App& cmd, ModelArgs& args, bool model_only) {
  cmd.add_option("-m,--model", args.model,
                 "model folder (config.json, model.safetensors, tokenizer files); default: the "
                 "demo model in models/");
  if (model_only) return;
  cmd.add_option("--device", args.device, "GPU index or name, or cpu for the CPU reference");
  cmd.add_option("--precision", args.precision, "weight storage: f16 (default) or f32")
      ->check(CLI::IsMember({"f16", "f32"}));
  cmd.add_option("--split-layers", args.split_layers,
                 "submit each forward pass in parts of N blocks, for GPU drivers whose watchdog "
                 "ends long submissions (default 0: one submission)")
      ->check(CLI::Range(0u, 1u << 20));
  cmd.add_flag("--validation", args.validation,
               "enable the Khronos validation layer (also: GPT2VK_VALIDATION=1)");
}

std::filesystem::path model_dir(const ModelArgs& args) {
  if (!args.model.empty()) return args.model;
  const std::filesystem::path demo = GPT2VK_DEFAULT_MODEL;
  if (!std::filesystem::exists(demo / "config.json"))
    throw std::runtime_error("no --model given, and the demo model " + demo.string() +
                             " is not there; pass --model DIR (a Hugging Face GPT-2 folder)");
  return demo;
}

Session open_checkpoint(const ModelArgs& args) {
  Session s;
  const std::filesystem::path dir = model_dir(args);
  s.checkpoint = model::Checkpoint::load(dir);
  for (const std::string& w : s.checkpoint->warnings())
    std::fprintf(stderr, "gpt2vk: warning: %s\n", w.c_str());
  s.tokenizer = model::load_tokenizer(dir, s.checkpoint->config().tokenizer);
  return s;
}

void open_gpu(Session& s, const ModelArgs& args) {
  vkr::InstanceOptions io = vkr::InstanceOptions::from_env();
  io.validation = io.validation || args.validation;
  s.instance = std::make_unique<vkr::Instance>(io);
  vkr::DeviceOptions d = vkr::DeviceOptions::from_env();
  d.select = args.device;
  s.device = std::make_unique<vkr::Device>(*s.instance, d);
  model::GpuModelOptions o;
  o.precision = model::parse_precision(args.precision);
  o.split_layers = args.split_layers;
  s.model = model::make_gpu_model(*s.checkpoint, *s.device, o);
  print_warnings(*s.model);
}

void print_warnings(const model::Model& m) {
  for (const std::string& w : m.warnings())
    std::fprintf(stderr, "gpt2vk: warning: %s\n", w.c_str());
}

Session open_session(const ModelArgs& args) {
  Session s = open_checkpoint(args);
  if (args.device == "cpu") {
    s.model = model::make_cpu_model(*s.checkpoint, model::parse_precision(args.precision));
    print_warnings(*s.model);
  } else {
    open_gpu(s, args);
  }
  return s;
}

}  // namespace app
