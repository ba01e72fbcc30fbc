// gpt2vk make-model: a checkpoint of a published GPT-2 shape with random weights, in the
// published layout, with GPT-2's tokenizer files: benchmarks and large-model tests need no
// download.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

#include "apps/commands.h"
#include "apps/options.h"
#include "apps/shipped.h"
#include "model/formats/random_checkpoint.h"

namespace app {
namespace {

struct MakeModelArgs {
  std::string shape = "small";  // tiny | small | medium | large | xl
  std::string dtype = "f16";    // f32 | f16 | bf16
  std::string out;
  uint64_t seed = 1;
};

int make_model(const MakeModelArgs& args) {
  struct Shape {
    uint32_t n_embd, n_layer, n_head;
  };
  // GPT-2's four published sizes, and a small one of width 128 for quick runs.
  const std::map<std::string, Shape> shapes = {{"tiny", {128, 4, 4}},     {"small", {768, 12, 12}},
                                               {"medium", {1024, 24, 16}}, {"large", {1280, 36, 20}},
                                               {"xl", {1600, 48, 25}}};
  const auto it = shapes.find(args.shape);
  if (it == shapes.end()) throw std::runtime_error("unknown shape '" + args.shape + "'");
  const model::Config c = model::gpt2_config(it->second.n_embd, it->second.n_layer, it->second.n_head);

  model::RandomCheckpointOptions o;
  o.dtype = args.dtype == "f32"    ? model::TensorDType::F32
            : args.dtype == "bf16" ? model::TensorDType::BF16
                                   : model::TensorDType::F16;
  o.seed = args.seed;
  const std::filesystem::path dir = args.out;
  std::filesystem::create_directories(dir);
  model::write_random_checkpoint(dir, c, model::config_json(c), o);
  const std::optional<std::filesystem::path> vocab = find_shipped("data/gpt2/vocab.json");
  if (!vocab)
    throw std::runtime_error("GPT-2's tokenizer files are not found (" +
                             shipped_missing("data/gpt2") + ")");
  const std::filesystem::path data = vocab->parent_path();
  for (const char* f : {"vocab.json", "merges.txt"})
    std::filesystem::copy_file(data / f, dir / f, std::filesystem::copy_options::overwrite_existing);
  std::fprintf(stderr, "gpt2vk: wrote %s: GPT-2 %s shape (%u layers, width %u, %u heads), %s, seed %llu\n",
               dir.c_str(), args.shape.c_str(), c.n_layer, c.n_embd, c.n_head, args.dtype.c_str(),
               static_cast<unsigned long long>(args.seed));
  return 0;
}

}  // namespace

Command add_make_model(CLI::App& cli) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "make-model", "write a random-weight checkpoint of a GPT-2 shape, with GPT-2's tokenizer");
  cmd->add_option("--shape", args->shape,
                  "tiny (2 layers, width 128), small (124M), medium, large, xl (1.5B)")
      ->check(CLI::IsMember({"tiny", "small", "medium", "large", "xl"}));
  cmd->add_option("--dtype", args->dtype, "stored dtype (default f16)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("-o,--out", args->out, "the folder to write")->required();
  cmd->add_option("-s,--seed", args->seed, "seed of the weights")
      ->check(whole_number(0, UINT64_MAX));
  return {cmd, [args] { return make_model(*args); }};
}

}  // namespace app
