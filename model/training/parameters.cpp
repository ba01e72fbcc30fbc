#include "model/training/parameters.h"

#include <cmath>
#include <random>
#include <stdexcept>

#include "model/formats/dtype.h"

namespace model::training {
namespace {

// N(0, 1) pairs by Box-Muller from 53-bit uniforms of a 64-bit Mersenne Twister (whose output
// the standard fixes, unlike its distributions').
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace

Parameters::Parameters(const Config& config) : config_(config), expected_(expected_tensors(config)) {
  // Training's graph (train_graph.h) is a decoder's, or an encoder-decoder's: no token types,
  // no embedding norm, no encoder heads, no relative position bias (T5's).
  if (config.family == Family::Encoder)
    throw std::invalid_argument(
        "training runs decoders and encoder-decoders; this is a BERT encoder");
  if (config.family == Family::Decoder && config.cross_attention)
    throw std::invalid_argument(
        "training runs a decoder with cross-attention as part of its "
        "encoder-decoder, not alone");
  if (config.relative_buckets != 0)
    throw std::invalid_argument("training has no kernels for T5's relative position bias yet");
  // The trainers' buffers and backward ops are sized by n_embd throughout.
  if (config.attn_width() != config.n_embd)
    throw std::invalid_argument("training needs attention as wide as the model; this one's is " +
                                std::to_string(config.attn_width()) + " wide in a model " +
                                std::to_string(config.n_embd) + " wide");
  for (const ExpectedTensor& e : expected_) values_[e.name].assign(e.elements(), 0.0f);
}

Parameters Parameters::from_checkpoint(const Checkpoint& checkpoint) {
  Parameters p(checkpoint.config());
  for (const ExpectedTensor& e : p.expected_) p.values_[e.name] = to_f32(checkpoint.tensor(e.name));
  return p;
}

void Parameters::init_gpt2(uint64_t seed) {
  Normal normal(seed);
  const double residual = 0.02 / std::sqrt(2.0 * config_.n_layer);
  for (const ExpectedTensor& e : expected_) {
    std::vector<float>& v = values_[e.name];
    const bool norm = e.name.find("ln_") != std::string::npos;
    if (norm) {  // LayerNorm: gain 1, shift 0
      std::fill(v.begin(), v.end(), e.name.ends_with(".weight") ? 1.0f : 0.0f);
    } else if (e.name.ends_with(".bias")) {
      std::fill(v.begin(), v.end(), 0.0f);
    } else {
      const double sd = e.name.ends_with("c_proj.weight") ? residual : 0.02;
      for (float& x : v) x = static_cast<float>(sd * normal.next());
    }
  }
}

std::vector<float>& Parameters::tensor(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) throw std::out_of_range("no parameter named " + name);
  return it->second;
}

const std::vector<float>& Parameters::tensor(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw std::out_of_range("no parameter named " + name);
  return it->second;
}

uint64_t Parameters::count() const {
  uint64_t n = 0;
  for (const auto& [name, v] : values_) n += v.size();
  return n;
}

ModelWeights<float*> Parameters::weights() {
  if (config_.family == Family::EncoderDecoder)
    throw std::logic_error("Parameters::weights: an encoder-decoder's are weights(side)");
  return map_weights<float*>(config_, [&](const std::string& name) -> float* {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : it->second.data();
  });
}

ModelWeights<float*> Parameters::weights(Family side) {
  if (config_.family != Family::EncoderDecoder || side == Family::EncoderDecoder)
    throw std::logic_error("Parameters::weights(side): one side of an encoder-decoder");
  // As Checkpoint::side() names them: the encoder's under "enc.", the shared wte both sides'.
  const std::string prefix = side == Family::Encoder ? "enc." : "";
  const Config c = side == Family::Encoder ? encoder_side(config_) : decoder_side(config_);
  return map_weights<float*>(c, [&](const std::string& name) -> float* {
    auto it = values_.find(name == "wte.weight" ? name : prefix + name);
    return it == values_.end() ? nullptr : it->second.data();
  });
}

}  // namespace model::training
