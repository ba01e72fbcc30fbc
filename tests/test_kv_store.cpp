// kv_store: GPU against the CPU reference. Tolerance: exact (a copy).
#include <doctest/doctest.h>

#include <vector>

#include "model/ops/cpu/kv_store.h"
#include "model/ops/gpu/kv_store.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

TEST_CASE("kv_store writes K and V rows at the cache position, and nothing else") {
  GPU_TEST(g);
  // (C, n_ctx, then (pos, T) steps): a prefill, appended chunks, decode steps up to the last row.
  struct Step {
    uint32_t pos, T;
  };
  struct Case {
    uint32_t C, n_ctx;
    std::vector<Step> steps;
  };
  const Case cases[] = {{40, 16, {{0, 10}, {10, 3}, {13, 1}, {15, 1}}},
                        {1600, 9, {{0, 7}, {7, 1}}},
                        {3, 1024, {{0, 1024}}}};
  unsigned seed = 1;
  for (const Case& c : cases) {
    CAPTURE(c.C);
    // Caches start as a sentinel pattern, so rows written by mistake show up.
    std::vector<float> k_ref = test::random_floats(size_t{c.n_ctx} * c.C, seed++, 5, 6);
    std::vector<float> v_ref = test::random_floats(size_t{c.n_ctx} * c.C, seed++, 7, 8);
    vk::Arena arena(g.device,
                     (2 * k_ref.size() + 3 * size_t{c.n_ctx} * c.C * c.steps.size()) * 4 + 4096,
                     vk::MemoryKind::Device, "test kv_store");
    vk::BufferSpan k = test::to_gpu(g, arena, k_ref), v = test::to_gpu(g, arena, v_ref);
    vk::Recorder rec(g.device);
    rec.begin();
    for (const Step& s : c.steps) {
      std::vector<float> qkv = test::random_floats(size_t{s.T} * 3 * c.C, seed++);
      model::gpu::kv_store(g.kernels, rec, k, v, test::to_gpu(g, arena, qkv), s.T, c.C, s.pos);
      model::cpu::kv_store(k_ref.data(), v_ref.data(), qkv.data(), s.T, c.C, s.pos);
    }
    rec.run();
    CHECK(test::close("k_cache", test::from_gpu(g, k, k_ref.size()), k_ref, {0, 0}));
    CHECK(test::close("v_cache", test::from_gpu(g, v, v_ref.size()), v_ref, {0, 0}));
  }
}

TEST_CASE("kv_store rejects rows past the cache and short inputs") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 64 * 1024, vk::MemoryKind::Device, "test kv_store errors");
  const uint32_t C = 16, n_ctx = 8;
  vk::BufferSpan k = arena.alloc(n_ctx * C * 4), v = arena.alloc(n_ctx * C * 4),
                  qkv = arena.alloc(4 * 3 * C * 4);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(model::gpu::kv_store(g.kernels, rec, k, v, qkv, 4, C, 5),
                       doctest::Contains("n_ctx = 8"), vk::Error);
  CHECK_THROWS_WITH_AS(model::gpu::kv_store(g.kernels, rec, k, v.sub(0, 6 * C * 4), qkv, 1, C, 6),
                       doctest::Contains("n_ctx = 6"), vk::Error);
  CHECK_THROWS_WITH_AS(model::gpu::kv_store(g.kernels, rec, k, v, qkv, 5, C, 0), doctest::Contains("qkv"),
                       vk::Error);
  CHECK_THROWS_AS(model::gpu::kv_store(g.kernels, rec, k, v, qkv, 0, C, 0), vk::Error);
  model::gpu::kv_store(g.kernels, rec, k, v, qkv, 4, C, 4);  // the last 4 rows fit exactly
  rec.end();
}
