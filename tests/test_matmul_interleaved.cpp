// matmul over weights in the Interleaved layout (shaders/matmul_interleaved.glsl) against the CPU
// reference, with the tolerance of tests/test_matmul.cpp: the reference multiplies the weights as
// given ([K, N] or [N, K]); the GPU reads them repacked by model::gpu::interleave().
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "model/ops/cpu/common.h"
#include "model/ops/cpu/layernorm.h"
#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/matmul_argmax.h"
#include "model/ops/gpu/matmul.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "tests/matmul_problem.h"
#include "vk/check.h"

namespace {

using model::Activation;
using model::DType;
using model::gpu::MatmulKernel;
using model::WeightLayout;
using test::MatmulCase;
using test::Residual;

bool supported(const vk::Device& dev, const MatmulCase& c) {
  return model::gpu::matmul_interleaved_supported(dev.caps(), c.dtype, c.K);
}

void check(const vk::Device& dev, const model::gpu::Ops& kernels, MatmulCase c, unsigned seed,
           uint32_t min_dispatches = 1) {
  c.interleave = true;
  const test::MatmulProblem p = test::make_problem(c, seed);
  const std::string what = test::describe(c, MatmulKernel::Auto);
  CAPTURE(what);
  vk::RecorderStats stats;
  CHECK(test::matches(p, test::run_gpu(dev, kernels, p, MatmulKernel::Auto, &stats), what));
  CHECK(stats.dispatches >= min_dispatches);
}

}  // namespace

TEST_CASE("interleave puts texel (n, kt) at (n / B * K / E + kt) * B + n % B, zero padded") {
  // W [N, K] = [B + 8, 8] fp32 (E = 4): two blocks, the second with 8 rows and B - 8 of padding.
  const uint32_t B = push::MATMUL_BLOCK_ROWS, K = 8, N = B + 8;
  std::vector<float> nk(size_t(N) * K), kn(size_t(K) * N);
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t k = 0; k < K; k++) nk[n * K + k] = kn[k * N + n] = float(n * 100 + k + 1);
  REQUIRE(model::gpu::interleaved_bytes(DType::F32, K, N) == 2 * B * K * 4);
  for (WeightLayout from : {WeightLayout::NK, WeightLayout::KN}) {
    std::vector<float> out(2 * B * K, -1.0f);
    model::gpu::interleave(out.data(), from == WeightLayout::NK ? nk.data() : kn.data(), from,
                    DType::F32, K, N);
    for (uint32_t n = 0; n < 2 * B; n++)
      for (uint32_t k = 0; k < K; k++) {
        const float got = out[((n / B * 2 + k / 4) * B + n % B) * 4 + k % 4];
        CHECK(got == (n < N ? float(n * 100 + k + 1) : 0.0f));
      }
  }
  std::vector<uint16_t> h(size_t(N) * 12), dst(2 * B * 12);
  CHECK_THROWS_WITH_AS(model::gpu::interleave(dst.data(), h.data(), WeightLayout::NK, DType::F16, 12, N),
                       doctest::Contains("whole texels"), vk::Error);
}

// The device's repacking (shaders/interleave.comp) against the host's, bit for bit: both only
// move 32-bit words.
TEST_CASE("interleave on the device equals interleave on the host") {
  GPU_TEST(g);
  for (const auto& [K, N] : {std::pair<uint32_t, uint32_t>{8, 72}, {128, 384}, {512, 128}, {4, 1}}) {
    const std::vector<float> w = test::random_floats(size_t{K} * N, K + N);
    const uint64_t bytes = model::gpu::interleaved_bytes(DType::F32, K, N);
    for (WeightLayout from : {WeightLayout::KN, WeightLayout::NK}) {
      std::vector<float> want(bytes / 4);
      model::gpu::interleave(want.data(), w.data(), from, DType::F32, K, N);
      vk::Arena arena(g.device, bytes + w.size() * 4 + 65536, vk::MemoryKind::Device, "test interleave");
      const vk::BufferSpan src = test::to_gpu(g.device, arena, w), dst = arena.alloc(bytes);
      const std::vector<float> junk(bytes / 4, -7.0f);  // padding rows must be overwritten with 0
      vk::upload(g.device, dst, junk.data(), bytes);
      vk::Recorder rec(g.device);
      rec.begin();
      model::gpu::interleave(g.kernels, rec,
                             {.dst = dst, .src = src, .K = K, .N = N, .from = from});
      rec.run();
      const std::vector<float> got = test::from_gpu(g.device, dst, want.size());
      CHECK_MESSAGE(std::memcmp(got.data(), want.data(), bytes) == 0,
                    "K=" << K << " N=" << N << (from == WeightLayout::KN ? " from KN" : " from NK"));
    }
  }
  vk::Arena arena(g.device, 65536, vk::MemoryKind::Device, "test interleave errors");
  const vk::BufferSpan a = arena.alloc(16384);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::interleave(g.kernels, rec,
                             {.dst = a, .src = a, .K = 6, .N = 8, .from = WeightLayout::KN}),
      doctest::Contains("whole texels"), vk::Error);
  CHECK_THROWS_WITH_AS(
      model::gpu::interleave(g.kernels, rec,
                             {.dst = a, .src = a, .K = 64, .N = 128, .from = WeightLayout::KN}),
      doctest::Contains("dst"), vk::Error);
  rec.end();
}

