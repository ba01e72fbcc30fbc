// Training an encoder-decoder on pairs of different lengths (issue 40): one step's sources padded
// to its longest with pad_token_id, which no query attends to (the encoder's self-attention and
// cross-attention stop at each source's length), and its targets with ignore_target (-100, as
// transformers' labels), which the mean leaves out.
// - The CPU step on a padded batch is each pair's own unpadded step, weighted by its targets:
//   the loss and every gradient. Tolerance 1e-6 relative for the loss, 1e-5 of each tensor's
//   largest gradient: the same arithmetic per row, the sums over rows in another order.
// - The same against the float64 PyTorch reference (seq2seq_ref.py --grads with an attention
//   mask and labels of -100), test_train_seq2seq's tolerances.
// - The GPU step against the CPU step under both kernel sets, in one micro-batch and in three
//   (the mean over all three's targets), test_train_seq2seq's tolerances.
// - What padding refuses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/formats/config.h"
#include "model/ops/types.h"
#include "model/training/cpu_trainer.h"
#include "model/training/gpu_trainer.h"
#include "model/training/pairs.h"
#include "model/training/parameters.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"
#include "tests/train_parameters.h"
#include "tests/train_reference.h"

namespace {

using model::training::Parameters;

// Marian's block, width 16, vocabulary 11: pad_token_id and decoder_start_token_id are 10.
model::Config tiny() {
  return model::marian_config(16, 2, 2, 11);
}
constexpr int32_t kPad = 10, kStart = 10;

// A pair as its tokenizers give it: the source's ids and the target's (labels).
struct Pair {
  std::vector<int32_t> source, target;
};
// Three pairs of different lengths: sources of 6, 3 and 2 tokens, targets of 5, 2 and 3.
const std::vector<Pair> kPairs = {
    {{3, 1, 4, 1, 5, 9}, {9, 5, 1, 4, 0}}, {{2, 6, 0}, {8, 0}}, {{7, 0}, {3, 5, 0}}};

// Pairs as one step: sources padded to S with the pad id, the decoder's inputs (the start token,
// then the target shifted right) padded with it too, the targets with ignore_target.
struct Batch {
  uint32_t B = 0, S = 0, T = 0;
  std::vector<int32_t> sources, inputs, targets, mask;
};
Batch pad(std::span<const Pair> pairs) {
  Batch b;
  b.B = static_cast<uint32_t>(pairs.size());
  for (const Pair& p : pairs) {
    b.S = std::max(b.S, static_cast<uint32_t>(p.source.size()));
    b.T = std::max(b.T, static_cast<uint32_t>(p.target.size()));
  }
  for (const Pair& p : pairs) {
    for (uint32_t s = 0; s < b.S; s++) {
      b.sources.push_back(s < p.source.size() ? p.source[s] : kPad);
      b.mask.push_back(s < p.source.size() ? 1 : 0);
    }
    for (uint32_t t = 0; t < b.T; t++) {
      b.inputs.push_back(t == 0 ? kStart : t < p.target.size() + 1 ? p.target[t - 1] : kPad);
      b.targets.push_back(t < p.target.size() ? p.target[t] : model::ignore_target);
    }
  }
  return b;
}

double cpu_step(Parameters& params, Parameters& grads, const Batch& b) {
  return model::training::cpu_seq2seq_train_step(params, grads, b.sources, b.inputs, b.targets, b.B,
                                                 b.S, b.T);
}

double peak_of(const std::vector<float>& v) {
  double peak = 0;
  for (float x : v) peak = std::max(peak, std::abs(double(x)));
  return peak;
}

// Every gradient tensor of got within tol of the reference tensor's largest magnitude; the
// cross-attention key bias's (zero in exact arithmetic: rounding noise) floored at 1e-4 of the
// step's largest gradient.
void check_grads(const std::string& what, const Parameters& got, const Parameters& ref,
                 double tol) {
  double step_peak = 0;
  for (const model::ExpectedTensor& e : ref.tensors())
    step_peak = std::max(step_peak, peak_of(ref.tensor(e.name)));
  for (const model::ExpectedTensor& e : ref.tensors()) {
    double peak = peak_of(ref.tensor(e.name));
    if (e.name.ends_with("cross.c_k.bias") || e.name.ends_with("attn.c_attn.bias"))
      peak = std::max(peak, 1e-4 * step_peak);
    CHECK(test::close(what + ": d loss / d " + e.name, got.tensor(e.name), ref.tensor(e.name),
                      {tol * peak, 0}));
  }
}

}  // namespace

