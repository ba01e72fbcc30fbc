// cross_entropy: GPU (fp32; a shared-memory tree per row, or for the CPU kernel set where V is
// in whole texels an invocation per row summing vec4 partials) against model::cpu::cross_entropy
// (double), both kernel sets.
// Tolerance: losses |d| <= 2e-5 + 1e-6 |ref|; dlogits |d| <= 2e-6 / mean_over + 1e-5 |ref|, more
// for large logits (below). The
// GPU sums exp(l - max) over V in fp32, each invocation a strided share of the row, then a tree:
// a relative error of S up to ~(V / WG + log2 WG) ulp in the worst case (1.2e-5 at V = 50257),
// ~1e-6 typically, which log(S) turns into an absolute error of logsumexp; exp rounds each
// softmax weight once more (a few ulp), and p - 1 at the target cancels to an absolute error of
// the same size. Measured on lavapipe: losses 1.9e-6 (V = 1000 and 50257), 2.2e-5 with logits
// near 1000; dlogits 9.3e-10 (N = 37, V = 1000, mean over 74), 2.8e-7 near 1000.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/ops/cpu/cross_entropy.h"
#include "model/ops/gpu/cross_entropy.h"
#include "model/ops/gpu/policy.h"
#include "model/ops/types.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

struct Result {
  std::vector<float> losses, dlogits;
  uint32_t dispatches;
  std::vector<std::string> shaders;  // what ran, where the device has timestamps
};

Result run_gpu(test::Gpu& g, const vk::Device& device, const model::gpu::Ops& kernels,
               const std::vector<float>& logits, const std::vector<int32_t>& targets, uint32_t V,
               uint32_t mean_over) {
  (void)g;
  const auto N = static_cast<uint32_t>(targets.size());
  vk::Arena arena(device, logits.size() * 4 + targets.size() * 8 + 65536, vk::MemoryKind::Device,
                  "test cross_entropy");
  const vk::BufferSpan l = test::to_gpu(device, arena, logits);
  const vk::BufferSpan t = arena.alloc(targets.size() * 4), out = arena.alloc(targets.size() * 4);
  vk::upload(device, t, targets.data(), targets.size() * 4);
  vk::Recorder rec(device, true);
  rec.begin();
  model::gpu::cross_entropy(
      kernels, rec,
      {.losses = out, .logits = l, .targets = t, .N = N, .V = V, .mean_over = mean_over});
  rec.run();
  std::vector<std::string> shaders;
  for (const vk::DispatchTime& d : rec.timings()) shaders.push_back(d.shader);
  return {test::from_gpu(device, out, N), test::from_gpu(device, l, logits.size()),
          rec.stats().dispatches, shaders};
}

// The reference per row (the CPU op returns the mean): each row alone, then dlogits rescaled
// from 1/1 to 1/mean_over.
void run_cpu(const std::vector<float>& logits, const std::vector<int32_t>& targets, uint32_t V,
             uint32_t mean_over, std::vector<float>& losses, std::vector<float>& dlogits) {
  losses.assign(targets.size(), 0.0f);
  dlogits.assign(logits.size(), 0.0f);
  std::vector<float> row(V);
  for (size_t r = 0; r < targets.size(); r++) {
    losses[r] = static_cast<float>(
        model::cpu::cross_entropy(row.data(), logits.data() + r * V, &targets[r], 1, V));
    for (uint32_t v = 0; v < V; v++)
      dlogits[r * V + v] = static_cast<float>(double(row[v]) / mean_over);
  }
}

std::vector<int32_t> random_targets(size_t n, uint32_t V, unsigned seed) {
  std::vector<int32_t> t;
  for (float u : test::random_floats(n, seed, 0.0f, 1.0f))
    t.push_back(std::min<int32_t>(static_cast<int32_t>(u * static_cast<float>(V)), int32_t(V) - 1));
  t[0] = 0;
  t[n - 1] = int32_t(V) - 1;
  return t;
}

