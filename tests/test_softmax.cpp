// softmax: GPU against the CPU reference (double).
// Tolerance: |d| <= 1e-6 + 1e-5 |ref|. The GPU evaluates exp((x - max) * t) in fp32 (Vulkan allows
// exp 3 + 2|arg| ulp, so a few 1e-6 relative for arguments near -20, where outputs are ~1e-9 of
// the largest), sums up to 50257 terms in fp32 (a tree of per-invocation partial sums, relative
// ~1e-6) and multiplies by 1/sum. Measured on lavapipe: max |d| 1.2e-7, and relative errors
// above 2e-6 only on probabilities below 3e-9. 1e-5 relative keeps a 5x margin for devices with
// a coarser exp; 1e-6 absolute covers the tiny probabilities and flushed denormals.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "model/cpu/softmax.h"
#include "model/gpu/softmax.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

constexpr test::Tolerance kTol{1e-6, 1e-5};

// softmax of x on the kernels' device; in place (out = x) when in_place.
std::vector<float> run_gpu(vkr::Kernels& kernels, const std::vector<float>& x, uint32_t R,
                           uint32_t N, float inv_temperature, bool in_place = false) {
  const vkr::Device& dev = kernels.device();
  const size_t bytes = x.size() * sizeof(float);
  vkr::Arena arena(dev, 2 * bytes + 1024, vkr::MemoryKind::Device, "test softmax");
  vkr::BufferSpan gx = test::to_gpu(dev, arena, x);
  vkr::BufferSpan out = in_place ? gx : arena.alloc(bytes);
  vkr::Recorder rec(dev);
  rec.begin();
  gpu::softmax(kernels, rec, out, gx, R, N, inv_temperature);
  rec.run();
  return test::from_gpu(dev, out, x.size());
}

std::vector<float> run_cpu(const std::vector<float>& x, uint32_t R, uint32_t N,
                           float inv_temperature) {
  std::vector<float> ref(x.size());
  cpu::softmax(ref.data(), x.data(), R, N, inv_temperature);
  return ref;
}

}  // namespace

TEST_CASE("softmax matches the CPU reference") {
  GPU_TEST(g);
  struct Case {
    uint32_t R, N;
    float lo, hi, inv_temperature;
  };
  // One column, widths around the workgroup, attention-like rows at T = 1024, and GPT-2's
  // vocabulary with logit-like values (large negative) at temperatures 1 and 0.7.
  const Case cases[] = {{1, 1, -1, 1, 1.0f},          {3, 7, -5, 5, 1.0f},
                        {4, 1000, -10, 10, 2.0f},     {5, 257, -30, 30, 1.0f},
                        {1024, 64, -8, 8, 0.125f},    {1, 50257, -100, -60, 1.0f},
                        {2, 50257, -20, 10, 1 / 0.7f}};
  for (const Case& c : cases) {
    CAPTURE(c.R);
    CAPTURE(c.N);
    CAPTURE(c.inv_temperature);
    std::vector<float> x = test::random_floats(size_t{c.R} * c.N, c.R * 7 + c.N, c.lo, c.hi);
    CHECK(test::close("softmax", run_gpu(g.kernels, x, c.R, c.N, c.inv_temperature),
                      run_cpu(x, c.R, c.N, c.inv_temperature), kTol));
  }
}

TEST_CASE("softmax in place, with -inf masks and huge logits") {
  GPU_TEST(g);
  const uint32_t R = 3, N = 777;
  std::vector<float> x = test::random_floats(R * N, 9, -5, 5);
  for (uint32_t i = 0; i < N; i++) {
    if (i % 10 != 3) x[i] = -INFINITY;  // row 0: top-k style masking
    x[N + i] *= 2000.0f;                // row 1: +-1e4, where exp without the max would overflow
  }
  std::vector<float> ref = run_cpu(x, R, N, 1.0f);
  std::vector<float> got = run_gpu(g.kernels, x, R, N, 1.0f, true);
  CHECK(test::close("softmax in place", got, ref, kTol));
  size_t masked_nonzero = 0;
  for (uint32_t i = 0; i < N; i++)
    if (i % 10 != 3 && got[i] != 0.0f) masked_nonzero++;
  CHECK(masked_nonzero == 0);
}

TEST_CASE("softmax splits tensors larger than maxStorageBufferRange") {
  GPU_TEST(g);
  // 4096 bytes per binding: rows of 301 floats (1204 bytes, not a multiple of the alignment)
  // go 3 to a chunk, each chunk bound from an aligned offset below its first row. 100
  // invocations per workgroup: the reduction also works for sizes that are not powers of two.
  test::LoweredGpu small(g, {.max_storage_buffer_range = 4096, .max_workgroup_invocations = 100});
  const uint32_t R = 10, N = 301;
  std::vector<float> x = test::random_floats(R * N, 21, -6, 6);
  std::vector<float> ref = run_cpu(x, R, N, 1.5f);
  CHECK(test::close("softmax split", run_gpu(small.kernels, x, R, N, 1.5f), ref, kTol));
  CHECK(test::close("softmax split in place", run_gpu(small.kernels, x, R, N, 1.5f, true), ref,
                    kTol));

  vkr::Arena arena(small.device, 2 * 8192, vkr::MemoryKind::Device, "test softmax wide");
  vkr::BufferSpan a = arena.alloc(8192), b = arena.alloc(8192);
  vkr::Recorder rec(small.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(gpu::softmax(small.kernels, rec, a, b, 1, 2000),
                       doctest::Contains("does not fit"), vkr::Error);
}

TEST_CASE("softmax folds rows beyond maxComputeWorkGroupCount[0] into y") {
  GPU_TEST(g);
  const uint32_t max_x = test::group_count_limit_x(g, 1u << 17);
  if (max_x == 0) return;
  const uint32_t R = max_x + 3, N = 3;
  std::vector<float> x = test::random_floats(size_t{R} * N, 4, -3, 3);
  CHECK(
      test::close("softmax fold", run_gpu(g.kernels, x, R, N, 1.0f), run_cpu(x, R, N, 1.0f), kTol));
}

TEST_CASE("softmax rejects bad arguments") {
  GPU_TEST(g);
  vkr::Arena arena(g.device, 2 * 4096, vkr::MemoryKind::Device, "test softmax errors");
  vkr::BufferSpan out = arena.alloc(4096), x = arena.alloc(4096);
  vkr::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(gpu::softmax(g.kernels, rec, out, x, 1, 0), doctest::Contains("N must"),
                       vkr::Error);
  for (float t : {0.0f, -1.0f, NAN, INFINITY})
    CHECK_THROWS_WITH_AS(gpu::softmax(g.kernels, rec, out, x, 1, 8, t),
                         doctest::Contains("inv_temperature"), vkr::Error);
  CHECK_THROWS_WITH_AS(gpu::softmax(g.kernels, rec, out, x, 2, 513),
                       doctest::Contains("softmax: out"), vkr::Error);
  gpu::softmax(g.kernels, rec, out, x, 0, 8);  // no rows: nothing to do
  rec.run();
  CHECK(rec.stats().dispatches == 0);
}
