// layernorm's Rms kind, T5's T5LayerNorm (RMSNorm): y = gamma x / sqrt(mean(x^2) + eps), no mean
// subtracted and no beta. Every GPU path through common/norm.glsl (layernorm.comp,
// layernorm_texel.comp, the norm_linear fused into matmul_interleaved and matmul_vec_wide, both
// backward shaders) against the CPU reference (double), and the CPU reference against the
// formula written out here.
// Tolerances: the op's, test_layernorm.cpp's |d| <= 1e-5 max|ref| + 1e-5 |ref|: the fp32 sum of
// squares carries a few roundings per level of its reduction (relative ~1e-7 each), inversesqrt
// up to 2 ulp, x * scale * gamma two more; no cancellation (every term is positive), so rows with
// a large mean are no harder than others. The fused matmuls: the matmul tests' test::matches,
// kMatmulTol (1e-5) relative to sum_k |norm(x)_k W(k, n)| + |b[n]| + |r[t, n]|.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

#include "model/ops/cpu/layernorm.h"
#include "model/ops/gpu/layernorm.h"
#include "model/ops/gpu/layernorm_backward.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "tests/matmul_problem.h"
#include "vk/check.h"

namespace {

using Kind = model::LayerNormKind;
using Kernel = model::gpu::LayerNormKernel;
using model::Activation;
using model::DType;
using model::WeightLayout;
using model::gpu::MatmulKernel;

constexpr float kEps = 1e-6f;  // T5's layer_norm_epsilon

// T rows of C: uniform in [-4, 4], except residual-stream-like rows: every third row has a mean
// near 1000, every seventh is 1e4 +- 3, and row 1 is all zeros (out = 0: rms = sqrt(eps)).
std::vector<float> make_rows(uint32_t T, uint32_t C, unsigned seed) {
  std::vector<float> x = test::random_floats(size_t{T} * C, seed, -4.0f, 4.0f);
  for (uint32_t t = 0; t < T; t++)
    for (uint32_t c = 0; c < C; c++) {
      float& v = x[size_t{t} * C + c];
      if (t == 1) v = 0.0f;
      else if (t % 7 == 0) v = 1e4f + 0.75f * v;
      else if (t % 3 == 0) v += 1000.0f;
    }
  return x;
}

std::vector<float> cpu_rms(const std::vector<float>& x, const std::vector<float>& gamma,
                           uint32_t T, uint32_t C) {
  std::vector<float> out(x.size());
  model::cpu::layernorm(out.data(), x.data(), gamma.data(), nullptr, T, C, kEps, Kind::Rms);
  return out;
}

std::vector<float> gpu_rms(const model::gpu::Ops& ops, const std::vector<float>& x,
                           const std::vector<float>& gamma, uint32_t T, uint32_t C, Kernel kernel) {
  const vk::Device& dev = ops.device();
  vk::Arena arena(dev, (2 * x.size() + C) * sizeof(float) + 4096, vk::MemoryKind::Device,
                  "test layernorm rms");
  const vk::BufferSpan gx = test::to_gpu(dev, arena, x), gg = test::to_gpu(dev, arena, gamma),
                       out = arena.alloc(x.size() * sizeof(float));
  vk::Recorder rec(dev);
  rec.begin();
  model::gpu::layernorm(ops, rec,
                        {.out = out, .x = gx, .gamma = gg, .beta = {}, .T = T, .C = C,
                         .eps = kEps, .kind = Kind::Rms, .kernel = kernel});
  rec.run();
  return test::from_gpu(dev, out, x.size());
}

test::Tolerance tolerance(const std::vector<float>& ref) {
  float peak = 0;
  for (float v : ref) peak = std::max(peak, std::fabs(v));
  return {1e-5 * static_cast<double>(peak), 1e-5};
}

}  // namespace

TEST_CASE("layernorm Rms CPU reference: the formula written out, and hand-computed values") {
  // x = [1, 2, 3, 4]: mean(x^2) = 30 / 4 = 7.5, so y = gamma x / sqrt(7.5) (eps 0). A beta given
  // is not read.
  const float x[4] = {1, 2, 3, 4}, gamma[4] = {1, 1, 1, 2}, beta[4] = {5, 5, 5, 5};
  float out[4];
  model::cpu::layernorm(out, x, gamma, beta, 1, 4, 0.0f, Kind::Rms);
  CHECK(out[0] == doctest::Approx(1 / std::sqrt(7.5)).epsilon(1e-7));
  CHECK(out[3] == doctest::Approx(2 * 4 / std::sqrt(7.5)).epsilon(1e-7));
  // Random rows at T5's widths and odd ones, against y = gamma x / sqrt(sum(x^2) / C + eps) in
  // long double, summed in another order (last to first). Both round the same real number to
  // fp32 once: within 1 ulp of each other.
  for (uint32_t C : {1u, 7u, 37u, 512u, 768u, 1024u}) {
    CAPTURE(C);
    const uint32_t T = 9;
    const std::vector<float> xs = make_rows(T, C, C), g = test::random_floats(C, C + 1, -1.5f, 1.5f);
    std::vector<float> plain(xs.size());
    for (uint32_t t = 0; t < T; t++) {
      using Wide = long double;
      Wide sq = 0;
      for (uint32_t c = C; c-- > 0;) sq += Wide{xs[t * C + c]} * xs[t * C + c];
      const Wide r = std::sqrt(sq / C + Wide{kEps});
      for (uint32_t c = 0; c < C; c++) plain[t * C + c] = float(g[c] * Wide{xs[t * C + c]} / r);
    }
    CHECK(test::close("layernorm rms CPU reference C=" + std::to_string(C), cpu_rms(xs, g, T, C),
                      plain, {0, 1.2e-7}));
  }
}

