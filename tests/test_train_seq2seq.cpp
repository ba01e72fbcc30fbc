// Training an encoder-decoder (issue 40, item 7): train_graph.h's seq2seq_train_step on the CPU
// reference and on the GPU. The CPU step's loss is the inference model's (make_cpu_seq2seq,
// teacher-forced); its gradients, through the decoder's cross-attention into the encoder, are
// checked against the float64 PyTorch reference (Marian's block) and against central
// differences of its own loss for Marian's block (post-norm, swish, Marian's sinusoids, scaled
// embeddings, the logits bias, a tied head) and a pre-norm variant with final norms on both
// sides and an untied head. The GPU step is held to the CPU step under both kernel sets.
// Tolerances: the losses within 1e-5 relative (both are double-accumulated references; they
// differ in the order of their sums and in rounding to float between ops). Gradients as
// test_train.cpp's: |numeric - analytic| <= 2e-3 max|g| + 2e-2 |g|.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/formats/config.h"
#include "model/formats/safetensors.h"
#include "model/forward/seq2seq.h"
#include "model/ops/cpu/optimizer.h"
#include "model/training/cpu_trainer.h"
#include "model/training/gpu_trainer.h"
#include "model/training/parameters.h"
#include "model/training/save.h"
#include "tests/compare.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"
#include "tests/seq2seq_folder.h"
#include "tests/train_parameters.h"
#include "tests/train_reference.h"

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

using test::random_parameters;

double peak_of(const Parameters& grads) {
  double peak = 0;
  for (const model::ExpectedTensor& e : grads.tensors())
    for (float g : grads.tensor(e.name)) peak = std::max(peak, std::abs(double(g)));
  return peak;
}

// Every gradient tensor within 2e-3 of its largest magnitude. Cross-attention's key bias
// (cross.c_k.bias) has a zero gradient in exact arithmetic (a query's scores all move by q . b,
// which the softmax ignores): both sides hold rounding noise there, ~1e-9 here, so its scale is
// floored at 1e-4 of the largest gradient of the step.
void check_grads(const std::string& what, const Parameters& got, const Parameters& ref) {
  const double step_peak = peak_of(ref);
  for (const model::ExpectedTensor& e : ref.tensors()) {
    const std::vector<float>& r = ref.tensor(e.name);
    double peak = 0;
    for (float v : r) peak = std::max(peak, std::abs(double(v)));
    if (e.name.ends_with("cross.c_k.bias")) peak = std::max(peak, 1e-4 * step_peak);
    CHECK(test::close(what + ": d loss / d " + e.name, got.tensor(e.name), r, {2e-3 * peak, 0}));
  }
}

}  // namespace

