// Training an encoder-decoder (issue 40, item 7): train_graph.h's seq2seq_train_step on the CPU
// reference. Its loss is the inference model's (make_cpu_seq2seq, teacher-forced), and its
// gradients, through the decoder's cross-attention into the encoder, are checked against central
// differences of its own loss for Marian's block (post-norm, swish, Marian's sinusoids, scaled
// embeddings, the logits bias, a tied head) and a pre-norm variant with final norms on both
// sides and an untied head.
// Tolerances: the losses within 1e-5 relative (both are double-accumulated references; they
// differ in the order of their sums and in rounding to float between ops). Gradients as
// test_train.cpp's: |numeric - analytic| <= 2e-3 max|g| + 2e-2 |g|.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/formats/config.h"
#include "model/forward/seq2seq.h"
#include "model/training/cpu_trainer.h"
#include "model/training/parameters.h"
#include "tests/compare.h"
#include "tests/model_fixture.h"

namespace {

using model::training::Parameters;

// Two sources of S = 6 tokens and two targets of T = 5, over 11 tokens; the decoder's inputs
// start from the config's decoder_start_token_id (10) and its targets are the inputs shifted.
constexpr uint32_t B = 2, S = 6, T = 5;
const std::vector<int32_t> kSources = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
const std::vector<int32_t> kInputs = {10, 9, 5, 1, 4, 10, 8, 5, 3, 5};
const std::vector<int32_t> kTargets = {9, 5, 1, 4, 0, 8, 5, 3, 5, 0};

model::Config tiny(const std::string& variant) {
  model::Config c = model::marian_config(16, 2, 2, 11);
  if (variant == "pre-norm") {
    c.pre_norm = true;
    c.final_norm = true;
    c.activation = model::Activation::GeluTanh;
    c.tie_word_embeddings = false;
    c.embed_scale = 1.0f;
  }
  return c;
}

double peak_of(const Parameters& grads) {
  double peak = 0;
  for (const model::ExpectedTensor& e : grads.tensors())
    for (float g : grads.tensor(e.name)) peak = std::max(peak, std::abs(double(g)));
  return peak;
}

}  // namespace

TEST_CASE("train seq2seq: the CPU step's loss is the inference model's, teacher-forced") {
  const model::Config c = tiny("marian");
  const test::TinyModel m(c);
  Parameters params = Parameters::from_checkpoint(*m.checkpoint), grads(c);
  const double loss = model::training::cpu_seq2seq_train_step(params, grads, kSources, kInputs,
                                                              kTargets, B, S, T);
  // The inference model: each source encoded, the decoder run over its inputs, every row's
  // cross-entropy against its target, in double.
  auto inference = model::make_cpu_seq2seq(*m.checkpoint, model::Precision::F32);
  double sum = 0;
  for (uint32_t b = 0; b < B; b++) {
    inference->set_source(std::span(kSources).subspan(b * S, S));
    const std::vector<float> logits = inference->decoder().logits(std::span(kInputs).subspan(b * T, T));
    for (uint32_t t = 0; t < T; t++) {
      const float* row = logits.data() + size_t{t} * c.n_vocab;
      double mx = -INFINITY, total = 0;
      for (uint32_t v = 0; v < c.n_vocab; v++) mx = std::max(mx, double(row[v]));
      for (uint32_t v = 0; v < c.n_vocab; v++) total += std::exp(double(row[v]) - mx);
      sum += mx + std::log(total) - double(row[kTargets[b * T + t]]);
    }
  }
  const double expected = sum / (B * T);
  CHECK(loss == doctest::Approx(expected).epsilon(1e-5));
  CHECK(peak_of(grads) > 0);
}

TEST_CASE("train seq2seq: the CPU step's gradients against central differences") {
  for (const std::string variant : {"marian", "pre-norm"}) {
    const model::Config c = tiny(variant);
    Parameters params(c), grads(c), scratch(c);
    // GPT-2's initialisation, every value moved by up to 0.2 (as test_train.cpp's).
    params.init_gpt2(41);
    unsigned seed = 41;
    for (const model::ExpectedTensor& e : params.tensors()) {
      std::vector<float>& v = params.tensor(e.name);
      const std::vector<float> noise = test::random_floats(v.size(), ++seed, -0.2f, 0.2f);
      for (size_t i = 0; i < v.size(); i++) v[i] += noise[i];
    }
    const auto step = [&](Parameters& g) {
      return model::training::cpu_seq2seq_train_step(params, g, kSources, kInputs, kTargets, B, S, T);
    };
    const double loss = step(grads);
    CHECK(std::isfinite(loss));
    const double peak = peak_of(grads);
    for (const model::ExpectedTensor& e : params.tensors()) {
      std::vector<float>& v = params.tensor(e.name);
      const std::vector<float>& g = grads.tensor(e.name);
      std::vector<float> numeric, analytic;
      // Up to 6 elements spread over the tensor.
      for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / 6)) {
        const float x0 = v[i], h = 1e-3f, up = x0 + h, down = x0 - h;
        v[i] = up;
        const double l_up = step(scratch);
        v[i] = down;
        const double l_down = step(scratch);
        v[i] = x0;
        numeric.push_back(float((l_up - l_down) / (double(up) - double(down))));
        analytic.push_back(g[i]);
      }
      CHECK(test::close(variant + ": d loss / d " + e.name, analytic, numeric, {2e-3 * peak, 2e-2}));
    }
    // Every encoder tensor learns through the cross-attention: none of its gradients is all zero.
    for (const model::ExpectedTensor& e : grads.tensors()) {
      if (!e.name.starts_with("enc.")) continue;
      const std::vector<float>& g = grads.tensor(e.name);
      const std::string what = variant + ": " + e.name + " has no gradient";
      CHECK_MESSAGE(std::any_of(g.begin(), g.end(), [](float x) { return x != 0.0f; }), what);
    }
  }
}

TEST_CASE("train seq2seq: what the step refuses") {
  const model::Config c = tiny("marian");
  Parameters params(c), grads(c);
  using model::training::cpu_seq2seq_train_step;
  CHECK_THROWS_WITH_AS(cpu_seq2seq_train_step(params, grads, std::span(kSources).first(5), kInputs,
                                              kTargets, B, S, T),
                       doctest::Contains("sources must hold B * S tokens"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(model::training::cpu_train_step(params, grads, kInputs, kTargets, B, T),
                       doctest::Contains("cpu_seq2seq_train_step"), std::invalid_argument);
  model::Config t5 = model::t5_config(16, 32, 1, 2, 11, false);
  CHECK_THROWS_WITH_AS(Parameters{t5}, doctest::Contains("relative position bias"),
                       std::invalid_argument);
}
