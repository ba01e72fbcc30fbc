// activation: GPU (shaders/common/activation.glsl in fp32) against model::cpu::activate in double.
// Tolerance for both gelus: |d| <= 1e-6 + 1e-6 |ref|. Measured on lavapipe over -20..20 (steps
// of 1/4096) and 200k random points: max |d| 5.2e-7 (gelu) and 4.5e-7 (gelu_erf), about one ulp
// of outputs near 5, where gelu(x) ~ x. A pure relative bound is impossible in the negative
// tail: 0.5 x (1 + t) with t -> -1 cancels, so the fp32 1 + t is off by up to ~1 ulp of 1
// (6e-8), scaled by 0.5 |x| (<= 2e-7 measured); the absolute term covers that. The erf of
// activation.glsl (Taylor / Numerical Recipes erfc) is good to ~3e-7 absolute as measured
// through gelu_erf, so 1e-6 holds with about 2x margin. relu and identity are exact.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/ops/cpu/activation.h"
#include "model/ops/gpu/activation.h"
#include "model/ops/gpu/policy.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

using Act = model::Activation;

// -20..20 in steps of 1/1024 (exact in fp32), random values in [-8, 8], and special points:
// zeros, tiny and large magnitudes up to +-1e4 (x^3 ~ 1e12: must stay finite).
std::vector<float> inputs() {
  std::vector<float> x;
  for (int i = -20 * 1024; i <= 20 * 1024; i++) x.push_back(static_cast<float>(i) / 1024.0f);
  for (float v : test::random_floats(20000, 3, -8, 8)) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 0.5f, -0.5f, 0.49999997f, 30.0f,
                  -30.0f, 100.0f, -100.0f, 1e3f, -1e3f, 1e4f, -1e4f, 12345.678f, -9876.5f})
    x.push_back(v);
  return x;
}

std::vector<float> run_gpu(const model::gpu::Ops& kernels, const std::vector<float>& x, Act kind,
                           bool in_place = false, std::vector<std::string>* shaders = nullptr) {
  const vk::Device& dev = kernels.device();
  const size_t bytes = x.size() * sizeof(float);
  vk::Arena arena(dev, 2 * bytes + 1024, vk::MemoryKind::Device, "test activation");
  vk::BufferSpan gx = test::to_gpu(dev, arena, x);
  vk::BufferSpan out = in_place ? gx : arena.alloc(bytes);
  vk::Recorder rec(dev, shaders != nullptr);
  rec.begin();
  model::gpu::activation(kernels, rec,
                         {.out = out, .x = gx, .n = static_cast<uint32_t>(x.size()), .kind = kind});
  rec.run();
  if (shaders)
    for (const vk::DispatchTime& t : rec.timings()) shaders->push_back(t.shader);
  return test::from_gpu(dev, out, x.size());
}

std::vector<float> run_cpu(const std::vector<float>& x, Act kind) {
  std::vector<float> ref(x.size());
  model::cpu::activation(ref.data(), x.data(), x.size(), kind);
  return ref;
}

// The kernel a call runs: the CPU set's texel one where n is in whole texels (arena spans are
// texel-aligned), the portable one otherwise.
std::string expected_shader(const vk::Device& dev, size_t n, const char* texel_op, const char* op) {
  const bool texel = model::gpu::Ops(dev).policy().texel_elementwise && dev.caps().storage_texel_buffers &&
                     n % 4 == 0;
  return texel ? texel_op : op;
}

// Both kernel sets, n in whole texels (inputs() holds 60,980 values) and not.
void check_kind(test::Gpu& g, Act kind, test::Tolerance tol) {
  for (vk::KernelSet set : test::kKernelSets)
    for (size_t drop : {size_t{0}, size_t{1}}) {
      const vk::Device& dev = g.with_kernels(set);
      std::vector<float> x = inputs();
      x.resize(x.size() - drop);
      std::vector<std::string> shaders;
      std::vector<float> got = run_gpu(model::gpu::Ops(dev), x, kind, false, &shaders);
      const std::string what = "activation, n = " + std::to_string(x.size()) + ", " +
                               vk::kernel_set_name(set) + " kernels";
      CHECK(test::close(what, got, run_cpu(x, kind), tol));
      size_t non_finite = 0;
      for (float v : got)
        if (!std::isfinite(v)) non_finite++;
      CHECK(non_finite == 0);
      if (dev.caps().timestamps)
        CHECK_MESSAGE((shaders.size() == 1 && shaders[0] == expected_shader(dev, x.size(), "activation_texel", "activation")), what);
    }
}

}  // namespace

TEST_CASE("activation matches the CPU reference") {
  GPU_TEST(g);
  SUBCASE("gelu") {
    check_kind(g, Act::GeluTanh, {1e-6, 1e-6});
  }
  SUBCASE("gelu_erf") {
    check_kind(g, Act::GeluErf, {1e-6, 1e-6});
  }
  SUBCASE("tanh") {
    check_kind(g, Act::Tanh, {1e-6, 1e-6});
  }
  SUBCASE("silu") {
    check_kind(g, Act::Silu, {1e-6, 1e-6});
  }
  SUBCASE("relu") {
    check_kind(g, Act::Relu, {0, 0});
  }  // exact: max(x, 0)
  SUBCASE("none") {
    check_kind(g, Act::None, {0, 0});
  }  // exact: a copy
}

