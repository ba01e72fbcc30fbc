// Activation recomputation (issue 41, --recompute): a trainer that keeps each block's input only
// and runs each block's forward again before its backward gives the bits of one that keeps every
// activation: the gradients, losses, norms, moments and weights after AdamW steps, with
// gradient accumulation, under both kernel sets; on GPT-2's head dim of 64 with a few hundred
// tokens, and on the post-norm and attention-only blocks (the other paths of the block's
// forward). Exact equality, no tolerance: the recomputation runs the same kernels on the same
// inputs, so any difference is a bug (a stale shared buffer, a missing barrier, another kernel
// chosen). Also the memory it saves: every block's activations but one's.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/formats/config.h"
#include "model/training/cpu_trainer.h"
#include "model/training/gpu_trainer.h"
#include "model/training/parameters.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "tests/train_parameters.h"

namespace {

using model::training::GpuTrainer;
using model::training::Parameters;

struct Case {
  std::string name;
  model::Config c;
  uint32_t B, T;
  uint64_t block_floats;  // floats per token of a block's activations other than its input
};

// Sizes keep every buffer a multiple of 256 bytes, so that no alignment pads the figures.
std::vector<Case> cases() {
  std::vector<Case> out;
  model::Config gpt2 = model::gpt2_config(128, 3, 2);  // head dim 64
  gpt2.n_vocab = 300;
  gpt2.n_ctx = 256;
  // Normed, QKV, attention's output, the stream between the sublayers, Normed, hidden, activated.
  out.push_back({"GPT-2's block, head dim 64", gpt2, 2, 160, 7 * 128 + 2 * 512});
  model::Config post = model::gpt2_config(16, 3, 2);
  post.n_vocab = 11, post.n_ctx = 8, post.n_inner = 24;
  post.pre_norm = false;
  post.positions = model::PositionKind::Sinusoidal;
  post.tie_word_embeddings = false;
  post.activation = model::Activation::Relu;
  post.attention_bias = post.mlp_bias = false;
  // QKV, attention's output, the sum, the stream; hidden, activated, the sum.
  out.push_back({"post-norm", post, 2, 8, 7 * 16 + 2 * 24});
  model::Config attn = model::gpt2_config(16, 3, 2);
  attn.n_vocab = 11, attn.n_ctx = 8, attn.n_inner = 24;
  attn.attention_only = true;
  attn.final_norm = false;
  out.push_back({"attention-only, no final norm", attn, 2, 8, 4 * 16});  // no norm: QKV, output
  return out;
}

using test::random_parameters;

// Bits, not values: -0 against 0 or one NaN against another would pass ==.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_same(const std::string& what, const Parameters& a, const Parameters& b) {
  for (const model::ExpectedTensor& e : a.tensors())
    CHECK_MESSAGE(same_bits(a.tensor(e.name), b.tensor(e.name)), what, ": ", e.name);
}

}  // namespace

TEST_CASE("recomputation gives the bits of keeping every activation, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets)
    for (const Case& k : cases()) {
      const std::string what = k.name + (set == vk::KernelSet::Gpu ? ", gpu kernels" : ", cpu kernels");
      const model::Config& c = k.c;
      const uint32_t M = 2, N = k.B * k.T;
      const Parameters start = random_parameters(c, 90);
      std::vector<int32_t> ids(size_t{M} * N), targets(ids.size());
      for (size_t i = 0; i < ids.size(); i++)
        ids[i] = static_cast<int32_t>((i * 7919 + 13) % c.n_vocab),
        targets[i] = static_cast<int32_t>((i * 104729 + 5) % c.n_vocab);
      GpuTrainer keep(g.with_kernels(set), start, k.B, k.T, false, M),
          re(g.with_kernels(set), start, k.B, k.T, false, M, {}, true);
      REQUIRE(re.recomputes());
      // The activations of every block but one fewer, and nothing else changed.
      const GpuTrainer::Memory mk = keep.memory(), mr = re.memory();
      CHECK_MESSAGE(mk.activations - mr.activations == uint64_t{c.n_layer - 1} * N * k.block_floats * 4,
                    what);
      CHECK_MESSAGE(mk.total() - mr.total() == mk.activations - mr.activations, what);

      const model::training::StepResult a = keep.gradients(ids, targets), b = re.gradients(ids, targets);
      CHECK_MESSAGE(a.loss == b.loss, what);
      CHECK_MESSAGE(a.grad_norm == b.grad_norm, what);
      CHECK_MESSAGE(re.dispatches() > keep.dispatches(), what);  // the blocks' forwards again
      Parameters ga(c), gb(c);
      keep.download_grads(ga);
      re.download_grads(gb);
      check_same(what + ", gradients", ga, gb);

      model::training::StepSettings s;
      s.lr = 1e-2f;
      s.clip = static_cast<float>(0.5 * a.grad_norm);
      for (uint64_t step = 1; step <= 2; step++) {
        s.step = step;
        const model::training::StepResult x = keep.step(ids, targets, s), y = re.step(ids, targets, s);
        CHECK_MESSAGE(x.loss == y.loss, what, ", step ", step);
        CHECK_MESSAGE(x.grad_norm == y.grad_norm, what, ", step ", step);
      }
      Parameters wa(c), wb(c), ma(c), mb(c), va(c), vb(c);
      keep.download(wa), re.download(wb);
      keep.download_moments(ma, va), re.download_moments(mb, vb);
      check_same(what + ", weights after 2 steps", wa, wb);
      check_same(what + ", m", ma, mb);
      check_same(what + ", v", va, vb);
      // The forward alone (evaluation, a sample) through the shared buffers.
      const std::span<const int32_t> row(ids.data(), N), row_t(targets.data(), N);
      CHECK_MESSAGE(keep.evaluate(row, row_t) == re.evaluate(row, row_t), what);
      CHECK_MESSAGE(same_bits(keep.next_logits(row.first(k.T)), re.next_logits(row.first(k.T))), what);

      // The CPU reference step walks the same graph: the same bits there too.
      if (set == vk::KernelSet::Gpu && c.n_embd <= 16) {
        Parameters p1 = start, p2 = start, g1(c), g2(c);
        const auto first = std::span<const int32_t>(ids).first(N), first_t = std::span<const int32_t>(targets).first(N);
        CHECK(model::training::cpu_train_step(p1, g1, first, first_t, k.B, k.T) ==
              model::training::cpu_train_step(p2, g2, first, first_t, k.B, k.T, true));
        check_same(what + ", the CPU reference's gradients", g1, g2);
      }
    }
}