TEST_CASE("matmul with interleaved weights matches the CPU reference") {
  GPU_TEST(g);
  if (!g.device.caps().storage_texel_buffers) {
    MESSAGE("SKIPPED: no rgba32 storage texel buffers for the interleaved kernel");
    return;
  }
  std::vector<MatmulCase> shapes = test::gpt2_matmul_shapes();
  shapes.push_back({33, 96, 67, true, Activation::GeluTanh, Residual::Separate});  // N off blocks
  unsigned seed = 2100;
  for (MatmulCase c : shapes)
    for (WeightLayout layout : {WeightLayout::KN, WeightLayout::NK})
      for (DType dtype : {DType::F32, DType::F16}) {
        c.layout = layout;
        c.dtype = dtype;
        check(g.device, g.kernels, c, seed += 10);
      }
  // Every epilogue over 72 rows: three workgroups along z (kInterleavedRows = 32, which the
  // plan takes from 64 rows on), the third with 8 rows.
  static_assert(model::gpu::kInterleavedRows == 32, "72 rows must span a partial third workgroup");
  for (Activation act :
       {Activation::None, Activation::GeluTanh, Activation::GeluErf, Activation::Relu,
        Activation::Silu})
    for (Residual residual : {Residual::None, Residual::Separate, Residual::InPlace})
      check(g.device, g.kernels, {72, 40, 50, true, act, residual, WeightLayout::KN, DType::F32},
            seed += 10);
}

TEST_CASE("interleaved matmul: x shared through the subgroup gives the bits of x loaded per lane") {
  GPU_TEST(g);
  if (!g.device.caps().storage_texel_buffers) {
    MESSAGE("SKIPPED: no rgba32 storage texel buffers for the interleaved kernel");
    return;
  }
  // Tiles of 2, 8 and 32 rows (the last with a partial third workgroup along z), N over an odd
  // number of 64-row blocks (the 32-row tile's workgroups hold two blocks, so the last one's
  // second block is past N and only lends its loads of x), with and without a fused LayerNorm:
  // against the CPU reference, and bit for bit against a device that reports no shuffles, whose
  // invocations each load x themselves.
  test::LoweredGpu plain(g, {.no_subgroup_shuffle = true});
  const vk::DeviceCaps& caps = g.device.caps();
  unsigned seed = 4100;
  for (DType dtype : {DType::F32, DType::F16})
    for (auto [T, K, N] : {std::tuple{2u, 96u, 130u}, std::tuple{8u, 768u, 197u},
                           std::tuple{5u, 128u, 64u}, std::tuple{72u, 96u, 130u}})
      for (bool fused : {false, true}) {
        MatmulCase c{T, K, N, true, Activation::GeluTanh, Residual::Separate, WeightLayout::KN,
                     dtype, true};
        test::MatmulProblem p = test::make_problem(c, seed++);
        std::vector<float> gamma = test::random_floats(K, seed++, 0.5f, 1.5f);
        std::vector<float> beta = test::random_floats(K, seed++);
        const std::string what = test::describe(c, MatmulKernel::Auto) + (fused ? " +layernorm" : "");
        CAPTURE(what);
        std::vector<float> got[2];
        std::set<std::string> ran[2];
        int i = 0;
        for (auto [dev, kernels] : {std::pair{&g.device, &g.kernels},
                                    std::pair{&plain.device, &plain.kernels}}) {
          vk::Arena arena(*dev, 2 * K * 4 + 1024, vk::MemoryKind::Device, "test shuffle norm");
          const model::gpu::MatmulNorm norm{test::upload(*dev, arena, gamma.data(), K * 4),
                                            test::upload(*dev, arena, beta.data(), K * 4),
                                            model::LayerNormKind::Standard, 1e-5f};
          got[i] = test::run_gpu(*dev, *kernels, p, MatmulKernel::Auto, nullptr,
                                 fused ? &norm : nullptr, &ran[i]);
          i++;
        }
        if (!fused) CHECK(test::matches(p, got[0], what));
        CHECK(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4) == 0);
        if (caps.timestamps) {
          // Every case's tile has several rows.
          const bool shuffles = model::gpu::matmul_interleaved_shuffles(caps, 2);
          CHECK(ran[0].count(shuffles ? "matmul_interleaved_shuffle" : "matmul_interleaved") == 1);
          CHECK(ran[1].count("matmul_interleaved") == 1);
          CHECK(ran[1].count("matmul_interleaved_shuffle") == 0);
        }
      }
}

