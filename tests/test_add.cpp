// add: GPU against the CPU reference. Tolerance: exact. An fp32 sum is correctly rounded on both
// sides (the reference adds in double, which holds the exact sum of two floats, then rounds).
#include <doctest/doctest.h>

#include <string>

#include "model/ops/gpu/add.h"
#include "model/ops/gpu/policy.h"
#include "tests/add.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

TEST_CASE("add matches the CPU reference") {
  GPU_TEST(g);
  // Not multiples of the workgroup, one element, and GPT-2 XL's widest activation (T=1024, 4C).
  for (uint32_t n : {1u, 7u, 255u, 256u, 257u, 768u * 3 + 1, 1024u * 6400}) {
    CAPTURE(n);
    std::vector<float> a = test::random_floats(n, 1 + n, -1000, 1000);
    std::vector<float> b = test::random_floats(n, 2 + n);
    vk::Arena arena(g.device, 3 * n * sizeof(float) + 1024, vk::MemoryKind::Device, "test add");
    vk::BufferSpan ga = test::to_gpu(g, arena, a), gb = test::to_gpu(g, arena, b);
    vk::BufferSpan out = arena.alloc(n * sizeof(float));

    vk::Recorder rec(g.device);
    rec.begin();
    test::gpu_add(g.kernels, rec, out, ga, gb, n);
    rec.run();

    std::vector<float> ref(n);
    test::cpu_add(ref.data(), a.data(), b.data(), n);
    CHECK(test::close("add", test::from_gpu(g, out, n), ref, {0, 0}));
  }
}

TEST_CASE("add in place (out aliases a) chains through automatic barriers") {
  GPU_TEST(g);
  const uint32_t n = 1000;
  std::vector<float> x = test::random_floats(n, 11), d = test::random_floats(n, 12);
  vk::Arena arena(g.device, 2 * n * sizeof(float) + 256, vk::MemoryKind::Device, "test add chain");
  vk::BufferSpan gx = test::to_gpu(g, arena, x), gd = test::to_gpu(g, arena, d);
  vk::Recorder rec(g.device);
  rec.begin();
  for (int step = 0; step < 3; step++) test::gpu_add(g.kernels, rec, gx, gx, gd, n);  // x += d, 3 times
  rec.run();
  CHECK(rec.stats().barriers == 2);  // each step reads what the previous one wrote
  std::vector<float> ref = x;
  for (int step = 0; step < 3; step++) test::cpu_add(ref.data(), ref.data(), d.data(), n);
  CHECK(test::close("add x3", test::from_gpu(g, gx, n), ref, {0, 0}));
}

// The model's wrappers (training): model::gpu::add in place and split over a lowered
// maxStorageBufferRange, and model::gpu::fill. Exact, as above.
TEST_CASE("gpu::add in place in chunks, and gpu::fill") {
  GPU_TEST(g);
  test::LoweredGpu small(g, {.max_storage_buffer_range = 1024});  // chunks of 256 floats
  const uint32_t n = 1000;
  std::vector<float> a = test::random_floats(n, 5, -1000, 1000), b = test::random_floats(n, 6);
  vk::Arena arena(small.device, 3 * n * sizeof(float) + 4096, vk::MemoryKind::Device, "test gpu::add");
  const vk::BufferSpan ga = test::to_gpu(small.device, arena, a), gb = test::to_gpu(small.device, arena, b),
                       z = arena.alloc(n * sizeof(float));
  vk::Recorder rec(small.device);
  rec.begin();
  model::gpu::add(small.kernels, rec, {.out = ga, .a = ga, .b = gb, .n = n});
  model::gpu::fill(small.kernels, rec, {.out = z, .n = n, .value = -2.5f});
  rec.run();
  CHECK(rec.stats().dispatches == 8);
  std::vector<float> ref(n);
  test::cpu_add(ref.data(), a.data(), b.data(), n);
  CHECK(test::close("gpu::add in place", test::from_gpu(small.device, ga, n), ref, {0, 0}));
  CHECK(test::close("gpu::fill", test::from_gpu(small.device, z, n), std::vector<float>(n, -2.5f), {0, 0}));
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::add(small.kernels, rec, {.out = ga, .a = ga, .b = gb.sub(0, 400), .n = n}),
      doctest::Contains("add: b"), vk::Error);
  CHECK_THROWS_WITH_AS(
      model::gpu::fill(small.kernels, rec, {.out = z.sub(0, 400), .n = n, .value = 0.0f}),
      doctest::Contains("fill: out"), vk::Error);
  rec.end();
}