TEST_CASE("activation in place and split over maxStorageBufferRange") {
  GPU_TEST(g);
  // 1 KiB bindings: 1000 floats go in chunks of 256.
  test::LoweredGpu small(g, {.max_storage_buffer_range = 1024});
  std::vector<float> x = test::random_floats(1000, 8, -6, 6);
  std::vector<float> ref = run_cpu(x, Act::GeluTanh);
  CHECK(
      test::close("activation split", run_gpu(small.kernels, x, Act::GeluTanh), ref, {1e-6, 1e-6}));
  CHECK(test::close("activation split in place", run_gpu(small.kernels, x, Act::GeluTanh, true),
                    ref, {1e-6, 1e-6}));
}

TEST_CASE("activation rejects bad arguments") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 2 * 4096, vk::MemoryKind::Device, "test activation errors");
  vk::BufferSpan out = arena.alloc(4096), x = arena.alloc(2048);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::activation(g.kernels, rec, {.out = out, .x = x, .n = 1000, .kind = Act::Relu}),
      doctest::Contains("activation: x"), vk::Error);
  CHECK_THROWS_WITH_AS(
      model::gpu::activation(g.kernels, rec,
                             {.out = out, .x = x, .n = 16, .kind = static_cast<Act>(9)}),
      doctest::Contains("unknown kind"), vk::Error);
  model::gpu::activation(g.kernels, rec,
                         {.out = out, .x = x, .n = 0, .kind = Act::Relu});  // nothing to do
  rec.run();
  CHECK(rec.stats().dispatches == 0);
}

// activation_backward: dx = dout * f'(x), against model::cpu::activation_backward (double).
// Tolerance for both gelus: |d| <= 1e-6 + 1e-6 |ref|. f' is a sum of two fp32 terms of at most
// ~1.13 (the slope's peak) carrying gelu's own errors (tanh through exp, the erf approximation
// to ~3e-7, exp(-x^2 / 2)), each a few ulp; measured on lavapipe over the same inputs and dout in
// [-1, 1]: max |d| 1.8e-7 (tanh) and 1.2e-7 (erf). relu and identity are exact (dout times 1 or
// 0).
TEST_CASE("activation_backward matches the CPU reference, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets)
    for (size_t drop : {size_t{0}, size_t{1}}) {  // n in whole texels and not
      const vk::Device& dev = g.with_kernels(set);
      std::vector<float> x = inputs();
      x.resize(x.size() - drop);
      const std::vector<float> dout = test::random_floats(x.size(), 9);
      const size_t bytes = x.size() * sizeof(float);
      vk::Arena arena(dev, 8 * bytes + 65536, vk::MemoryKind::Device, "test activation_backward");
      const vk::BufferSpan gx = test::to_gpu(dev, arena, x), gd = test::to_gpu(dev, arena, dout);
      for (Act kind : {Act::GeluTanh, Act::GeluErf, Act::Tanh, Act::Silu, Act::Relu, Act::None}) {
        std::vector<float> ref(x.size());
        model::cpu::activation_backward(ref.data(), dout.data(), x.data(), x.size(), kind);
        const vk::BufferSpan dx = arena.alloc(bytes);
        vk::Recorder rec(dev, true);
        rec.begin();
        model::gpu::activation_backward(
            model::gpu::Ops(dev), rec,
            {.dx = dx, .dout = gd, .x = gx, .n = static_cast<uint32_t>(x.size()), .kind = kind});
        rec.run();
        const bool exact = kind == Act::Relu || kind == Act::None;
        const std::string what = "activation_backward " + std::to_string(int(kind)) + ", n = " +
                                 std::to_string(x.size()) + ", " + vk::kernel_set_name(set) + " kernels";
        CHECK(test::close(what, test::from_gpu(dev, dx, x.size()), ref,
                          exact ? test::Tolerance{0, 0} : test::Tolerance{1e-6, 1e-6}));
        if (dev.caps().timestamps)
          for (const vk::DispatchTime& t : rec.timings())
            CHECK_MESSAGE(t.shader == expected_shader(dev, x.size(), "activation_backward_texel", "activation_backward"), what);
      }
    }
  // In place over dout, and split over a lowered maxStorageBufferRange (chunks of 256).
  test::LoweredGpu small(g, {.max_storage_buffer_range = 1024});
  const std::vector<float> x = inputs(), dout = test::random_floats(x.size(), 9);
  const std::vector<float> xs(x.begin(), x.begin() + 1000), ds(dout.begin(), dout.begin() + 1000);
  std::vector<float> ref(1000);
  model::cpu::activation_backward(ref.data(), ds.data(), xs.data(), 1000, Act::GeluTanh);
  vk::Arena a2(small.device, 3 * 4096, vk::MemoryKind::Device, "test activation_backward split");
  const vk::BufferSpan sx = test::to_gpu(small.device, a2, xs), sd = test::to_gpu(small.device, a2, ds);
  vk::Recorder rec(small.device);
  rec.begin();
  model::gpu::activation_backward(
      small.kernels, rec, {.dx = sd, .dout = sd, .x = sx, .n = 1000, .kind = Act::GeluTanh});
  rec.run();
  CHECK(rec.stats().dispatches == 4);
  CHECK(test::close("activation_backward split in place", test::from_gpu(small.device, sd, 1000),
                    ref, {1e-6, 1e-6}));
  CHECK_THROWS_WITH_AS(
      model::gpu::activation_backward(
          small.kernels, rec,
          {.dx = sd, .dout = sd, .x = sx.sub(0, 400), .n = 1000, .kind = Act::Relu}),
      doctest::Contains("activation_backward: x"), vk::Error);
}