TEST_CASE("matmul with interleaved weights splits them into blocks past maxTexelBufferElements") {
  GPU_TEST(g);
  if (!g.device.caps().storage_texel_buffers) {
    MESSAGE("SKIPPED: no rgba32 storage texel buffers for the interleaved kernel");
    return;
  }
  // With 64-row blocks, 1200 texels per view hold one block of rows of 12 or 18 texels, two of 9,
  // three of 6: W [130 or 200, K] splits into 2 to 4 chunks; x and out into passes of a few rows.
  static_assert(push::MATMUL_BLOCK_ROWS == 64, "the sizes below assume 64-row blocks");
  test::LoweredGpu small(g, {.max_texel_buffer_elements = 1200});
  unsigned seed = 2500;
  for (DType dtype : {DType::F32, DType::F16})
    for (const MatmulCase& base :
         {MatmulCase{5, 48, 200, true, Activation::GeluTanh, Residual::Separate},
          MatmulCase{11, 72, 130, true, Activation::None, Residual::InPlace}}) {
      MatmulCase c = base;
      c.dtype = dtype;
      if (supported(small.device, c)) check(small.device, small.kernels, c, seed += 10, 2);
    }
  // A block of rows that does not fit one view cannot be split.
  MatmulCase wide{1, 1024, 64};
  wide.interleave = true;
  const test::MatmulProblem p = test::make_problem(wide, 7);
  CHECK_THROWS_WITH_AS(test::run_gpu(small.device, small.kernels, p, MatmulKernel::Auto),
                       doctest::Contains("does not fit"), vk::Error);
}

namespace {

// The argmax of W [N, K] x over n on the GPU, as (n, value).
std::pair<int32_t, float> gpu_argmax(const vk::Device& dev, const model::gpu::Ops& kernels,
                                     const std::vector<float>& x, const std::vector<float>& w_nk,
                                     DType dtype, uint32_t K, uint32_t N,
                                     vk::RecorderStats* stats = nullptr) {
  std::vector<uint8_t> packed(model::gpu::interleaved_bytes(dtype, K, N));
  if (dtype == DType::F16) {
    std::vector<uint16_t> h = model::gpu::to_half(w_nk.data(), w_nk.size());
    model::gpu::interleave(packed.data(), h.data(), WeightLayout::NK, dtype, K, N);
  } else {
    model::gpu::interleave(packed.data(), w_nk.data(), WeightLayout::NK, dtype, K, N);
  }
  const uint32_t count = model::gpu::matmul_argmax_partials(N);
  vk::Arena arena(dev, packed.size() + (x.size() + 2 * count) * 4 + 4096, vk::MemoryKind::Device,
                   "test argmax");
  const vk::BufferSpan xs = test::upload(dev, arena, x.data(), x.size() * 4);
  const model::gpu::Weight w{test::upload(dev, arena, packed.data(), packed.size()), dtype};
  const vk::BufferSpan partials = arena.alloc(2 * count * 4);
  vk::Recorder rec(dev);
  rec.begin();
  model::gpu::matmul_argmax(
      kernels, rec,
      {.partials = partials, .x = xs, .w = w, .K = K, .N = N, .x_row = uint32_t(x.size() / K - 1)});
  rec.run();
  if (stats) *stats = rec.stats();
  std::vector<float> host(2 * count);
  vk::download(dev, host.data(), partials, host.size() * 4);
  return model::gpu::argmax_of_partials(host.data(), count);
}

}  // namespace

TEST_CASE("matmul_argmax finds the best output of an interleaved head, ties to the lower id") {
  GPU_TEST(g);
  if (!g.device.caps().storage_texel_buffers) {
    MESSAGE("SKIPPED: no rgba32 storage texel buffers for the interleaved kernel");
    return;
  }
  // x has two rows; the head reads the last, as decoding does.
  for (DType dtype : {DType::F32, DType::F16})
    for (auto [K, N] : {std::pair{64u, 5003u}, std::pair{768u, 300u}, std::pair{8u, 1u}}) {
      CAPTURE(K);
      CAPTURE(N);
      std::vector<float> x = test::random_floats(2 * size_t(K), K + N);
      std::vector<float> w = test::random_floats(size_t(N) * K, K * N);
      // Row N / 2 is the clear winner; a copy of it after it must lose the tie.
      for (uint32_t k = 0; k < K; k++) w[size_t(N / 2) * K + k] = x[K + k] > 0 ? 0.5f : -0.5f;
      if (N > 2)
        for (uint32_t k = 0; k < K; k++) w[size_t(N - 1) * K + k] = w[size_t(N / 2) * K + k];
      // The reference: the same rounded weights, in double.
      std::vector<float> used(w);
      if (dtype == DType::F16)
        for (float& v : used) v = model::cpu::round_to_half(v);
      double best = 0;
      int32_t best_n = -1;
      for (uint32_t n = 0; n < N; n++) {
        double s = 0;
        for (uint32_t k = 0; k < K; k++) s += double(x[K + k]) * double(used[size_t(n) * K + k]);
        if (best_n < 0 || s > best) {
          best = s;
          best_n = int32_t(n);
        }
      }
      auto [id, value] = gpu_argmax(g.device, g.kernels, x, w, dtype, K, N);
      CHECK(id == best_n);
      CHECK(std::fabs(double(value) - best) <= 1e-5 * std::fabs(best));
    }
}

