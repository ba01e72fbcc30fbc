// The optimizer ops (training): grad_sum_squares and adamw / sgd, GPU (fp32) against
// model::cpu::grad_sum_squares, adamw and sgd (double).
// Tolerances: the sum of squares |d| <= 1e-5 |ref|: fp32 partial sums of 4096 elements (each
// invocation 16 in a row, then a tree), then a tree over the partials; ~log2(n) roundings of
// relative 6e-8 each, far below 1e-5 even at a model's 10^8 elements. The step: m and v
// |d| <= 1e-7 + 1e-6 |ref| (two fp32 products and a sum, a few ulp; the clip's scale in fp32
// adds ~1e-7 relative); param |d| <= 1e-7 + 1e-6 |ref| (its own rounding, ulp/2 = 6e-8
// relative, and the update's few-ulp error times lr).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/ops/cpu/optimizer.h"
#include "model/ops/gpu/optimizer.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

// grad_sum_squares of tensors of these sizes (random values, seeded): {gpu, the reference}.
std::pair<float, double> sum_squares(const vk::Device& device, const model::gpu::Ops& kernels,
                                     const std::vector<uint64_t>& counts, unsigned seed,
                                     uint32_t* dispatches = nullptr) {
  std::vector<std::vector<float>> host;
  size_t floats = 0;
  for (uint64_t n : counts) floats += n;
  const uint64_t scratch_floats = model::gpu::grad_sum_squares_scratch(device.caps(), counts);
  vk::Arena arena(device, (floats + scratch_floats + 64) * 4 + 65536 * (counts.size() + 2),
                  vk::MemoryKind::Device, "test grad_sum_squares");
  std::vector<vk::BufferSpan> spans;
  double ref = 0;
  for (uint64_t n : counts) {
    host.push_back(test::random_floats(n, seed++, -2, 2));
    spans.push_back(test::to_gpu(device, arena, host.back()));
    ref += model::cpu::grad_sum_squares(host.back().data(), n);
  }
  const vk::BufferSpan out = arena.alloc(4), scratch = arena.alloc(scratch_floats * 4);
  vk::Recorder rec(device);
  rec.begin();
  model::gpu::grad_sum_squares(
      kernels, rec, {.out = out, .scratch = scratch, .tensors = spans, .counts = counts});
  rec.run();
  if (dispatches) *dispatches = rec.stats().dispatches;
  return {test::from_gpu(device, out, 1)[0], ref};
}

}  // namespace

TEST_CASE("grad_sum_squares matches the CPU reference, the same bits every run") {
  GPU_TEST(g);
  const std::vector<uint64_t> counts = {1000, 70001, 5, 4096};
  const auto [got, ref] = sum_squares(g.device, g.kernels, counts, 10);
  CHECK(std::abs(double(got) - ref) <= 1e-5 * ref);
  const float again = sum_squares(g.device, g.kernels, counts, 10).first;
  CHECK(std::memcmp(&got, &again, 4) == 0);
  // Tensors split over bindings of 1024 floats: the 70001 become 69 pieces.
  test::LoweredGpu small(g, {.max_storage_buffer_range = 4096});
  uint32_t dispatches = 0;
  const auto [split, split_ref] = sum_squares(small.device, small.kernels, counts, 10, &dispatches);
  CHECK(std::abs(double(split) - split_ref) <= 1e-5 * split_ref);
  CHECK(dispatches == 1 + 69 + 1 + 4 + 1);
}

