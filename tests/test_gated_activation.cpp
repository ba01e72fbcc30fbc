// gated_activation: out[t, f] = act(in[t, f]) * in[t, F + f], T5 v1.1's gated feed-forward. GPU
// (common/activation.glsl in fp32, then one fp32 product) against model::cpu::gated_activation
// (double, rounded once), and the CPU reference against the formulas written out here.
// Tolerance for the smooth activations: |d| <= 2e-6 + 2e-6 |ref|. test_activation.cpp bounds
// act(x) by 1e-6 + 1e-6 |act(x)| (measured 5e-7); times a gate |g| <= 2 that is at most
// 2e-6 + 1e-6 |ref|, and the product rounds once more (6e-8 |ref|). relu and identity are exact:
// the fp32 product of exact values rounds as the double one narrowed does.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "model/ops/cpu/gated_activation.h"
#include "model/ops/gpu/gated_activation.h"
#include "model/ops/gpu/policy.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

using Act = model::Activation;

constexpr Act kActs[] = {Act::GeluTanh, Act::GeluErf, Act::Relu, Act::Tanh, Act::Silu, Act::None};

// [T, 2F]: the activation's half in [-8, 8] (row 0 also at +-30 and +-1e4, which must stay
// finite), the gate half in [-2, 2].
std::vector<float> make_in(uint32_t T, uint32_t F, unsigned seed) {
  std::vector<float> in(size_t{T} * 2 * F);
  const std::vector<float> a = test::random_floats(size_t{T} * F, seed, -8, 8),
                           g = test::random_floats(size_t{T} * F, seed + 1, -2, 2);
  for (size_t t = 0; t < T; t++)
    for (size_t f = 0; f < F; f++) {
      in[t * 2 * F + f] = a[t * F + f];
      in[t * 2 * F + F + f] = g[t * F + f];
    }
  const float special[] = {30.0f, -30.0f, 1e4f, -1e4f, 0.0f};
  for (size_t f = 0; f < F && f < 5; f++) in[f] = special[f];
  return in;
}

std::vector<float> run_cpu(const std::vector<float>& in, uint32_t T, uint32_t F, Act act) {
  std::vector<float> out(size_t{T} * F);
  model::cpu::gated_activation(out.data(), in.data(), T, F, act);
  return out;
}

std::vector<float> run_gpu(const model::gpu::Ops& ops, const std::vector<float>& in, uint32_t T,
                           uint32_t F, Act act, std::vector<std::string>* shaders = nullptr) {
  const vk::Device& dev = ops.device();
  vk::Arena arena(dev, (in.size() + size_t{T} * F) * sizeof(float) + 4096, vk::MemoryKind::Device,
                  "test gated_activation");
  const vk::BufferSpan gin = test::to_gpu(dev, arena, in),
                       out = arena.alloc(size_t{T} * F * sizeof(float));
  vk::Recorder rec(dev, shaders != nullptr);
  rec.begin();
  model::gpu::gated_activation(ops, rec, {.out = out, .in = gin, .T = T, .F = F, .act = act});
  rec.run();
  if (shaders)
    for (const vk::DispatchTime& t : rec.timings()) shaders->push_back(t.shader);
  return test::from_gpu(dev, out, size_t{T} * F);
}

test::Tolerance tolerance(Act act) {
  return act == Act::Relu || act == Act::None ? test::Tolerance{0, 0} : test::Tolerance{2e-6, 2e-6};
}

}  // namespace

TEST_CASE("gated_activation CPU reference: the formulas written out") {
  // Each activation as its paper or library writes it, in long double; the reference rounds the
  // same real number to fp32 (1 ulp apart at most, 2 where the formulas' roundings differ). The
  // gelus' negative tails, 0.5 x (1 + t) with t -> -1, cancel in double: 1e-12 absolute covers
  // that (values of ~1e-15 there).
  const uint32_t T = 3, F = 37;
  const std::vector<float> in = make_in(T, F, 5);
  for (Act act : kActs) {
    CAPTURE(static_cast<int>(act));
    std::vector<float> plain(size_t{T} * F);
    for (size_t t = 0; t < T; t++)
      for (size_t f = 0; f < F; f++) {
        const long double x = in[t * 2 * F + f], gate = in[t * 2 * F + F + f];
        const long double pi = 3.14159265358979323846264338327950288L;
        long double y = x;
        if (act == Act::GeluTanh)
          y = 0.5L * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715L * x * x * x)));
        if (act == Act::GeluErf) y = 0.5L * x * (1 + std::erf(x / std::sqrt(2.0L)));
        if (act == Act::Relu) y = std::max(x, 0.0L);
        if (act == Act::Tanh) y = std::tanh(x);
        if (act == Act::Silu) y = x / (1 + std::exp(-x));
        plain[t * F + f] = static_cast<float>(y * gate);
      }
    CHECK(test::close("gated_activation CPU reference " + std::to_string(int(act)),
                      run_cpu(in, T, F, act), plain, {1e-12, 2.4e-7}));
  }
}