TEST_CASE("train padding: a padded batch's step is each pair's own, weighted by its targets") {
  const model::Config c = tiny();
  Parameters params = test::random_parameters(c, 70), grads(c), one(c), weighted(c);
  const Batch batch = pad(kPairs);
  REQUIRE((batch.S == 6 && batch.T == 5));
  const double loss = cpu_step(params, grads, batch);
  // Each pair alone, unpadded: its mean over its own targets, weighted by n_b / n.
  double n = 0, expected = 0;
  for (const Pair& p : kPairs) n += double(p.target.size());
  for (const Pair& p : kPairs) {
    const double w = double(p.target.size()) / n;
    expected += w * cpu_step(params, one, pad(std::span(&p, 1)));
    for (const model::ExpectedTensor& e : weighted.tensors())
      for (size_t i = 0; i < one.tensor(e.name).size(); i++)
        weighted.tensor(e.name)[i] += static_cast<float>(w * double(one.tensor(e.name)[i]));
  }
  CHECK(loss == doctest::Approx(expected).epsilon(1e-6));
  check_grads("padded against each pair alone", grads, weighted, 1e-5);
  // The padding's values change nothing: other pad ids in the padded places, the same bits.
  Batch other = batch;
  for (size_t i = 0; i < other.inputs.size(); i++)
    if (other.targets[i] == model::ignore_target) other.inputs[i] = 4;
  Parameters again(c);
  CHECK(cpu_step(params, again, other) == loss);
  for (const model::ExpectedTensor& e : grads.tensors())
    CHECK_MESSAGE(again.tensor(e.name) == grads.tensor(e.name), e.name);
}

TEST_CASE("train padding: the CPU step against the float64 PyTorch reference") {
  if (!test::has_torch()) return;
  const model::Config c = tiny();
  const test::TinyModel m(c);
  Parameters params = Parameters::from_checkpoint(*m.checkpoint), grads(c);
  const Batch b = pad(kPairs);
  const double loss = cpu_step(params, grads, b);
  const test::ReferenceStep ref = test::seq2seq_reference_step(
      m.dir.path(), {b.sources, b.inputs, b.targets, b.mask, b.S, b.T});
  CHECK(loss == doctest::Approx(ref.loss).epsilon(1e-6));
  test::check_reference_grads("padded batch: ", grads, ref.grads);
}

TEST_CASE("train padding: the GPU step matches the CPU step, both kernel sets") {
  GPU_TEST(g);
  const model::Config c = tiny();
  const Parameters start = test::random_parameters(c, 71);
  const Batch b = pad(kPairs);
  Parameters params = start, ref(c);
  const double ref_loss = cpu_step(params, ref, b);
  for (vk::KernelSet set : test::kKernelSets) {
    const std::string what = test::kernels_name(set);
    // One micro-batch of the three pairs, and three micro-batches of one: the same mean.
    for (const uint32_t M : {1u, 3u}) {
      model::training::GpuTrainer gpu(g.with_kernels(set), start, b.B / M, b.T, false, M, {}, false,
                                      b.S);
      const double loss = gpu.gradients(b.inputs, b.targets, b.sources).loss;
      CHECK_MESSAGE(std::abs(loss - ref_loss) <= 1e-5 * ref_loss, what, ", M = ", M);
      Parameters got(c);
      gpu.download_grads(got);
      check_grads(what + ", M = " + std::to_string(M), got, ref, 2e-3);
      if (M == 1)
        CHECK(std::abs(gpu.evaluate(b.inputs, b.targets, b.sources) - ref_loss) <= 1e-5 * ref_loss);
    }
  }
}

TEST_CASE("train padding: what a padded step refuses") {
  const model::Config c = tiny();
  Parameters params(c), grads(c);
  const Batch b = pad(kPairs);
  // A source of padding alone.
  Batch empty_source = b;
  std::fill_n(empty_source.sources.begin() + b.S, b.S, kPad);
  CHECK_THROWS_WITH_AS(cpu_step(params, grads, empty_source),
                       doctest::Contains("source 1 of the batch is padding alone"),
                       std::invalid_argument);
  GPU_TEST(g);
  model::training::GpuTrainer gpu(g.device, params, b.B, b.T, false, 1, {}, false, b.S);
  CHECK_THROWS_WITH_AS(
      gpu.gradients(empty_source.inputs, empty_source.targets, empty_source.sources),
      doctest::Contains("padding alone"), std::invalid_argument);
  // Targets of padding alone: no mean to take.
  const std::vector<int32_t> none(b.targets.size(), model::ignore_target);
  CHECK_THROWS_WITH_AS(
      model::training::cpu_seq2seq_train_step(params, grads, b.sources, b.inputs, none, b.B, b.S,
                                              b.T),
      doctest::Contains("a step whose targets are all padding (-100)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(gpu.gradients(b.inputs, none, b.sources),
                       doctest::Contains("targets are all padding (-100)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(gpu.evaluate(b.inputs, none, b.sources),
                       doctest::Contains("an evaluation whose targets are all padding"),
                       std::invalid_argument);
  // A negative target other than -100 is an error, not padding.
  std::vector<int32_t> bad = b.targets;
  bad[2] = -1;
  CHECK_THROWS_WITH_AS(gpu.gradients(b.inputs, bad, b.sources),
                       doctest::Contains("target -1 at position 2 is outside the vocabulary"),
                       vk::Error);
}
