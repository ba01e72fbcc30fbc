#include "apps/encoder_session.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "model/forward/cpu_model.h"
#include "model/forward/gpu_model.h"

namespace app {

// The checkpoint (an encoder's, else a clear error), its WordPiece vocabulary, and the encoder
// on the device --device names (the CPU reference for "cpu").
EncoderSession open_encoder(const ModelArgs& args) {
  EncoderSession s;
  const std::filesystem::path dir = model_dir(args);
  s.checkpoint = model::Checkpoint::load(dir);
  model::require_family(*s.checkpoint, model::Family::Encoder);
  for (const std::string& w : s.checkpoint->warnings())
    std::fprintf(stderr, "gpt2vk: warning: %s\n", w.c_str());
  s.wordpiece = model::load_wordpiece(dir);
  if (s.wordpiece->size() > s.checkpoint->config().n_vocab)
    throw std::runtime_error(dir.string() + ": the vocabulary has " +
                             std::to_string(s.wordpiece->size()) + " tokens, config.json's vocab_size " +
                             std::to_string(s.checkpoint->config().n_vocab));
  const model::Precision precision = model::parse_precision(args.precision);
  if (args.device == "cpu") {
    s.encoder = model::make_cpu_encoder(*s.checkpoint, precision);
  } else {
    open_device(s.instance, s.device, args);
    model::GpuModelOptions o;
    o.precision = precision;
    o.split_layers = args.split_layers;
    o.encoder_batch = args.encoder_batch;
    s.encoder = model::make_gpu_encoder(*s.checkpoint, *s.device, o);
  }
  for (const std::string& w : s.encoder->warnings())
    std::fprintf(stderr, "gpt2vk: warning: %s\n", w.c_str());
  return s;
}

// [CLS] text [SEP] within the model's positions, with a note where the end was cut.
model::WordPieceEncoding encode_text(const EncoderSession& s, const std::string& text,
                                     const std::string& where) {
  const uint32_t n_ctx = s.checkpoint->config().n_ctx;
  model::WordPieceEncoding e = s.wordpiece->encode(text, n_ctx);
  if (e.truncated)
    std::fprintf(stderr, "gpt2vk: note: %s: %zu tokens past max_position_embeddings %u dropped\n",
                 where.c_str(), e.truncated, n_ctx);
  return e;
}

// What a sentence-transformers folder asks for: its pooling mode and whether a Normalize module
// follows (modules.json).
Pooling folder_pooling(const std::filesystem::path& dir, Pooling asked) {
  std::string& pooling = asked.mode;
  bool& normalize = asked.normalize;
  std::error_code ec;
  const std::filesystem::path modules = dir / "modules.json";
  const nlohmann::json m = std::filesystem::exists(modules, ec)
                              ? nlohmann::json::parse(read_file(modules.string()), nullptr, false)
                              : nlohmann::json::array();
  if (!m.is_array()) throw std::runtime_error(modules.string() + ": not a JSON list of modules");
  for (const nlohmann::json& module : m) {
    if (!module.is_object() || !module.value("type", nlohmann::json("")).is_string() ||
        !module.value("path", nlohmann::json("")).is_string())
      throw std::runtime_error(modules.string() + ": a module is not {\"type\": ..., \"path\": ...}");
    const std::string type = module.value("type", ""), path = module.value("path", "");
    if (type.ends_with(".Normalize")) normalize = true;
    if (!type.ends_with(".Pooling") || !pooling.empty()) continue;
    const std::filesystem::path config = dir / path / "config.json";
    const nlohmann::json p = nlohmann::json::parse(read_file(config.string()), nullptr, false);
    if (!p.is_object()) throw std::runtime_error(config.string() + ": not a JSON object");
    const std::string mode = p.value("pooling_mode", "");
    if (mode == "mean" || p.value("pooling_mode_mean_tokens", false)) pooling = "mean";
    else if (mode == "cls" || p.value("pooling_mode_cls_token", false)) pooling = "cls";
    else throw std::runtime_error(config.string() + ": pooling mode " + (mode.empty() ? "?" : mode) +
                                  " is not supported (mean, cls)");
  }
  if (pooling.empty()) pooling = "mean";
  if (pooling != "mean" && pooling != "cls")
    throw std::runtime_error("--pooling " + pooling + ": expected mean or cls");
  return asked;
}

std::vector<float> pool(std::span<const float> hidden, size_t T, uint32_t C, const Pooling& p) {
  const size_t rows = p.mode == "cls" ? 1 : T;
  std::vector<double> v(C, 0.0);
  for (size_t t = 0; t < rows; t++)
    for (uint32_t c = 0; c < C; c++) v[c] += double{hidden[t * C + c]} / double(rows);
  double norm = 0;
  for (double x : v) norm += x * x;
  const double scale = p.normalize && norm > 0 ? 1 / std::sqrt(norm) : 1;
  std::vector<float> out;
  for (double x : v) out.push_back(static_cast<float>(x * scale));
  return out;
}

}  // namespace app
