// kv_store and kv_store_batch: GPU against the CPU reference or a copy made on the host.
// Tolerance: exact (a copy).
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "model/ops/cpu/kv_store.h"
#include "model/ops/gpu/kv_store.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "tests/matmul_problem.h"
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

TEST_CASE("kv_store_batch writes each row's key and value into its own sequence's cache") {
  GPU_TEST(g);
  // Three sequences' caches in one buffer, starting at texels that are not whole rows apart
  // (C = 40: a row is 10 texels), each row at its own position; every other float keeps its
  // sentinel. Row t of qkv goes to row pos of the cache at texel `first`: {pos, first} per row.
  const uint32_t C = 40, T = 3, floats = 400 * 4;
  const std::vector<uint32_t> rows = {0, 0, 5, 65, 2, 200};
  std::vector<float> k_ref = test::random_floats(floats, 31, 5, 6);
  std::vector<float> v_ref = test::random_floats(floats, 32, 7, 8);
  const std::vector<float> qkv = test::random_floats(size_t{T} * 3 * C, 33);
  for (uint32_t t = 0; t < T; t++) {
    const size_t at = size_t{rows[2 * t + 1]} * 4 + size_t{rows[2 * t]} * C;
    std::memcpy(&k_ref[at], &qkv[t * 3 * C + C], C * 4);
    std::memcpy(&v_ref[at], &qkv[t * 3 * C + 2 * C], C * 4);
  }
  vk::Arena arena(g.device, 3 * floats * 4 + 4096, vk::MemoryKind::Device, "test kv_store_batch");
  vk::BufferSpan k = test::to_gpu(g, arena, test::random_floats(floats, 31, 5, 6));
  vk::BufferSpan v = test::to_gpu(g, arena, test::random_floats(floats, 32, 7, 8));
  vk::BufferSpan q = test::to_gpu(g, arena, qkv);
  vk::BufferSpan r = test::upload(g.device, arena, rows.data(), rows.size() * 4);
  vk::Recorder rec(g.device);
  rec.begin();
  model::gpu::kv_store_batch(g.kernels, rec, k, v, q, r, T, C);
  rec.run();
  CHECK(test::close("k_caches", test::from_gpu(g, k, floats), k_ref, {0, 0}));
  CHECK(test::close("v_caches", test::from_gpu(g, v, floats), v_ref, {0, 0}));

  rec.begin();
  CHECK_THROWS_WITH_AS(model::gpu::kv_store_batch(g.kernels, rec, k, v, q, r, 4, C),
                       doctest::Contains("qkv"), vk::Error);
  CHECK_THROWS_WITH_AS(model::gpu::kv_store_batch(g.kernels, rec, k, v, q, r.sub(0, 20), T, C),
                       doctest::Contains("rows"), vk::Error);
  CHECK_THROWS_AS(model::gpu::kv_store_batch(g.kernels, rec, k, v, q, r, 0, C), vk::Error);
  rec.end();
}