// Also with maxComputeWorkGroupCount[0] lowered to 3: the 12 workgroups fold into 4 rows, as a
// model's largest tensors do on devices with the minimum limit of 65,535 (GPT-2's wte past
// 16.7 M elements at 256 a workgroup).
TEST_CASE("adamw and sgd match the CPU reference, clipped or not, with the grid folded") {
  GPU_TEST(g);
  test::LoweredGpu folded(g, {.max_workgroup_count_x = 3});
  const uint64_t n = 3001;
  const std::vector<float> p0 = test::random_floats(n, 20),
                           m0 = test::random_floats(n, 21, -0.1f, 0.1f),
                           v0 = test::random_floats(n, 22, 0.0f, 0.05f),
                           grad = test::random_floats(n, 23);
  const double norm = std::sqrt(model::cpu::grad_sum_squares(grad.data(), n));  // ~31.6
  for (const bool fold : {false, true})
    for (bool sgd : {false, true})
      for (float clip : {0.0f, 1.0f, 100.0f}) {
        const vk::Device& dev = fold ? folded.device : g.device;
        const model::gpu::Ops& kernels = fold ? folded.kernels : g.kernels;
        const model::gpu::OptimizerStep o{sgd, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, clip, 3};
        std::vector<float> p = p0, m = m0, v = v0;
        const float scale =
            clip > 0 ? static_cast<float>(std::min(1.0, double(clip) / (norm + 1e-6))) : 1.0f;
        if (sgd)
          model::cpu::sgd(p.data(), grad.data(), n, o.lr, o.weight_decay, scale);
        else
          model::cpu::adamw(p.data(), m.data(), v.data(), grad.data(), n,
                            {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, o.step, scale);
        vk::Arena arena(dev, 6 * n * 4 + 65536 * 8, vk::MemoryKind::Device, "test adamw");
        const vk::BufferSpan gp = test::to_gpu(dev, arena, p0), gm = test::to_gpu(dev, arena, m0),
                             gv = test::to_gpu(dev, arena, v0), gg = test::to_gpu(dev, arena, grad),
                             norm_sq = arena.alloc(4),
                             scratch = arena.alloc(
                                 model::gpu::grad_sum_squares_scratch(dev.caps(), {{n}}) * 4);
        vk::Recorder rec(dev);
        rec.begin();
        const uint64_t counts[] = {n};
        model::gpu::grad_sum_squares(
            kernels, rec,
            {.out = norm_sq, .scratch = scratch, .tensors = std::span(&gg, 1), .counts = counts});
        model::gpu::adamw(
            kernels, rec,
            {.param = gp, .m = gm, .v = gv, .grad = gg, .norm_sq = norm_sq, .n = n, .options = o});
        rec.run();
        const std::string what = std::string(sgd ? "sgd" : "adamw") + ", clip " +
                                 std::to_string(clip) + (fold ? ", folded grid" : "");
        CHECK(test::close(what + ": param", test::from_gpu(dev, gp, n), p, {1e-7, 1e-6}));
        CHECK(test::close(what + ": m", test::from_gpu(dev, gm, n), m, {1e-7, 1e-6}));
        CHECK(test::close(what + ": v", test::from_gpu(dev, gv, n), v, {1e-7, 1e-6}));
      }
}

TEST_CASE("the optimizer ops reject bad arguments") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 65536 * 4, vk::MemoryKind::Device, "test optimizer errors");
  const vk::BufferSpan a = arena.alloc(4000), b = arena.alloc(4000), c = arena.alloc(4000),
                       d = arena.alloc(400), one = arena.alloc(4);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::adamw(
          g.kernels, rec,
          {.param = a, .m = b, .v = c, .grad = d, .norm_sq = one, .n = 1000, .options = {}}),
      doctest::Contains("adamw: grad"), vk::Error);
  model::gpu::OptimizerStep zero;
  zero.step = 0;
  CHECK_THROWS_WITH_AS(
      model::gpu::adamw(
          g.kernels, rec,
          {.param = a, .m = b, .v = c, .grad = c, .norm_sq = one, .n = 1000, .options = zero}),
      doctest::Contains("steps count from 1"), vk::Error);
  const uint64_t counts[] = {1000, 5};
  CHECK_THROWS_WITH_AS(
      model::gpu::grad_sum_squares(
          g.kernels, rec,
          {.out = one, .scratch = d, .tensors = std::span(&a, 1), .counts = counts}),
      doctest::Contains("2 sizes"), vk::Error);
  rec.end();
}

TEST_CASE("adamw leaves everything as it was when the gradients' norm is not finite") {
  GPU_TEST(g);
  const uint64_t n = 100;
  const std::vector<float> p0 = test::random_floats(n, 30), m0 = test::random_floats(n, 31),
                           v0 = test::random_floats(n, 32, 0.0f, 1.0f),
                           grad = test::random_floats(n, 33);
  for (float bad : {INFINITY, NAN}) {
    vk::Arena arena(g.device, 65536 * 8, vk::MemoryKind::Device, "test adamw non-finite");
    const vk::BufferSpan gp = test::to_gpu(g.device, arena, p0),
                         gm = test::to_gpu(g.device, arena, m0),
                         gv = test::to_gpu(g.device, arena, v0),
                         gg = test::to_gpu(g.device, arena, grad),
                         norm_sq = test::to_gpu(g.device, arena, std::vector<float>{bad});
    vk::Recorder rec(g.device);
    rec.begin();
    model::gpu::OptimizerStep o;
    o.clip = 1.0f;
    model::gpu::adamw(
        g.kernels, rec,
        {.param = gp, .m = gm, .v = gv, .grad = gg, .norm_sq = norm_sq, .n = n, .options = o});
    rec.run();
    CHECK(test::close("param", test::from_gpu(g.device, gp, n), p0, {0, 0}));
    CHECK(test::close("m", test::from_gpu(g.device, gm, n), m0, {0, 0}));
    CHECK(test::close("v", test::from_gpu(g.device, gv, n), v0, {0, 0}));
  }
}