TEST_CASE("layernorm Rms matches the CPU reference at T5's widths, every kernel") {
  GPU_TEST(g);
  // T5-small, -base, -large widths with hundreds of rows; odd and narrow rows (portable only).
  const uint32_t shapes[][2] = {{300, 512}, {300, 768}, {200, 1024}, {257, 7},
                                {3, 37},    {1, 1},     {5, 5003},   {64, 4}};
  for (vk::KernelSet set : test::kKernelSets) {
    const model::gpu::Ops ops(g.with_kernels(set));
    for (const auto& s : shapes) {
      const uint32_t T = s[0], C = s[1];
      const std::vector<float> x = make_rows(T, C, T * 31 + C),
                               gamma = test::random_floats(C, C + 7, -1.5f, 1.5f);
      const std::vector<float> ref = cpu_rms(x, gamma, T, C);
      std::vector<Kernel> kernels{Kernel::Auto, Kernel::Portable};
      if (ops.caps().storage_texel_buffers && C % 4 == 0) kernels.push_back(Kernel::Texel);
      for (Kernel kernel : kernels) {
        const std::string what = std::string("layernorm rms ") + vk::kernel_set_name(set) +
                                 " kernels, kernel " + std::to_string(int(kernel)) + ", T=" +
                                 std::to_string(T) + " C=" + std::to_string(C);
        CHECK(test::close(what, gpu_rms(ops, x, gamma, T, C, kernel), ref, tolerance(ref)));
      }
    }
  }
}

TEST_CASE("layernorm takes an empty beta for Rms only") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 3 * 4096, vk::MemoryKind::Device, "test layernorm rms errors");
  const vk::BufferSpan out = arena.alloc(4096), x = arena.alloc(4096), gamma = arena.alloc(64);
  vk::Recorder rec(g.device);
  rec.begin();
  auto ln = [&](Kind kind) {
    model::gpu::layernorm(g.kernels, rec, {.out = out, .x = x, .gamma = gamma, .beta = {}, .T = 4,
                                           .C = 16, .eps = kEps, .kind = kind});
  };
  CHECK_THROWS_WITH_AS(ln(Kind::Standard), doctest::Contains("layernorm: beta"), vk::Error);
  CHECK_THROWS_WITH_AS(ln(Kind::StdPlusEps), doctest::Contains("layernorm: beta"), vk::Error);
  ln(Kind::Rms);
  rec.end();
}

