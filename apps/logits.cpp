// gpt2vk logits: int32 ids in, float32 logits [T, V] out (an encoder's hidden states [T, C]),
// for comparison with other engines.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "apps/commands.h"
#include "apps/encoder_session.h"
#include "apps/session.h"

namespace app {
namespace {

struct LogitsArgs {
  ModelArgs model;
  std::string ids, out;
};

int logits(const LogitsArgs& args) {
  const std::string data = read_file(args.ids);
  if (data.empty() || data.size() % 4 != 0)
    throw std::runtime_error(args.ids + ": " + std::to_string(data.size()) +
                             " bytes is not a non-empty list of int32 ids");
  std::vector<int32_t> ids(data.size() / 4);
  std::memcpy(ids.data(), data.data(), data.size());

  if (encoder_folder(args.model)) {
    // An encoder's: the ids as the model reads them ([CLS] ... [SEP] included), all type 0.
    EncoderSession e = open_encoder(args.model);
    const std::vector<float> hidden = e.encoder->encode(ids, {}, false).hidden;
    std::ofstream o(args.out, std::ios::binary | std::ios::trunc);
    o.write(reinterpret_cast<const char*>(hidden.data()), static_cast<std::streamsize>(hidden.size() * 4));
    if (!o) throw std::runtime_error(args.out + ": cannot write");
    std::fprintf(stderr, "gpt2vk: hidden states [%zu, %u] written to %s (%s, %s)\n", ids.size(),
                 e.checkpoint->config().n_embd, args.out.c_str(), e.encoder->device_name().c_str(),
                 model::precision_name(e.encoder->precision()));
    return 0;
  }
  Session s = open_session(args.model);
  const std::vector<float> out = s.model->logits(ids);
  std::ofstream o(args.out, std::ios::binary | std::ios::trunc);
  o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * 4));
  if (!o) throw std::runtime_error(args.out + ": cannot write");
  std::fprintf(stderr, "gpt2vk: logits [%zu, %u] written to %s (%s, %s)\n", ids.size(),
               s.model->config().n_vocab, args.out.c_str(), s.model->device_name().c_str(),
               model::precision_name(s.model->precision()));
  return 0;
}

}  // namespace

Command add_logits(CLI::App& cli) {
  auto args = std::make_shared<LogitsArgs>();
  CLI::App* cmd = cli.add_subcommand("logits", "int32 ids in, float32 logits [T, V] out (an encoder: hidden states [T, C])");
  add_model_options(*cmd, args->model);
  cmd->add_option("--ids", args->ids, "int32 little-endian token ids")->required();
  cmd->add_option("-o,--out", args->out, "float32 little-endian logits [T, V]")->required();
  return {cmd, [args] { return logits(*args); }};
}

}  // namespace app
