// kv_store: GPU against the CPU reference. Tolerance: exact (a copy; an fp16 cache's values
// rounded to nearest even by both, in integer arithmetic on the GPU: shaders/common/half.glsl).
#include <doctest/doctest.h>

#include <vector>

#include "model/ops/cpu/common.h"
#include "model/ops/cpu/kv_store.h"
#include "model/ops/gpu/kv_store.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

TEST_CASE("kv_store writes K and V rows at the cache position, and nothing else") {
  GPU_TEST(g);
  for (model::DType cache : {model::DType::F32, model::DType::F16}) {
    const bool f16 = cache == model::DType::F16;
    CAPTURE(f16);
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
                          {f16 ? 6u : 3u, 1024, {{0, 1024}}}};  // fp16: an even C
    unsigned seed = 1;
    for (const Case& c : cases) {
      CAPTURE(c.C);
      // Caches start as a sentinel pattern, so rows written by mistake show up.
      std::vector<float> k_ref = test::random_floats(size_t{c.n_ctx} * c.C, seed++, 5, 6);
      std::vector<float> v_ref = test::random_floats(size_t{c.n_ctx} * c.C, seed++, 7, 8);
      if (f16)  // the sentinels as the fp16 cache holds them
        for (std::vector<float>* r : {&k_ref, &v_ref})
          for (float& x : *r) x = model::cpu::round_to_half(x);
      vk::Arena arena(g.device,
                      (2 * k_ref.size() + 3 * size_t{c.n_ctx} * c.C * c.steps.size()) * 4 + 4096,
                      vk::MemoryKind::Device, "test kv_store");
      vk::BufferSpan k = test::to_gpu(g.device, arena, k_ref, cache),
                     v = test::to_gpu(g.device, arena, v_ref, cache);
      vk::Recorder rec(g.device);
      rec.begin();
      for (const Step& s : c.steps) {
        std::vector<float> qkv = test::random_floats(size_t{s.T} * 3 * c.C, seed++);
        model::gpu::kv_store(g.kernels, rec,
                             {.k_cache = k,
                              .v_cache = v,
                              .qkv = test::to_gpu(g, arena, qkv),
                              .T = s.T,
                              .C = c.C,
                              .pos = s.pos,
                              .cache = cache});
        model::cpu::kv_store(k_ref.data(), v_ref.data(), qkv.data(), s.T, c.C, s.pos, cache);
      }
      rec.run();
      CHECK(test::close("k_cache", test::from_gpu(g.device, k, k_ref.size(), cache), k_ref,
                        {0, 0}));
      CHECK(test::close("v_cache", test::from_gpu(g.device, v, v_ref.size(), cache), v_ref,
                        {0, 0}));
    }
  }
}

TEST_CASE("kv_store's fp16 cache rounds as the CPU does: ties to even, subnormals, the edge") {
  GPU_TEST(g);
  // Values whose rounding differs between to-nearest-even and toward zero or ties away: ties
  // between two halves (1 + 2^-11 goes down to 1, 1 + 3 * 2^-11 up), subnormal ties (1.5 *
  // 2^-24 goes to 2^-23, 2^-25 to 0), just past a tie, an fp32 denormal, the largest finite
  // half's neighbourhood (65519 stays 65504), and both signs.
  std::vector<float> values = {1 + 0x1p-11f, 1 + 3 * 0x1p-11f, 1.5f * 0x1p-24f, 0x1p-25f,
                               1.01f * 0x1p-25f, 6.0e-5f, 1e-40f, 65519.0f, 65504.0f,
                               2049.0f, 2051.0f, 0.1f, 1.0f / 3, 0.0f};
  const size_t n = values.size();
  for (size_t i = 0; i < n; i++) values.push_back(-values[i]);
  const uint32_t C = static_cast<uint32_t>(values.size());  // one row: K and V the same values
  std::vector<float> qkv(3 * C, 0.0f);
  std::copy(values.begin(), values.end(), qkv.begin() + C);
  std::copy(values.begin(), values.end(), qkv.begin() + 2 * C);
  std::vector<float> k_ref(C), v_ref(C);
  model::cpu::kv_store(k_ref.data(), v_ref.data(), qkv.data(), 1, C, 0, model::DType::F16);
  vk::Arena arena(g.device, 64 * 1024, vk::MemoryKind::Device, "test kv_store rounding");
  const vk::BufferSpan k = arena.alloc(C * 2), v = arena.alloc(C * 2);
  vk::Recorder rec(g.device);
  rec.begin();
  model::gpu::kv_store(g.kernels, rec,
                       {.k_cache = k,
                        .v_cache = v,
                        .qkv = test::to_gpu(g, arena, qkv),
                        .T = 1,
                        .C = C,
                        .pos = 0,
                        .cache = model::DType::F16});
  rec.run();
  CHECK(test::close("k_cache", test::from_gpu(g.device, k, C, model::DType::F16), k_ref, {0, 0}));
  CHECK(test::close("v_cache", test::from_gpu(g.device, v, C, model::DType::F16), v_ref, {0, 0}));
  CHECK(k_ref[0] == 1.0f);  // the reference itself: ties to even
  CHECK(k_ref[1] == 1 + 0x1p-9f);
  CHECK(k_ref[2] == 0x1p-23f);
  CHECK(k_ref[3] == 0.0f);
  CHECK(k_ref[7] == 65504.0f);
}

