// layernorm: GPU against the CPU reference (two passes in double).
// Tolerance: |d| <= 1e-5 * max|ref| + 1e-5 |ref|, atol scaled to the output's magnitude. The GPU
// normalises in fp32: x - m1 is exact near the mean, the corrected mean and the sum of squared
// deviations carry a few fp32 roundings (relative ~1e-7 each, growing with log2 of the tree
// reduction), and gamma * z + beta rounds once more; 1e-5 leaves room for that on any device
// (inversesqrt may be 2 ulp) while a one-pass E[x^2] - E[x]^2 variance fails it (checked below).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/ops/cpu/layernorm.h"
#include "model/ops/gpu/layernorm.h"
#include "model/ops/gpu/layernorm_backward.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

using Kind = model::LayerNormKind;
using Kernel = model::gpu::LayerNormKernel;

struct Inputs {
  uint32_t T, C;
  std::vector<float> x, gamma, beta;
};

Inputs make_inputs(uint32_t T, uint32_t C, unsigned seed, float lo = -4.0f, float hi = 4.0f) {
  return {T, C, test::random_floats(size_t{T} * C, seed, lo, hi),
          test::random_floats(C, seed + 1, -1.5f, 1.5f),
          test::random_floats(C, seed + 2, -0.5f, 0.5f)};
}

std::vector<float> run_gpu(const model::gpu::Ops& kernels, const Inputs& in, float eps, Kind kind,
                           Kernel kernel) {
  const vk::Device& dev = kernels.device();
  const size_t n = in.x.size();
  vk::Arena arena(dev, (2 * n + 2 * in.C) * sizeof(float) + 4096, vk::MemoryKind::Device,
                   "test layernorm");
  vk::BufferSpan x = test::to_gpu(dev, arena, in.x), gamma = test::to_gpu(dev, arena, in.gamma),
                  beta = test::to_gpu(dev, arena, in.beta);
  vk::BufferSpan out = arena.alloc(n * sizeof(float));
  vk::Recorder rec(dev);
  rec.begin();
  model::gpu::layernorm(kernels, rec,
                        {.out = out,
                         .x = x,
                         .gamma = gamma,
                         .beta = beta,
                         .T = in.T,
                         .C = in.C,
                         .eps = eps,
                         .kind = kind,
                         .kernel = kernel});
  rec.run();
  return test::from_gpu(dev, out, n);
}

std::vector<float> run_cpu(const Inputs& in, float eps, Kind kind) {
  std::vector<float> ref(in.x.size());
  model::cpu::layernorm(ref.data(), in.x.data(), in.gamma.data(), in.beta.data(), in.T, in.C, eps, kind);
  return ref;
}

test::Tolerance tolerance(const std::vector<float>& ref) {
  float peak = 0;
  for (float v : ref) peak = std::max(peak, std::fabs(v));
  return {1e-5 * static_cast<double>(peak), 1e-5};
}

bool check(const model::gpu::Ops& kernels, const Inputs& in, float eps, Kind kind,
           Kernel kernel = Kernel::Portable) {
  std::vector<float> ref = run_cpu(in, eps, kind);
  return test::close("layernorm", run_gpu(kernels, in, eps, kind, kernel), ref, tolerance(ref));
}

// The kernels that can run rows of C on this device: the texel one needs C % 4 == 0.
std::vector<Kernel> kernels_for(const vk::DeviceCaps& caps, uint32_t C) {
  if (caps.storage_texel_buffers && C % 4 == 0) return {Kernel::Portable, Kernel::Texel};
  return {Kernel::Portable};
}

}  // namespace