TEST_CASE("train seq2seq: the CPU step's loss is the inference model's, teacher-forced") {
  const model::Config c = tiny("marian");
  const test::TinyModel m(c);
  Parameters params = Parameters::from_checkpoint(*m.checkpoint), grads(c);
  const double loss =
      model::training::cpu_seq2seq_train_step(params, grads, kSources, kInputs, kTargets, B, S, T);
  // The inference model: each source encoded, the decoder run over its inputs, every row's
  // cross-entropy against its target, in double.
  auto inference = model::make_cpu_seq2seq(*m.checkpoint, model::Precision::F32);
  double sum = 0;
  for (uint32_t b = 0; b < B; b++) {
    inference->set_source(std::span(kSources).subspan(b * S, S));
    const std::vector<float> logits =
        inference->decoder().logits(std::span(kInputs).subspan(b * T, T));
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

// Against the float64 PyTorch reference written from modeling_marian
// (tools/reference/seq2seq_ref.py --grads): the folder's weights as they load, the same batch,
// the loss within 1e-6 relative and every tensor's gradient (the reference's, presented under
// the canonical names by the loader that presents the weights) within 1e-5 of its largest
// magnitude: ours is double-accumulated with float storage between ops, the reference float64
// throughout, its gradients stored as float32. Cross-attention's key bias is floored as above.
TEST_CASE("train seq2seq: the CPU step's gradients against the float64 PyTorch reference") {
  if (!test::has_torch()) return;
  const model::Config c = tiny("marian");
  const test::TinyModel m(c);
  Parameters params = Parameters::from_checkpoint(*m.checkpoint), grads(c);
  const double loss =
      model::training::cpu_seq2seq_train_step(params, grads, kSources, kInputs, kTargets, B, S, T);
  const test::ReferenceStep ref =
      test::seq2seq_reference_step(m.dir.path(), {kSources, kInputs, kTargets, {}, S, T});
  CHECK(loss == doctest::Approx(ref.loss).epsilon(1e-6));
  test::check_reference_grads("", grads, ref.grads);
}

TEST_CASE("train seq2seq: the CPU step's gradients against central differences") {
  for (const std::string variant : {"marian", "pre-norm"}) {
    const model::Config c = tiny(variant);
    Parameters params = random_parameters(c, 41), grads(c), scratch(c);
    const auto step = [&](Parameters& g) {
      return model::training::cpu_seq2seq_train_step(params, g, kSources, kInputs, kTargets, B, S,
                                                     T);
    };
    const double loss = step(grads);
    CHECK(std::isfinite(loss));
    test::check_step_gradients(variant, params, grads, [&] { return step(scratch); });
    // Every encoder tensor learns through the cross-attention: none of its gradients is all zero.
    for (const model::ExpectedTensor& e : grads.tensors()) {
      if (!e.name.starts_with("enc.")) continue;
      const std::vector<float>& g = grads.tensor(e.name);
      const std::string what = variant + ": " + e.name + " has no gradient";
      CHECK_MESSAGE(std::any_of(g.begin(), g.end(), [](float x) { return x != 0.0f; }), what);
    }
  }
}

// The GPU step against the CPU reference step, as test_train.cpp's for decoders: the loss within
// 1e-5 relative, every gradient tensor within 2e-3 of its largest magnitude; then three AdamW
// steps, the losses within 1e-4 relative and the weights within 1e-4 of the largest weight. Two
// micro-batches (M = 2) give the gradients of their mean. Both kernel sets.
TEST_CASE("train seq2seq: the GPU step matches the CPU reference step, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets)
    for (const std::string variant : {"marian", "pre-norm"}) {
      const model::Config c = tiny(variant);
      const Parameters start = random_parameters(c, 60);
      const std::string what = variant + ", " + test::kernels_name(set);
      model::training::GpuTrainer gpu(g.with_kernels(set), start, B, T, false, 1, {}, false, S);
      CHECK(gpu.source_length() == S);
      const model::training::StepResult got = gpu.gradients(kInputs, kTargets, kSources);
      Parameters params = start, grads(c), got_grads(c);
      const double ref = model::training::cpu_seq2seq_train_step(params, grads, kSources, kInputs,
                                                                 kTargets, B, S, T);
      CHECK_MESSAGE(std::abs(got.loss - ref) <= 1e-5 * ref, what);
      CHECK_MESSAGE(std::abs(gpu.evaluate(kInputs, kTargets, kSources) - ref) <= 1e-5 * ref, what);
      gpu.download_grads(got_grads);
      check_grads(what, got_grads, grads);

      // Three AdamW steps against the reference's update.
      model::training::StepSettings s;
      s.lr = 1e-2f;
      s.clip = 0;
      Parameters m(c), v(c);
      for (uint64_t step = 1; step <= 3; step++) {
        s.step = step;
        const double gpu_loss = gpu.step(kInputs, kTargets, s, kSources).loss;
        const double cpu_loss = model::training::cpu_seq2seq_train_step(params, grads, kSources,
                                                                        kInputs, kTargets, B, S, T);
        const std::string at = what + ", step " + std::to_string(step);
        CHECK_MESSAGE(std::abs(gpu_loss - cpu_loss) <= 1e-4 * cpu_loss, at);
        for (const model::ExpectedTensor& e : params.tensors()) {
          std::vector<float>& p = params.tensor(e.name);
          model::cpu::adamw(
              p.data(), m.tensor(e.name).data(), v.tensor(e.name).data(),
              grads.tensor(e.name).data(), p.size(),
              {s.lr, s.beta1, s.beta2, s.eps, e.shape.size() >= 2 ? s.weight_decay : 0.0f}, step);
        }
      }
      Parameters after(c);
      gpu.download(after);
      for (const model::ExpectedTensor& e : params.tensors()) {
        std::vector<float> got_p = after.tensor(e.name), ref_p = params.tensor(e.name);
        // The key biases' gradients are zero in exact arithmetic (a query's scores all move by
        // q . b, which the softmax ignores): both sides hold rounding noise there, which AdamW's
        // m / sqrt(v) turns into steps of any size up to lr (test_train.cpp's note). Self-
        // attention's are the middle third of c_attn.bias, cross-attention's all of c_k.bias.
        const bool self_keys = e.name.ends_with("attn.c_attn.bias"),
                   cross_keys = e.name.ends_with("cross.c_k.bias");
        if (self_keys || cross_keys) {
          const auto from = static_cast<std::ptrdiff_t>(self_keys ? c.n_embd : 0),
                     to = static_cast<std::ptrdiff_t>(self_keys ? 2 * c.n_embd : got_p.size());
          std::fill(got_p.begin() + from, got_p.begin() + to, 0.0f);
          std::fill(ref_p.begin() + from, ref_p.begin() + to, 0.0f);
        }
        double peak = 0;
        for (float x : ref_p) peak = std::max(peak, std::abs(double(x)));
        CHECK(test::close(what + ": " + e.name + " after 3 steps", got_p, ref_p,
                          {1e-4 * std::max(peak, 1.0), 0}));
      }

      // Two micro-batches, each one of the sequences: the gradients of their mean, as one batch.
      model::training::GpuTrainer halves(g.with_kernels(set), start, 1, T, false, 2, {}, false, S);
      halves.gradients(kInputs, kTargets, kSources);
      Parameters half_grads(c);
      halves.download_grads(half_grads);
      Parameters fresh = start, ref_grads(c);
      model::training::cpu_seq2seq_train_step(fresh, ref_grads, kSources, kInputs, kTargets, B, S,
                                              T);
      check_grads(what + ", M = 2", half_grads, ref_grads);
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
  GPU_TEST(g);
  using model::training::GpuTrainer;
  CHECK_THROWS_WITH_AS(GpuTrainer(g.device, params, B, T), doctest::Contains("1 <= S <= 512"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(GpuTrainer(g.device, params, B, T, false, 1, {}, true, S),
                       doctest::Contains("not built for encoder-decoders"), std::invalid_argument);
  GpuTrainer gpu(g.device, params, B, T, false, 1, {}, false, S);
  CHECK_THROWS_WITH_AS(gpu.gradients(kInputs, kTargets), doctest::Contains("takes 12 source ids"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gpu.next_logits(std::vector<int32_t>{1, 2}),
                       doctest::Contains("needs a source"), std::invalid_argument);
}

// A trained encoder-decoder's checkpoint is a MarianMTModel folder: the names and shapes
// transformers saved tests/data/hf/marian with (less what it regenerates: the sinusoids, the
// stacks' copies of the shared embedding), values that load back bit for bit, and the folder's
// SentencePiece files beside them.
TEST_CASE("train seq2seq: a checkpoint saves in MarianMTModel's layout and loads back") {
  const test::TempDir src, out;
  test::marian_folder(src.path());
  const auto saved = model::Checkpoint::load(src.path());
  const Parameters trained = random_parameters(saved->config(), 77);
  model::training::save_checkpoint(out.path(), trained, src.path());
  const auto ours = model::SafeTensors::open(out / "model.safetensors");
  const auto theirs = model::SafeTensors::open(src / "model.safetensors");
  for (const model::TensorView& t : theirs->tensors()) {
    CAPTURE(t.name);
    const bool regenerated = t.name.find("embed_positions") != std::string::npos ||
                             t.name.find("embed_tokens") != std::string::npos;
    const model::TensorView* mine = ours->find(t.name);
    CHECK(regenerated == (mine == nullptr));
    if (mine) CHECK(mine->shape == t.shape);
  }
  CHECK(ours->tensors().size() <= theirs->tensors().size());
  const auto back = model::Checkpoint::load(out.path());
  CHECK(back->warnings().empty());
  const Parameters loaded = Parameters::from_checkpoint(*back);
  for (const model::ExpectedTensor& e : trained.tensors()) {
    CAPTURE(e.name);
    CHECK(loaded.tensor(e.name) == trained.tensor(e.name));
  }
  for (const char* f : {"source.spm", "target.spm", "vocab.json"})
    CHECK(test::read_file(out / f) == test::read_file(src / f));
}