TEST_CASE("matmul_argmax: NaN outputs count as -inf; an interleaved head splits into blocks") {
  GPU_TEST(g);
  if (!g.device.caps().storage_texel_buffers) {
    MESSAGE("SKIPPED: no rgba32 storage texel buffers for the interleaved kernel");
    return;
  }
  const uint32_t K = 16, N = 300;
  std::vector<float> x(K, 1.0f), w(size_t(N) * K, -1.0f);
  for (uint32_t k = 0; k < K; k++) {
    w[size_t(7) * K + k] = NAN;   // a NaN output ahead of the best
    w[size_t(250) * K + k] = 2;   // the best, in the fourth block
  }
  auto [id, value] = gpu_argmax(g.device, g.kernels, x, w, DType::F32, K, N);
  CHECK(id == 250);
  CHECK(value == 32.0f);
  // 600 texels per view hold two 64-row blocks of 4 texels (and the alignment slack): five
  // blocks, three chunks.
  test::LoweredGpu small(g, {.max_texel_buffer_elements = 600});
  vk::RecorderStats stats;
  auto [id2, value2] = gpu_argmax(small.device, small.kernels, x, w, DType::F32, K, N, &stats);
  CHECK(stats.dispatches == 3);
  CHECK(id2 == 250);
  CHECK(value2 == 32.0f);
  // Every output NaN: no winner.
  std::vector<float> all_nan(size_t(N) * K, NAN);
  CHECK(gpu_argmax(g.device, g.kernels, x, all_nan, DType::F32, K, N).first == -1);
}

TEST_CASE("matmul with a fused LayerNorm matches layernorm then matmul on the CPU") {
  GPU_TEST(g);
  if (!g.device.caps().storage_texel_buffers) {
    MESSAGE("SKIPPED: no rgba32 storage texel buffers for the interleaved kernel");
    return;
  }
  // Rows like GPT-2's residual stream: a mean in the thousands, a small spread. The tolerance
  // is the matmul's, relative to sum_k |layernorm(x)_k W(k, n)| + |b[n]| + |r[t, n]|.
  unsigned seed = 3100;
  for (model::LayerNormKind kind : {model::LayerNormKind::Standard, model::LayerNormKind::StdPlusEps})
    for (DType dtype : {DType::F32, DType::F16})
      for (auto [T, K, N] : {std::tuple{1u, 128u, 384u}, std::tuple{37u, 768u, 200u}}) {
        CAPTURE(T);
        CAPTURE(K);
        CAPTURE(static_cast<int>(kind));
        std::vector<float> x = test::random_floats(size_t(T) * K, seed++, -2.0f, 2.0f);
        for (float& v : x) v += 3000.0f;
        std::vector<float> gamma = test::random_floats(K, seed++, 0.5f, 1.5f);
        std::vector<float> beta = test::random_floats(K, seed++);
        MatmulCase c{T, K, N, true, Activation::GeluTanh, Residual::Separate, WeightLayout::KN,
                     dtype, true};
        test::MatmulProblem p = test::make_problem(c, seed++);
        // The reference: layernorm in double, then the problem's own reference on its output.
        std::vector<float> h(x.size());
        model::cpu::layernorm(h.data(), x.data(), gamma.data(), beta.data(), T, K, 1e-5f, kind);
        test::MatmulProblem ref = p;
        ref.x = h;
        ref = test::make_problem_from(ref);
        // The GPU reads the raw rows and normalises them itself.
        vk::Arena arena(g.device, 2 * K * 4 + 1024, vk::MemoryKind::Device, "test norm");
        const model::gpu::MatmulNorm norm{test::upload(g.device, arena, gamma.data(), K * 4),
                                   test::upload(g.device, arena, beta.data(), K * 4), kind, 1e-5f};
        p.x = x;
        const std::vector<float> got =
            test::run_gpu(g.device, g.kernels, p, MatmulKernel::Auto, nullptr, &norm);
        CHECK(test::matches(ref, got, test::describe(c, MatmulKernel::Auto) + " +layernorm"));
      }
}