TEST_CASE("layernorm matches the CPU reference") {
  GPU_TEST(g);
  // One column, rows narrower and wider than the workgroup and not multiples of it, GPT-2
  // small and XL widths, T = 1024, and a row many times the workgroup.
  const uint32_t shapes[][2] = {{1, 1},    {3, 8},   {1, 1600},  {3, 768},
                                {5, 1600}, {7, 257}, {1024, 24}, {2, 5003}};
  for (Kind kind : {Kind::Standard, Kind::StdPlusEps}) {
    for (const auto& s : shapes) {
      if (kind == Kind::StdPlusEps && s[1] < 2) continue;
      CAPTURE(static_cast<int>(kind));
      CAPTURE(s[0]);
      CAPTURE(s[1]);
      for (Kernel kernel : kernels_for(g.device.caps(), s[1])) {
        CAPTURE(static_cast<int>(kernel));
        CHECK(check(g.kernels, make_inputs(s[0], s[1], s[0] * 31 + s[1]), 1e-5f, kind, kernel));
      }
    }
  }
}

TEST_CASE("layernorm is stable for rows with a large mean and a small spread") {
  GPU_TEST(g);
  // Residual-stream rows of real GPT-2 reach the thousands. Row 0: 1000 +- 1; row 1: -3000 +-
  // 0.05; row 2: a constant row (variance 0, so out = beta); row 3: 1e4 +- 3.
  const uint32_t C = 1600;
  Inputs in = make_inputs(4, C, 77, -1.0f, 1.0f);
  for (uint32_t c = 0; c < C; c++) {
    in.x[c] += 1000.0f;
    in.x[C + c] = -3000.0f + 0.05f * in.x[C + c];
    in.x[2 * C + c] = 1000.5f;
    in.x[3 * C + c] = 1e4f + 3.0f * in.x[3 * C + c];
  }
  for (Kind kind : {Kind::Standard, Kind::StdPlusEps}) {
    CAPTURE(static_cast<int>(kind));
    for (Kernel kernel : kernels_for(g.device.caps(), C)) {
      CAPTURE(static_cast<int>(kernel));
      CHECK(check(g.kernels, in, 1e-5f, kind, kernel));
    }
  }

  // The test can fail: the one-pass fp32 variance E[x^2] - E[x]^2 of row 0 is off by far more
  // than the tolerance allows.
  float sum = 0, sum_sq = 0;
  for (uint32_t c = 0; c < C; c++) sum += in.x[c], sum_sq += in.x[c] * in.x[c];
  const float naive_var = sum_sq / C - (sum / C) * (sum / C);
  double mean = 0, var = 0;
  for (uint32_t c = 0; c < C; c++) mean += static_cast<double>(in.x[c]) / C;
  for (uint32_t c = 0; c < C; c++) var += std::pow(static_cast<double>(in.x[c]) - mean, 2) / C;
  CHECK(std::fabs(static_cast<double>(naive_var) - var) > 1e-3 * var);
}

TEST_CASE("layernorm CPU reference: hand-computed values of both kinds") {
  // x = [1, 2, 3, 4]: mean 2.5, sum of squared deviations 5. Standard divides by C (var 1.25),
  // StdPlusEps uses torch.std's unbiased std sqrt(5 / 3), as the Annotated Transformer does.
  const float x[4] = {1, 2, 3, 4}, gamma[4] = {1, 1, 1, 2}, beta[4] = {0, 0, 0, 1};
  float out[4];
  model::cpu::layernorm(out, x, gamma, beta, 1, 4, 0.0f, Kind::Standard);
  CHECK(out[0] == doctest::Approx(-1.5 / std::sqrt(1.25)).epsilon(1e-6));
  CHECK(out[3] == doctest::Approx(2 * 1.5 / std::sqrt(1.25) + 1).epsilon(1e-6));
  model::cpu::layernorm(out, x, gamma, beta, 1, 4, 0.5f, Kind::StdPlusEps);
  CHECK(out[0] == doctest::Approx(-1.5 / (std::sqrt(5.0 / 3.0) + 0.5)).epsilon(1e-6));
  CHECK(out[3] == doctest::Approx(2 * 1.5 / (std::sqrt(5.0 / 3.0) + 0.5) + 1).epsilon(1e-6));
}

TEST_CASE("layernorm folds rows beyond maxComputeWorkGroupCount[0] into y") {
  GPU_TEST(g);
  const uint32_t max_x = test::group_count_limit_x(g, 1u << 17);
  if (max_x == 0) return;
  // Past the limit for the texel kernel too, which takes up to 8 rows per workgroup.
  for (Kernel kernel : kernels_for(g.device.caps(), 4))
    CHECK(check(g.kernels, make_inputs(max_x * 8 + 3, 4, 5), 1e-5f, Kind::Standard, kernel));
}