// The backward: dx = a g + sum(g x) da x with g = dout gamma, a = 1 / sqrt(mean(x^2) + eps),
// da = -a^3 / C; dgamma += sum_t dout x a; no dbeta. GPU against cpu::layernorm_backward, whose
// own formula test_grad_check.cpp checks by central differences. Tolerance: test_layernorm.cpp's
// for the backward (the forward's, then two more sums over C; dgamma sums T rows in order).
TEST_CASE("layernorm_backward Rms matches the CPU reference, both kernel sets") {
  GPU_TEST(g);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& dev = g.with_kernels(set);
    const model::gpu::Ops ops(dev);
    for (auto [T, C] : {std::tuple{200u, 512u}, std::tuple{64u, 1024u}, std::tuple{37u, 100u},
                        std::tuple{6u, 30u}}) {
      const std::vector<float> x = make_rows(T, C, T + C), gamma = test::random_floats(C, C, 0.5f, 1.5f),
                               dout = test::random_floats(size_t{T} * C, T * C);
      std::vector<float> dgamma = test::random_floats(C, C + 3);
      const std::vector<float> dbeta = test::random_floats(C, C + 4);
      const size_t n = x.size();
      vk::Arena arena(dev, (3 * n + 4 * C + 4 * T) * sizeof(float) + 65536, vk::MemoryKind::Device,
                      "test layernorm_backward rms");
      const vk::BufferSpan gx = test::to_gpu(dev, arena, x), gg = test::to_gpu(dev, arena, gamma),
                           gd = test::to_gpu(dev, arena, dout), gdg = test::to_gpu(dev, arena, dgamma),
                           gdb = test::to_gpu(dev, arena, dbeta), dx = arena.alloc(n * 4),
                           stats = arena.alloc(size_t{T} * 16);
      vk::Recorder rec(dev);
      rec.begin();
      // dbeta: empty, and a span given is left alone.
      for (const vk::BufferSpan& db : {vk::BufferSpan{}, gdb})
        model::gpu::layernorm_backward(ops, rec, {.dx = dx, .dgamma = gdg, .dbeta = db,
                                                  .stats = stats, .dout = gd, .x = gx,
                                                  .gamma = gg, .T = T, .C = C, .eps = kEps,
                                                  .kind = Kind::Rms});
      rec.run();
      std::vector<float> ref(n);
      for (int twice = 0; twice < 2; twice++)
        model::cpu::layernorm_backward(ref.data(), dgamma.data(), nullptr, dout.data(), x.data(),
                                       gamma.data(), T, C, kEps, Kind::Rms);
      const std::string what = std::string("layernorm_backward rms ") + vk::kernel_set_name(set) +
                               " kernels, T=" + std::to_string(T) + " C=" + std::to_string(C);
      CHECK(test::close(what + ": dx", test::from_gpu(dev, dx, n), ref, tolerance(ref)));
      CHECK(test::close(what + ": dgamma", test::from_gpu(dev, gdg, C), dgamma, tolerance(dgamma)));
      CHECK(test::close(what + ": dbeta untouched", test::from_gpu(dev, gdb, C), dbeta, {0, 0}));
    }
  }
}

namespace {

// The fused norm_linear with Rms: the reference normalises in double (cpu::layernorm), then runs
// the problem's own matmul reference on the normalised rows; the GPU reads the raw rows.
void check_fused(const vk::Device& dev, const model::gpu::Ops& ops, test::MatmulCase c,
                 MatmulKernel kernel, uint32_t x_row, unsigned seed, const std::string& what) {
  CAPTURE(what);
  const uint32_t T = c.T, K = c.K;
  const std::vector<float> x = make_rows(x_row + T, K, seed);
  const std::vector<float> gamma = test::random_floats(K, seed + 1, 0.5f, 1.5f);
  test::MatmulProblem p = test::make_problem(c, seed + 2);
  const std::vector<float> h = cpu_rms(x, gamma, x_row + T, K);
  test::MatmulProblem ref = p;
  ref.x.assign(h.begin() + ptrdiff_t{x_row} * K, h.end());
  ref = test::make_problem_from(ref);
  vk::Arena arena(dev, K * 4 + 1024, vk::MemoryKind::Device, "test rms norm");
  const model::gpu::MatmulNorm norm{test::upload(dev, arena, gamma.data(), K * 4), {}, Kind::Rms,
                                    kEps};
  p.x = x;
  CHECK(test::matches(ref, test::run_gpu(dev, ops, p, kernel, nullptr, &norm, nullptr, x_row),
                      what));
}

}  // namespace

TEST_CASE("matmul's fused Rms norm matches layernorm then matmul on the CPU, both kernel sets") {
  GPU_TEST(g);
  unsigned seed = 9100;
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& dev = g.with_kernels(set);
    const model::gpu::Ops ops(dev);
    const std::string in = std::string(" ") + vk::kernel_set_name(set) + " kernels";
    for (DType dtype : {DType::F32, DType::F16})
      for (uint32_t K : {512u, 768u, 1024u}) {
        // The wide GEMV (W [N, K]): decode's rows, the head's last row read from x_row.
        for (auto [T, N, x_row] : {std::tuple{1u, 130u, 0u}, std::tuple{8u, 70u, 3u}}) {
          const test::MatmulCase c{T, K, N, true, Activation::GeluTanh, test::Residual::Separate,
                                   WeightLayout::NK, dtype};
          check_fused(dev, ops, c, MatmulKernel::VectorWide, x_row, seed += 10,
                      test::describe(c, MatmulKernel::VectorWide) + " +rms" + in);
        }
        // Interleaved weights (matmul_interleaved and its subgroup-shuffle tile): a decode row
        // and a prompt of hundreds.
        if (!dev.caps().storage_texel_buffers) continue;
        for (auto [T, N] : {std::tuple{1u, 200u}, std::tuple{200u, 130u}}) {
          const test::MatmulCase c{T,  K, N, true, Activation::Relu, test::Residual::None,
                                   WeightLayout::KN, dtype, true};
          check_fused(dev, ops, c, MatmulKernel::Auto, 0, seed += 10,
                      test::describe(c, MatmulKernel::Auto) + " +rms" + in);
        }
      }
  }
}
