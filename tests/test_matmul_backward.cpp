// matmul_backward: GPU (fp32) against model::cpu::matmul_backward (double).
// Tolerance |d| <= 1e-5 max|ref| + 1e-5 |ref|: dx sums N products and dw sums T, each in fp32
// (dx through the matmul kernels, whose own test bounds them the same way); the rounding grows
// as the square root of the terms in practice, ~1e-6 relative to the largest output here.
// Weight gradients also checked bit for bit against a second run (a fixed order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/ops/cpu/matmul.h"
#include "model/ops/gpu/matmul_backward.h"
#include "model/ops/gpu/policy.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"
#include "vk/sizes.h"

namespace {

test::Tolerance tolerance(const std::vector<float>& ref) {
  float peak = 0;
  for (float v : ref) peak = std::max(peak, std::fabs(v));
  return {1e-5 * static_cast<double>(peak), 1e-5};
}

struct Out {
  std::vector<float> dx, dw, dbias;
  std::vector<std::string> shaders;  // what ran, where the device has timestamps
};

Out run_gpu(const vk::Device& device, const model::gpu::Ops& kernels, const std::vector<float>& dout,
            const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dw0,
            const std::vector<float>& db0, uint32_t T, uint32_t K, uint32_t N,
            model::WeightLayout layout, bool with_bias, uint32_t* dispatches = nullptr) {
  vk::Arena arena(device, (dout.size() + x.size() * 2 + w.size() * 2 + N) * 4 + 65536 * 8,
                  vk::MemoryKind::Device, "test matmul_backward");
  const vk::BufferSpan gd = test::to_gpu(device, arena, dout), gx = test::to_gpu(device, arena, x),
                       gw = test::to_gpu(device, arena, w), gdw = test::to_gpu(device, arena, dw0),
                       gdb = test::to_gpu(device, arena, db0), gdx = arena.alloc(x.size() * 4);
  vk::Recorder rec(device, true);
  rec.begin();
  const model::gpu::Weight weight{gw, model::DType::F32, layout};
  model::gpu::matmul_backward(kernels, rec,
                              {.dx = &gdx,
                               .dw = gdw,
                               .dbias = with_bias ? &gdb : nullptr,
                               .dout = gd,
                               .x = gx,
                               .w = weight,
                               .T = T,
                               .K = K,
                               .N = N});
  rec.run();
  if (dispatches) *dispatches = rec.stats().dispatches;
  std::vector<std::string> shaders;
  for (const vk::DispatchTime& t : rec.timings()) shaders.push_back(t.shader);
  return {test::from_gpu(device, gdx, x.size()), test::from_gpu(device, gdw, w.size()),
          test::from_gpu(device, gdb, N), shaders};
}

void check(const vk::Device& device, const model::gpu::Ops& kernels, uint32_t T, uint32_t K, uint32_t N,
           model::WeightLayout layout, bool with_bias, unsigned seed) {
  const std::vector<float> dout = test::random_floats(size_t{T} * N, seed),
                           x = test::random_floats(size_t{T} * K, seed + 1),
                           w = test::random_floats(size_t{K} * N, seed + 2),
                           dw0 = test::random_floats(size_t{K} * N, seed + 3),
                           db0 = test::random_floats(N, seed + 4);
  std::vector<float> dx(x.size()), dw = dw0, db = db0;
  model::cpu::matmul_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(),
                              x.data(), w.data(), T, K, N, layout);
  uint32_t dispatches = 0;
  const Out got = run_gpu(device, kernels, dout, x, w, dw0, db0, T, K, N, layout, with_bias, &dispatches);
  const uint64_t rows = (device.caps().max_storage_buffer_range - 64) / (uint64_t{std::max(K, N)} * 4);
  CHECK(dispatches >= (with_bias ? 2 : 1) * vk::ceil_div(T, rows) + 1);  // + dx's matmul
  const std::string what = std::string(layout == model::WeightLayout::KN ? "KN" : "NK") +
                           " T=" + std::to_string(T) + " K=" + std::to_string(K) +
                           " N=" + std::to_string(N);
  CHECK(test::close(what + ": dx", got.dx, dx, tolerance(dx)));
  CHECK(test::close(what + ": dw", got.dw, dw, tolerance(dw)));
  CHECK(test::close(what + ": dbias", got.dbias, db, with_bias ? tolerance(db) : test::Tolerance{0, 0}));
  // The kernel the policy picks: matmul_backward_texel for the CPU set where K is in whole
  // texels and N in blocks of 8 (the spans here are texel-aligned arena allocations), the
  // shared-memory tiles of matmul_backward otherwise.
  const vk::DeviceCaps& caps = device.caps();
  const bool texel = model::gpu::Ops(device).policy().texel_matmul && caps.storage_texel_buffers &&
                     K % 4 == 0 && N % 8 == 0;
  if (caps.timestamps)
    CHECK_MESSAGE(std::count(got.shaders.begin(), got.shaders.end(),
                             texel ? "matmul_backward_texel" : "matmul_backward") >= 1, what);
  const Out again = run_gpu(device, kernels, dout, x, w, dw0, db0, T, K, N, layout, with_bias);
  CHECK(std::memcmp(again.dw.data(), got.dw.data(), got.dw.size() * 4) == 0);
}

}  // namespace