TEST_CASE("layernorm with a workgroup that is not a power of two") {
  GPU_TEST(g);
  // 100 invocations: the reduction halves 100, 50, 25, 13, 7, 4, 2; C = 37 gets 50 invocations.
  test::LoweredGpu small(g, {.max_workgroup_invocations = 100});
  for (uint32_t C : {37u, 100u, 1001u}) {
    CAPTURE(C);
    CHECK(check(small.kernels, make_inputs(3, C, C), 1e-5f, Kind::Standard));
    CHECK(check(small.kernels, make_inputs(3, C, C + 1), 1e-5f, Kind::StdPlusEps));
  }
}

TEST_CASE("layernorm rejects bad arguments") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 4 * 4096, vk::MemoryKind::Device, "test layernorm errors");
  vk::BufferSpan out = arena.alloc(4096), x = arena.alloc(4096), gamma = arena.alloc(64),
                  beta = arena.alloc(64);
  vk::Recorder rec(g.device);
  rec.begin();
  auto ln = [&](uint32_t T, uint32_t C, float eps, Kind kind) {
    model::gpu::layernorm(g.kernels, rec,
                          {.out = out,
                           .x = x,
                           .gamma = gamma,
                           .beta = beta,
                           .T = T,
                           .C = C,
                           .eps = eps,
                           .kind = kind});
  };
  CHECK_THROWS_WITH_AS(ln(1, 0, 1e-5f, Kind::Standard), doctest::Contains("C must be"), vk::Error);
  CHECK_THROWS_WITH_AS(ln(1, 1, 1e-5f, Kind::StdPlusEps), doctest::Contains("C >= 2"), vk::Error);
  CHECK_THROWS_WITH_AS(ln(1, 8, -1.0f, Kind::Standard), doctest::Contains("eps"), vk::Error);
  CHECK_THROWS_WITH_AS(ln(1, 8, NAN, Kind::Standard), doctest::Contains("eps"), vk::Error);
  CHECK_THROWS_WITH_AS(ln(1, 17, 1e-5f, Kind::Standard), doctest::Contains("gamma"), vk::Error);
  CHECK_THROWS_WITH_AS(ln(2, 16, 1e-5f, static_cast<Kind>(5)), doctest::Contains("kind"),
                       vk::Error);
  CHECK_THROWS_WITH_AS(ln(65, 16, 1e-5f, Kind::Standard), doctest::Contains("layernorm: out"),
                       vk::Error);
  ln(0, 16, 1e-5f, Kind::Standard);  // no rows: nothing to do
  rec.run();
  CHECK(rec.stats().dispatches == 0);
  if (g.device.caps().storage_texel_buffers)
    CHECK_THROWS_WITH_AS(model::gpu::layernorm(g.kernels, rec,
                                               {.out = out,
                                                .x = x,
                                                .gamma = gamma,
                                                .beta = beta,
                                                .T = 1,
                                                .C = 6,
                                                .eps = 1e-5f,
                                                .kind = Kind::Standard,
                                                .kernel = Kernel::Texel}),
                         doctest::Contains("not a multiple of 4"), vk::Error);
}

