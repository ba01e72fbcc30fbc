// Training (issue 17): the whole step of train_graph.h. The CPU reference step's gradients
// against central differences of its own loss, for GPT-2's block and every variant the forward
// pass supports (pre/post-norm, attention-only, learned/sinusoidal/no positions, tied or untied
// head, with or without biases, both GELUs and ReLU, both LayerNorm formulas).
// Tolerance: |numeric - analytic| <= 2e-3 max|g| + 2e-2 |g| over probed elements, g the step's
// gradients. The loss is a mean over float logits (relative 6e-8 each), which the quotient's
// 2h = 2e-3 turns into ~1e-4 of the largest gradient at most; the central difference's own
// error is O(h^2) of third derivatives, small at these weights (~0.2). A missing term of any op
// or a wrong sign errs by O(|g|).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/formats/config.h"
#include "model/training/cpu_trainer.h"
#include "model/training/parameters.h"
#include "tests/compare.h"

namespace {

using model::training::Parameters;

model::Config tiny(const std::string& variant) {
  model::Config c = model::gpt2_config(16, 2, 2);
  c.n_vocab = 11;
  c.n_ctx = 8;
  c.n_inner = 24;
  if (variant == "post-norm") {
    c.pre_norm = false;
    c.positions = model::PositionKind::Sinusoidal;
    c.tie_word_embeddings = false;
    c.activation = model::Activation::Relu;
    c.attention_bias = c.mlp_bias = false;
    c.layer_norm = model::LayerNormKind::StdPlusEps;
  } else if (variant == "attention-only") {
    c.attention_only = true;
    c.positions = model::PositionKind::None;
    c.final_norm = false;
  } else if (variant == "erf, untied, no final norm") {
    c.activation = model::Activation::GeluErf;
    c.tie_word_embeddings = false;
    c.final_norm = false;
    c.attention_scale = 0.4f;
  }
  return c;
}

// GPT-2's initialisation, then every value moved by up to 0.2: gradients of a size central
// differences resolve, and LayerNorm gains away from 1.
Parameters random_parameters(const model::Config& c, unsigned seed) {
  Parameters p(c);
  p.init_gpt2(seed);
  unsigned s = seed;
  for (const model::ExpectedTensor& e : p.tensors()) {
    std::vector<float>& v = p.tensor(e.name);
    const std::vector<float> noise = test::random_floats(v.size(), ++s, -0.2f, 0.2f);
    for (size_t i = 0; i < v.size(); i++) v[i] += noise[i];
  }
  return p;
}

}  // namespace

TEST_CASE("the CPU training step's gradients against central differences, every variant") {
  for (const std::string variant :
       {"gpt2", "post-norm", "attention-only", "erf, untied, no final norm"}) {
    const model::Config c = tiny(variant);
    const uint32_t B = 2, T = 5;
    Parameters params = random_parameters(c, 40), grads(c), scratch(c);
    const std::vector<int32_t> ids = {1, 4, 4, 0, 10, 7, 2, 9, 3, 3},
                               targets = {4, 4, 0, 10, 6, 2, 9, 3, 3, 1};
    const double loss = model::training::cpu_train_step(params, grads, ids, targets, B, T);
    CHECK(std::isfinite(loss));
    CHECK(loss > 0.0);
    double peak = 0;
    for (const model::ExpectedTensor& e : grads.tensors())
      for (float g : grads.tensor(e.name)) peak = std::max(peak, std::abs(double(g)));
    for (const model::ExpectedTensor& e : params.tensors()) {
      std::vector<float>& v = params.tensor(e.name);
      const std::vector<float>& g = grads.tensor(e.name);
      std::vector<float> numeric, analytic;
      // Up to 6 elements spread over the tensor.
      for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / 6)) {
        const float x0 = v[i], h = 1e-3f, up = x0 + h, down = x0 - h;
        v[i] = up;
        const double l_up = model::training::cpu_train_step(params, scratch, ids, targets, B, T);
        v[i] = down;
        const double l_down = model::training::cpu_train_step(params, scratch, ids, targets, B, T);
        v[i] = x0;
        numeric.push_back(float((l_up - l_down) / (double(up) - double(down))));
        analytic.push_back(g[i]);
      }
      CHECK(test::close(variant + ": d loss / d " + e.name, analytic, numeric, {2e-3 * peak, 2e-2}));
    }
  }
}