TEST_CASE("kv_store rejects rows past the cache and short inputs") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 64 * 1024, vk::MemoryKind::Device, "test kv_store errors");
  const uint32_t C = 16, n_ctx = 8;
  vk::BufferSpan k = arena.alloc(n_ctx * C * 4), v = arena.alloc(n_ctx * C * 4),
                 qkv = arena.alloc(4 * 3 * C * 4);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::kv_store(g.kernels, rec,
                           {.k_cache = k, .v_cache = v, .qkv = qkv, .T = 4, .C = C, .pos = 5}),
      doctest::Contains("n_ctx = 8"), vk::Error);
  CHECK_THROWS_WITH_AS(
      model::gpu::kv_store(
          g.kernels, rec,
          {.k_cache = k, .v_cache = v.sub(0, 6 * C * 4), .qkv = qkv, .T = 1, .C = C, .pos = 6}),
      doctest::Contains("n_ctx = 6"), vk::Error);
  CHECK_THROWS_WITH_AS(
      model::gpu::kv_store(g.kernels, rec,
                           {.k_cache = k, .v_cache = v, .qkv = qkv, .T = 5, .C = C, .pos = 0}),
      doctest::Contains("qkv"), vk::Error);
  CHECK_THROWS_AS(
      model::gpu::kv_store(g.kernels, rec,
                           {.k_cache = k, .v_cache = v, .qkv = qkv, .T = 0, .C = C, .pos = 0}),
      vk::Error);
  model::gpu::kv_store(g.kernels, rec,
                       {.k_cache = k,
                        .v_cache = v,
                        .qkv = qkv,
                        .T = 4,
                        .C = C,
                        .pos = 4});  // the last 4 rows fit exactly
  // fp16: rows of half the bytes, so 16 of them fit; an odd C cannot be stored in words.
  model::gpu::kv_store(g.kernels, rec,
                       {.k_cache = k,
                        .v_cache = v,
                        .qkv = qkv,
                        .T = 4,
                        .C = C,
                        .pos = 12,
                        .cache = model::DType::F16});
  CHECK_THROWS_WITH_AS(model::gpu::kv_store(g.kernels, rec,
                                            {.k_cache = k,
                                             .v_cache = v,
                                             .qkv = qkv,
                                             .T = 4,
                                             .C = C,
                                             .pos = 13,
                                             .cache = model::DType::F16}),
                       doctest::Contains("n_ctx = 16"), vk::Error);
  CHECK_THROWS_WITH_AS(model::gpu::kv_store(g.kernels, rec,
                                            {.k_cache = k,
                                             .v_cache = v,
                                             .qkv = qkv,
                                             .T = 1,
                                             .C = 15,
                                             .pos = 0,
                                             .cache = model::DType::F16}),
                       doctest::Contains("an fp16 cache needs an even C"), vk::Error);
  rec.end();
}