// padded: every third row from row 1 has no target (ignore_target).
void check(test::Gpu& g, const vk::Device& device, const model::gpu::Ops& kernels, uint32_t N, uint32_t V,
           float offset, unsigned seed, uint32_t dispatches = 1, bool padded = false) {
  std::vector<float> logits = test::random_floats(size_t{N} * V, seed, -8.0f, 8.0f);
  for (float& x : logits) x += offset;
  std::vector<int32_t> targets = random_targets(N, V, seed + 1);
  for (uint32_t r = 1; padded && r < N; r += 3) targets[r] = model::ignore_target;
  std::vector<float> losses, dlogits;
  run_cpu(logits, targets, V, 2 * N, losses, dlogits);
  const Result r = run_gpu(g, device, kernels, logits, targets, V, 2 * N);
  const std::string what = "N=" + std::to_string(N) + " V=" + std::to_string(V) + " offset " +
                           std::to_string(offset);
  // Logits of magnitude M carry ulp(M) of their own, which logsumexp and l - logsumexp pass on
  // (to each weight's exponent): 1.2e-7 M more (offset 1000: ~1.2e-4).
  const double ulps = 1.2e-7 * (8.0 + std::abs(double(offset)));
  CHECK(test::close(what + ": losses", r.losses, losses, {2e-5 + ulps, 1e-6}));
  CHECK(test::close(what + ": dlogits", r.dlogits, dlogits, {(2e-6 + ulps) / (2.0 * N), 1e-5 + ulps}));
  CHECK(r.dispatches == dispatches);
  // The CPU set's texel kernel where V is in whole texels and one dispatch holds the rows.
  const bool texel = model::gpu::Ops(device).policy().texel_elementwise &&
                     device.caps().storage_texel_buffers && V % 4 == 0 && dispatches == 1;
  for (const std::string& shader : r.shaders)
    CHECK_MESSAGE(shader == (texel ? "cross_entropy_texel" : "cross_entropy"), what);
  // The same bits again: a fixed reduction order.
  const Result again = run_gpu(g, device, kernels, logits, targets, V, 2 * N);
  CHECK(std::memcmp(again.dlogits.data(), r.dlogits.data(), r.dlogits.size() * 4) == 0);
  CHECK(std::memcmp(again.losses.data(), r.losses.data(), r.losses.size() * 4) == 0);
}

}  // namespace

TEST_CASE("cross_entropy matches the CPU reference, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& d = g.with_kernels(set);
    check(g, d, model::gpu::Ops(d), 37, 1000, 0.0f, 100);
    check(g, d, model::gpu::Ops(d), 5, 50257, 0.0f, 110);    // GPT-2's vocabulary
    check(g, d, model::gpu::Ops(d), 9, 65, 1000.0f, 120);    // large logits: max-shifted
    check(g, d, model::gpu::Ops(d), 9, 256, 1000.0f, 125);   // the same in whole texels
    check(g, d, model::gpu::Ops(d), 3, 1, 0.0f, 130);        // one class: loss 0, gradient 0
  }
}

TEST_CASE("cross_entropy in several dispatches past maxStorageBufferRange") {
  GPU_TEST(g);
  // 12000-byte bindings: rows of 999 logits (not a multiple of the alignment), 2 per dispatch
  // (3 and the alignment slack do not fit).
  test::LoweredGpu small(g, {.max_storage_buffer_range = 12000});
  check(g, small.device, small.kernels, 10, 999, 0.0f, 200, 5);
  check(g, small.device, small.kernels, 10, 999, 0.0f, 210, 5, true);  // rows of padding among them
}