// Both kernel sets: the GPU set's shared-memory tiles, and the CPU set's texel kernel where K is
// in whole texels and N in blocks of 8 (here every shape but the first two), tiles elsewhere.
TEST_CASE("matmul_backward matches the CPU reference, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& device = g.with_kernels(set);
    for (model::WeightLayout layout : {model::WeightLayout::KN, model::WeightLayout::NK}) {
      // Shapes off every tile: 37 rows (not a multiple of 16), K and N not of 64.
      check(device, model::gpu::Ops(device), 37, 48, 100, layout, true, 800);
      check(device, model::gpu::Ops(device), 5, 130, 70, layout, false, 810);
      check(device, model::gpu::Ops(device), 1, 64, 64, layout, true, 820);
      check(device, model::gpu::Ops(device), 29, 36, 40, layout, true, 840);
    }
    // A GPT-2-like block's fc projection, scaled down: 64 rows of 192 -> 192.
    check(device, model::gpu::Ops(device), 64, 3072 / 16, 768 / 4, model::WeightLayout::KN, true, 830);
    // GPT-2's tied head, [N, K] = [50257, 128], past the GEMV's 8 rows: dx sums 50,257 terms,
    // more k steps than llvmpipe runs in one invocation (its loop cap).
    check(device, model::gpu::Ops(device), 9, 128, 50257, model::WeightLayout::NK, false, 850);
  }
}

TEST_CASE("matmul_backward in several dispatches past maxStorageBufferRange") {
  GPU_TEST(g);
  // 10000-byte bindings (dw's 9600 bytes fit): rows of 100 floats, 24 per round (25 and the
  // alignment slack do not fit), so 40 rows take 2 rounds of the weight and bias passes.
  test::LoweredGpu small(g, {.max_storage_buffer_range = 10000});
  check(small.device, small.kernels, 40, 24, 100, model::WeightLayout::KN, true, 900);
  check(small.device, small.kernels, 40, 100, 24, model::WeightLayout::NK, true, 910);
}

TEST_CASE("matmul_backward rejects what it cannot run") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 65536, vk::MemoryKind::Device, "test matmul_backward errors");
  const vk::BufferSpan a = arena.alloc(4096), b = arena.alloc(4096);
  vk::Recorder rec(g.device);
  rec.begin();
  const model::gpu::Weight half{a, model::DType::F16, model::WeightLayout::KN};
  CHECK_THROWS_WITH_AS(
      model::gpu::matmul_backward(g.kernels, rec,
                                  {.dw = b, .dout = a, .x = a, .w = half, .T = 4, .K = 8, .N = 8}),
      doctest::Contains("fp32 in the KN or NK layout"), vk::Error);
  const model::gpu::Weight w{a, model::DType::F32, model::WeightLayout::KN};
  CHECK_THROWS_WITH_AS(
      model::gpu::matmul_backward(g.kernels, rec,
                                  {.dw = b, .dout = a, .x = a, .w = w, .T = 4, .K = 64, .N = 64}),
      doctest::Contains("matmul_backward: dw"), vk::Error);
  rec.end();
}