// layernorm_backward: GPU (fp32; the forward's two-pass statistics) against
// model::cpu::layernorm_backward (double). Tolerance, tolerance() above: |d| <= 1e-5 max|ref| +
// 1e-5 |ref| for dx (the statistics' rounding as in the forward, then two more sums over C) and
// for dgamma and dbeta (sums over T rows of fp32 products, ~T ulp of the largest term).
namespace {

void check_backward(const model::gpu::Ops& kernels, const Inputs& in, float eps, Kind kind, unsigned seed) {
  const vk::Device& dev = kernels.device();
  const size_t n = in.x.size();
  const std::vector<float> dout = test::random_floats(n, seed);
  std::vector<float> dgamma = test::random_floats(in.C, seed + 1), dbeta = test::random_floats(in.C, seed + 2);
  vk::Arena arena(dev, (4 * n + 6 * in.C + 4 * in.T) * sizeof(float) + 65536, vk::MemoryKind::Device,
                  "test layernorm_backward");
  const vk::BufferSpan x = test::to_gpu(dev, arena, in.x), gamma = test::to_gpu(dev, arena, in.gamma),
                       d = test::to_gpu(dev, arena, dout), dg = test::to_gpu(dev, arena, dgamma),
                       db = test::to_gpu(dev, arena, dbeta), dx = arena.alloc(n * 4),
                       stats = arena.alloc(size_t{in.T} * 16);
  vk::Recorder rec(dev, true);
  rec.begin();
  model::gpu::layernorm_backward(kernels, rec,
                                 {.dx = dx,
                                  .dgamma = dg,
                                  .dbeta = db,
                                  .stats = stats,
                                  .dout = d,
                                  .x = x,
                                  .gamma = gamma,
                                  .T = in.T,
                                  .C = in.C,
                                  .eps = eps,
                                  .kind = kind});
  rec.run();
  CHECK(rec.stats().dispatches == 2);
  // The kernel the policy picks: the texel one for the CPU set where C is in whole texels (arena
  // spans are texel-aligned).
  const bool texel = model::gpu::Ops(dev).policy().texel_layernorm && dev.caps().storage_texel_buffers &&
                     in.C % 4 == 0;
  if (dev.caps().timestamps)
    for (const vk::DispatchTime& t : rec.timings())
      CHECK(t.shader == (texel ? "layernorm_backward_texel" : "layernorm_backward"));
  std::vector<float> ref(n);
  model::cpu::layernorm_backward(ref.data(), dgamma.data(), dbeta.data(), dout.data(), in.x.data(),
                                 in.gamma.data(), in.T, in.C, eps, kind);
  const std::string what = std::string(kind == Kind::Standard ? "standard" : "std + eps") +
                           " T=" + std::to_string(in.T) + " C=" + std::to_string(in.C);
  CHECK(test::close("layernorm_backward " + what + ": dx", test::from_gpu(dev, dx, n), ref, tolerance(ref)));
  CHECK(test::close("layernorm_backward " + what + ": dgamma", test::from_gpu(dev, dg, in.C), dgamma,
                    tolerance(dgamma)));
  CHECK(test::close("layernorm_backward " + what + ": dbeta", test::from_gpu(dev, db, in.C), dbeta,
                    tolerance(dbeta)));
}

}  // namespace

TEST_CASE("layernorm_backward matches the CPU reference, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets) {
    const model::gpu::Ops kernels(g.with_kernels(set));
    for (Kind kind : {Kind::Standard, Kind::StdPlusEps}) {
      check_backward(kernels, make_inputs(37, 100, 700), 1e-5f, kind, 710);
      check_backward(kernels, make_inputs(5, 768, 720), 1e-5f, kind, 730);
      // Residual-stream rows: a mean near 1000, a small spread.
      check_backward(kernels, make_inputs(9, 64, 740, 995.0f, 1005.0f), 1e-5f, kind, 750);
      check_backward(kernels, make_inputs(6, 30, 760), 1e-5f, kind, 770);  // C % 4 != 0: portable
    }
  }
  // The same limits as the forward: a bad kind, too small a span.
  vk::Arena arena(g.device, 65536, vk::MemoryKind::Device, "test layernorm_backward errors");
  const vk::BufferSpan a = arena.alloc(4000), s = arena.alloc(16);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(model::gpu::layernorm_backward(g.kernels, rec,
                                                      {.dx = a,
                                                       .dgamma = a,
                                                       .dbeta = a,
                                                       .stats = s,
                                                       .dout = a,
                                                       .x = a,
                                                       .gamma = a,
                                                       .T = 10,
                                                       .C = 100,
                                                       .eps = 1e-5f}),
                       doctest::Contains("layernorm_backward: stats"), vk::Error);
  rec.end();
}