TEST_CASE("cross_entropy: a target outside the vocabulary gives a NaN loss, others unharmed") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets)
    for (const uint32_t V : {50u, 52u}) {  // 52: the CPU set's texel kernel
      const vk::Device& d = g.with_kernels(set);
      std::vector<float> logits = test::random_floats(3 * V, 300);
      const std::vector<int32_t> targets = {4, int32_t(V), -1};
      const Result r = run_gpu(g, d, model::gpu::Ops(d), logits, targets, V, 3);
      CHECK(std::isfinite(r.losses[0]));
      CHECK(std::isnan(r.losses[1]));
      CHECK(std::isnan(r.losses[2]));
      CHECK(std::memcmp(r.dlogits.data() + V, logits.data() + V, 2 * V * 4) == 0);  // untouched
    }
  vk::Arena arena(g.device, 65536, vk::MemoryKind::Device, "test cross_entropy errors");
  const vk::BufferSpan l = arena.alloc(4000), t = arena.alloc(40), out = arena.alloc(40);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::cross_entropy(
          g.kernels, rec,
          {.losses = out, .logits = l, .targets = t, .N = 10, .V = 101, .mean_over = 10}),
      doctest::Contains("cross_entropy: logits"), vk::Error);
  CHECK_THROWS_WITH_AS(
      model::gpu::cross_entropy(
          g.kernels, rec,
          {.losses = out, .logits = l, .targets = t, .N = 10, .V = 100, .mean_over = 0}),
      doctest::Contains("must be positive"), vk::Error);
  rec.end();
}

// Padding (a target of ignore_target, transformers' label -100): its row's loss is 0 and its
// gradient row 0, bit for bit, and the other rows are what they are without it, at GPT-2's
// vocabulary, a vocabulary in whole texels (the CPU set's texel kernel) and one that is not.
// The CPU reference's mean is over the rows with a target.
TEST_CASE("cross_entropy: padded rows (ignore_target) add nothing, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets)
    for (const uint32_t V : {50257u, 1000u, 999u}) {
      const vk::Device& d = g.with_kernels(set);
      const uint32_t N = 12, real = 8;
      const std::vector<float> logits = test::random_floats(size_t{N} * V, 400 + V, -8.0f, 8.0f);
      std::vector<int32_t> targets = random_targets(N, V, 410);
      for (uint32_t r : {1u, 5u, 6u, 11u}) targets[r] = model::ignore_target;
      std::vector<float> losses, dlogits;
      run_cpu(logits, targets, V, real, losses, dlogits);
      const Result r = run_gpu(g, d, model::gpu::Ops(d), logits, targets, V, real);
      const std::string what = "V=" + std::to_string(V);
      CHECK(test::close(what + ": losses", r.losses, losses, {2e-5, 1e-6}));
      CHECK(test::close(what + ": dlogits", r.dlogits, dlogits, {2e-6 / real, 1e-5}));
      for (uint32_t row : {1u, 5u, 6u, 11u}) {
        CHECK(r.losses[row] == 0.0f);
        const auto* g_row = r.dlogits.data() + size_t{row} * V;
        CHECK(std::all_of(g_row, g_row + V, [](float x) { return x == 0.0f; }));
      }
      // The reference over the whole batch: the mean over the 8 rows with a target, and their
      // rows' gradients over 8.
      std::vector<float> whole(logits.size());
      const double loss =
          model::cpu::cross_entropy(whole.data(), logits.data(), targets.data(), N, V);
      double sum = 0;
      for (float l : losses) sum += double(l);
      CHECK(loss == doctest::Approx(sum / real).epsilon(1e-6));
      CHECK(test::close(what + ": the whole batch's dlogits", whole, dlogits, {1e-9, 1e-6}));
    }
  // No row with a target: a loss of 0 and no gradient, not a division by zero.
  const std::vector<float> logits = test::random_floats(20, 420);
  const std::vector<int32_t> none(2, model::ignore_target);
  std::vector<float> d(20, 1.0f);
  CHECK(model::cpu::cross_entropy(d.data(), logits.data(), none.data(), 2, 10) == 0.0);
  CHECK(std::all_of(d.begin(), d.end(), [](float x) { return x == 0.0f; }));
}