// Past maxComputeWorkGroupCount[0] (lowered to 2): the workgroups of a 1-D op fold into rows of
// the grid, and each row must go on where the last ended. Both kernel sets. Exact.
TEST_CASE("gpu::add and gpu::fill with the grid folded into rows, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets) {
    test::LoweredGpu folded(g, {.max_workgroup_count_x = 2}, set);
    const uint32_t n = 3001;  // 12 workgroups of 256 (the GPU set), in 6 rows
    const std::string what = std::string(vk::kernel_set_name(set)) + " kernels";
    std::vector<float> a = test::random_floats(n, 9, -1000, 1000), b = test::random_floats(n, 10);
    vk::Arena arena(folded.device, 3 * n * sizeof(float) + 4096, vk::MemoryKind::Device,
                    "test folded grid");
    const vk::BufferSpan ga = test::to_gpu(folded.device, arena, a),
                         gb = test::to_gpu(folded.device, arena, b), z = arena.alloc(n * sizeof(float));
    vk::Recorder rec(folded.device);
    rec.begin();
    model::gpu::add(folded.kernels, rec, {.out = ga, .a = ga, .b = gb, .n = n});
    model::gpu::fill(folded.kernels, rec, {.out = z, .n = n, .value = -2.5f});
    rec.run();
    std::vector<float> ref(n);
    test::cpu_add(ref.data(), a.data(), b.data(), n);
    CHECK(test::close("gpu::add, " + what, test::from_gpu(folded.device, ga, n), ref, {0, 0}));
    CHECK(test::close("gpu::fill, " + what, test::from_gpu(folded.device, z, n),
                      std::vector<float>(n, -2.5f), {0, 0}));
  }
}

// model::gpu::add under both kernel sets: the CPU set's add_texel where n is in whole texels
// (arena spans are texel-aligned), add otherwise; in place, as training adds gradients. Exact.
TEST_CASE("gpu::add matches the CPU reference, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets)
    for (uint32_t n : {1000u, 1001u, 4u}) {
      const vk::Device& dev = g.with_kernels(set);
      const std::string what = "gpu::add, n = " + std::to_string(n) + ", " + vk::kernel_set_name(set) + " kernels";
      std::vector<float> a = test::random_floats(n, 7, -1000, 1000), b = test::random_floats(n, 8);
      vk::Arena arena(dev, 2 * n * sizeof(float) + 4096, vk::MemoryKind::Device, "test gpu::add sets");
      const vk::BufferSpan ga = test::to_gpu(dev, arena, a), gb = test::to_gpu(dev, arena, b);
      vk::Recorder rec(dev, true);
      rec.begin();
      model::gpu::add(model::gpu::Ops(dev), rec, {.out = ga, .a = ga, .b = gb, .n = n});
      rec.run();
      std::vector<float> ref(n);
      test::cpu_add(ref.data(), a.data(), b.data(), n);
      CHECK(test::close(what, test::from_gpu(dev, ga, n), ref, {0, 0}));
      const bool texel = model::gpu::Ops(dev).policy().texel_elementwise &&
                         dev.caps().storage_texel_buffers && n % 4 == 0;
      if (dev.caps().timestamps)
        for (const vk::DispatchTime& t : rec.timings())
          CHECK_MESSAGE(t.shader == (texel ? "add_texel" : "add"), what);
    }
}