TEST_CASE("gated_activation matches the CPU reference at T5's shapes, both kernel sets") {
  GPU_TEST(g);
  // T5 v1.1's d_ff: 1024 (small), 2048 (base); an odd F (portable kernel only) and a small one in
  // whole texels. The texel kernel runs under the CPU set where F % 4 == 0.
  const uint32_t shapes[][2] = {{300, 1024}, {200, 2048}, {257, 13}, {3, 4}, {1, 1}};
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& dev = g.with_kernels(set);
    const model::gpu::Ops ops(dev);
    for (const auto& s : shapes) {
      const uint32_t T = s[0], F = s[1];
      const std::vector<float> in = make_in(T, F, T * 7 + F);
      const bool texel =
          ops.policy().texel_elementwise && dev.caps().storage_texel_buffers && F % 4 == 0;
      for (Act act : kActs) {
        const std::string what = "gated_activation " + std::to_string(int(act)) + ", T=" +
                                 std::to_string(T) + " F=" + std::to_string(F) + ", " +
                                 vk::kernel_set_name(set) + " kernels";
        std::vector<std::string> shaders;
        const std::vector<float> got = run_gpu(ops, in, T, F, act, &shaders);
        CHECK(test::close(what, got, run_cpu(in, T, F, act), tolerance(act)));
        size_t non_finite = 0;
        for (float v : got)
          if (!std::isfinite(v)) non_finite++;
        CHECK(non_finite == 0);
        if (dev.caps().timestamps)
          CHECK_MESSAGE((shaders.size() == 1 &&
                         shaders[0] == (texel ? "gated_activation_texel" : "gated_activation")),
                        what);
      }
    }
  }
}

TEST_CASE("gated_activation split over maxStorageBufferRange") {
  GPU_TEST(g);
  // 1 KiB bindings: with F = 20 a row of in is 160 bytes, so 6 rows per dispatch; with F = 3
  // (24 bytes), rows come in fours (an out block of 48 bytes starts aligned) and 40 per dispatch.
  test::LoweredGpu small(g, {.max_storage_buffer_range = 1024});
  for (auto [T, F, dispatches] : {std::tuple{50u, 20u, 9u}, std::tuple{101u, 3u, 3u}}) {
    CAPTURE(F);
    const std::vector<float> in = make_in(T, F, F);
    vk::Arena arena(small.device, (3 * T * F) * sizeof(float) + 4096, vk::MemoryKind::Device,
                    "test gated_activation split");
    const vk::BufferSpan gin = test::to_gpu(small.device, arena, in),
                         out = arena.alloc(size_t{T} * F * sizeof(float));
    vk::Recorder rec(small.device);
    rec.begin();
    model::gpu::gated_activation(small.kernels, rec,
                                 {.out = out, .in = gin, .T = T, .F = F, .act = Act::GeluTanh});
    rec.run();
    if (model::gpu::binding_alignment(small.device.caps()) <= 16)
      CHECK(rec.stats().dispatches == dispatches);
    CHECK(test::close("gated_activation split", test::from_gpu(small.device, out, size_t{T} * F),
                      run_cpu(in, T, F, Act::GeluTanh), tolerance(Act::GeluTanh)));
  }
}

TEST_CASE("gated_activation rejects bad arguments") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 3 * 4096, vk::MemoryKind::Device, "test gated_activation errors");
  const vk::BufferSpan out = arena.alloc(4096), in = arena.alloc(4096);
  vk::Recorder rec(g.device);
  rec.begin();
  auto ga = [&](const vk::BufferSpan& o, const vk::BufferSpan& i, uint32_t T, uint32_t F, Act act) {
    model::gpu::gated_activation(g.kernels, rec, {.out = o, .in = i, .T = T, .F = F, .act = act});
  };
  CHECK_THROWS_WITH_AS(ga(out, in, 4, 200, Act::Relu), doctest::Contains("gated_activation: in"),
                       vk::Error);
  CHECK_THROWS_WITH_AS(ga(out, in, 1, 16, static_cast<Act>(9)),
                       doctest::Contains("unknown activation"), vk::Error);
  // out may not be in, nor overlap it: out = the gate half of in.
  CHECK_THROWS_WITH_AS(ga(in, in, 1, 16, Act::Relu), doctest::Contains("overlaps"), vk::Error);
  CHECK_THROWS_WITH_AS(ga(in.sub(64, 64), in, 1, 16, Act::Relu), doctest::Contains("overlaps"),
                       vk::Error);
  ga(out, in, 0, 16, Act::Relu);  // nothing to do
  ga(out, in, 16, 0, Act::Relu);
  rec.run();
  CHECK(rec.stats().dispatches == 0);
}
