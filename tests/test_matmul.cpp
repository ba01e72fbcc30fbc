// matmul: both kernels (shaders/matmul.comp tiled, shaders/matmul_vec.comp matrix-vector) against
// the CPU reference, on the same shapes, for both weight layouts and both weight dtypes.
//
// Tolerance: |gpu - ref| <= 1e-5 * mag[t, n], mag = sum_k |x[t, k] W(k, n)| + |b[n]| + |r[t, n]|,
// the magnitude of the row's terms: fp32 accumulation in a different order (sequential over K in
// the tiled kernel, strided lanes and a tree in the matrix-vector one) errs by a few ulps of that
// sum, never of the result, which may cancel to near zero. The activations' fp32 formulas add a
// few ulps of the value. The same bound holds for fp16 weights because the reference uses the
// fp16-rounded weights: what remains is only fp32 accumulation order.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "model/ops/cpu/layernorm.h"
#include "model/ops/cpu/matmul.h"
#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/matmul.h"
#include "model/ops/gpu/coop_check.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "tests/matmul_problem.h"
#include "vk/check.h"

namespace {

using model::Activation;
using model::DType;
using model::gpu::MatmulKernel;
using model::WeightLayout;
using test::matches;
using test::Residual;
using test::run_gpu;
using test::upload;
using Case = test::MatmulCase;
using Problem = test::MatmulProblem;

constexpr double kTol = test::kMatmulTol;

// The kernels that can run `c` on `dev`: both storage-buffer ones, the wide one for W [N, K] in
// whole 16-byte vectors (the test's spans start on the arena's 16-byte alignment), and the texel
// one where the device and the shape allow it.
std::vector<MatmulKernel> kernels_for(const vk::Device& dev, const Case& c) {
  std::vector<MatmulKernel> k{MatmulKernel::Vector, MatmulKernel::Tiled};
  if (model::gpu::matmul_wide_supported(c.dtype, c.layout, c.K, 0, 0))
    k.push_back(MatmulKernel::VectorWide);
  if (model::gpu::matmul_texel_supported(dev.caps(), c.dtype, c.layout, c.K, c.N))
    k.push_back(MatmulKernel::VectorTexel);
  return k;
}

// Every kernel on the same problem.
void check_kernels(const vk::Device& dev, const model::gpu::Ops& kernels, const Case& c,
                        unsigned seed) {
  Problem p = test::make_problem(c, seed);
  for (MatmulKernel kernel : kernels_for(dev, c)) {
    std::string what = test::describe(c, kernel);
    CAPTURE(what);
    CHECK(matches(p, run_gpu(dev, kernels, p, kernel), what));
  }
}

}  // namespace

TEST_CASE("matmul matches the CPU reference on GPT-2 shapes, both kernels, layouts and dtypes") {
  GPU_TEST(g);
  std::vector<Case> shapes = test::gpt2_matmul_shapes();
  shapes.push_back({1024, 16, 24, true, Activation::None, Residual::InPlace});      // n_ctx rows
  shapes.push_back({33, 100, 67, true, Activation::GeluTanh, Residual::Separate});  // no multiple
  // The wide kernel's K loop at 64 lanes: fp32 texels per row of 2 x 64 + 8 (the unrolled pair
  // and a tail) and 64 + 8 (the tail alone); fp16 at half as many. Odd N: a group's last row.
  shapes.push_back({5, 544, 33, true, Activation::None, Residual::Separate});
  shapes.push_back({8, 288, 7, false, Activation::GeluErf, Residual::InPlace});
  unsigned seed = 100;
  for (Case c : shapes)
    for (WeightLayout layout : {WeightLayout::KN, WeightLayout::NK})
      for (DType dtype : {DType::F32, DType::F16}) {
        c.layout = layout;
        c.dtype = dtype;
        check_kernels(g.device, g.kernels, c, seed += 10);
      }
}

TEST_CASE("matmul epilogues: bias, every activation, residual separate and in place") {
  GPU_TEST(g);
  // 70 rows: two row tiles in the tiled kernel, nine passes in the matrix-vector one. The
  // epilogue does not depend on the weight, so each activation takes one layout and dtype (all
  // four pairs appear), which keeps the number of pipelines to compile down.
  unsigned seed = 500, a = 0;
  for (Activation act : {Activation::None, Activation::GeluTanh, Activation::GeluErf,
                         Activation::Relu, Activation::Tanh, Activation::Silu}) {
    const WeightLayout layout = a % 2 ? WeightLayout::NK : WeightLayout::KN;
    const DType dtype = a / 2 % 2 ? DType::F16 : DType::F32;
    a++;
    for (bool bias : {false, true})
      for (Residual residual : {Residual::None, Residual::Separate, Residual::InPlace})
        check_kernels(g.device, g.kernels, {70, 40, 50, bias, act, residual, layout, dtype},
                           seed += 10);
  }
}

TEST_CASE("matmul splits tensors larger than maxStorageBufferRange") {
  GPU_TEST(g);
  // A range of 3 KiB holds 10 rows of out [T, 71] and 10 to 37 rows of W: every case splits W
  // into 2 to 5 chunks (of K for [K, N], of N for [N, K]), and T = 37 splits x, out and the
  // residual into passes too. Rows of 41 and 71 floats make the chunks and passes start off the
  // 16-byte (or coarser) binding alignment, and fp16 chunks start at odd elements.
  vk::DeviceOptions options;
  options.select = std::to_string(g.device.index());
  options.overrides.max_storage_buffer_range = 3072;
  vk::Device small(g.instance, options);
  vk::Kernels pipelines(small);
  const model::gpu::Ops kernels(pipelines);
  unsigned seed = 900;
  for (uint32_t T : {5u, 37u})
    for (WeightLayout layout : {WeightLayout::KN, WeightLayout::NK})
      for (DType dtype : {DType::F32, DType::F16}) {
        // All epilogue steps at once, and the in-place residual that K-chunks must read first.
        Case full{T, 41, 71, true, Activation::GeluTanh, Residual::Separate, layout, dtype};
        Case in_place{T, 41, 71, true, Activation::None, Residual::InPlace, layout, dtype};
        for (const Case& c : {full, in_place}) {
          Problem p = test::make_problem(c, seed += 10);
          for (MatmulKernel kernel : {MatmulKernel::Vector, MatmulKernel::Tiled}) {
            std::string what = test::describe(c, kernel);
            CAPTURE(what);
            vk::RecorderStats stats;
            CHECK(matches(p, run_gpu(small, kernels, p, kernel, &stats), what));
            CHECK(stats.dispatches >= 2);
          }
        }
      }

  // The wide kernel: K = 40 in whole vectors, chunks of W [N, K] and passes starting on 16 bytes.
  for (uint32_t T : {5u, 37u})
    for (DType dtype : {DType::F32, DType::F16}) {
      const Case c{T, 40, 71, true, Activation::GeluTanh, Residual::InPlace,
                   WeightLayout::NK, dtype};
      Problem p = test::make_problem(c, seed += 10);
      std::string what = test::describe(c, MatmulKernel::VectorWide);
      CAPTURE(what);
      vk::RecorderStats stats;
      CHECK(matches(p, run_gpu(small, kernels, p, MatmulKernel::VectorWide, &stats), what));
      CHECK(stats.dispatches >= 2);
      // With a fused LayerNorm: every chunk and pass takes its rows' statistics itself.
      const std::vector<float> gamma = test::random_floats(c.K, seed + 1, 0.5f, 1.5f);
      const std::vector<float> beta = test::random_floats(c.K, seed + 2);
      std::vector<float> h(p.x.size());
      model::cpu::layernorm(h.data(), p.x.data(), gamma.data(), beta.data(), T, c.K, 1e-5f,
                            model::LayerNormKind::Standard);
      Problem ref = p;
      ref.x = h;
      ref = test::make_problem_from(ref);
      vk::Arena arena(small, 1024, vk::MemoryKind::Device, "test norm");
      const model::gpu::MatmulNorm norm{upload(small, arena, gamma.data(), c.K * 4),
                                        upload(small, arena, beta.data(), c.K * 4)};
      CHECK(matches(ref, run_gpu(small, kernels, p, MatmulKernel::VectorWide, &stats, &norm),
                    what + " +layernorm"));
      CHECK(stats.dispatches >= 2);
    }

  // An activation over an in-place residual cannot survive a split over K; a row of x wider
  // than the range cannot be split at all.
  Problem act_in_place = test::make_problem({5, 41, 71, false, Activation::Relu, Residual::InPlace}, 1);
  CHECK_THROWS_WITH_AS(run_gpu(small, kernels, act_in_place, MatmulKernel::Auto),
                       doctest::Contains("in-place residual"), vk::Error);
  Problem wide = test::make_problem({1, 1000, 8}, 2);
  CHECK_THROWS_WITH_AS(run_gpu(small, kernels, wide, MatmulKernel::Auto),
                       doctest::Contains("maxStorageBufferRange"), vk::Error);
}

TEST_CASE("matmul's texel kernel splits tensors larger than maxTexelBufferElements") {
  GPU_TEST(g);
  if (!g.device.caps().storage_texel_buffers) {
    MESSAGE("SKIPPED: no rgba32 storage texel buffers");
    return;
  }
  // 128 texels (2 KiB) per view: a row of W is 6 to 18 texels, so W [K, N] splits over K into
  // 4 to 12 chunks of a multiple of 4 rows (k_base stays on an x texel) and W [N, K] over N into
  // 4 to 8; x and out [11, 72] split into passes of 7 rows.
  test::LoweredGpu small(g, {.max_texel_buffer_elements = 128});
  unsigned seed = 1700;
  for (WeightLayout layout : {WeightLayout::KN, WeightLayout::NK})
    for (DType dtype : {DType::F32, DType::F16})
      for (const Case& c : {Case{5, 48, 72, true, Activation::GeluTanh, Residual::Separate},
                            Case{11, 72, 48, true, Activation::None, Residual::InPlace}}) {
        Case cc = c;
        cc.layout = layout;
        cc.dtype = dtype;
        Problem p = test::make_problem(cc, seed += 10);
        std::string what = test::describe(cc, MatmulKernel::VectorTexel);
        CAPTURE(what);
        vk::RecorderStats stats;
        CHECK(matches(p, run_gpu(small.device, small.kernels, p, MatmulKernel::VectorTexel, &stats),
                      what));
        CHECK(stats.dispatches >= 4);
      }
}

TEST_CASE("matmul falls back to small tiles and workgroups on small device limits") {
  GPU_TEST(g);
  // 64 invocations: the tiled kernel takes 32 x 32 tiles, the vector kernel 64-invocation
  // workgroups; 16: 4 x 4 tiles, and one lane per output for W [K, N]. (Shared memory does not
  // choose: the shaders' arrays have fixed sizes, within the 16 KiB every device has.)
  unsigned seed = 1300;
  for (uint32_t invocations : {64u, 16u}) {
    vk::DeviceOptions options;
    options.select = std::to_string(g.device.index());
    options.overrides.max_workgroup_invocations = invocations;
    vk::Device small(g.instance, options);
    vk::Kernels pipelines(small);
    const model::gpu::Ops kernels(pipelines);
    for (WeightLayout layout : {WeightLayout::KN, WeightLayout::NK})
      for (DType dtype : {DType::F32, DType::F16})
        check_kernels(small, kernels,
                      {37, 75, 130, true, Activation::GeluErf, Residual::Separate, layout, dtype},
                      seed += 10);
  }
}

TEST_CASE("matmul on a device with less shared memory than its shaders declare: a clear error") {
  GPU_TEST(g);
  // 1 KiB, below Vulkan's minimum of 16 KiB: every kernel's fixed-size arrays are larger.
  vk::DeviceOptions options;
  options.select = std::to_string(g.device.index());
  options.overrides.max_shared_memory = 1024;
  vk::Device small(g.instance, options);
  vk::Kernels pipelines(small);
  const model::gpu::Ops kernels(pipelines);
  const Case c{4, 64, 32};
  Problem p = test::make_problem(c, 1400);
  for (MatmulKernel kernel : kernels_for(small, c)) {
    const std::string what = test::describe(c, kernel);
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(run_gpu(small, kernels, p, kernel),
                         doctest::Contains("bytes of shared memory; device"), vk::Error);
  }
}

TEST_CASE("matmul's wide kernel under lowered limits and without subgroup arithmetic") {
  GPU_TEST(g);
  // Without subgroup arithmetic the partial sums meet in a shared-memory tree; 32 or 16
  // invocations shrink the workgroup (more texels per lane, more steps of the unrolled loop).
  unsigned seed = 2100;
  for (const vk::LimitOverrides& limits :
       {vk::LimitOverrides{.no_subgroup_arithmetic = true},
        vk::LimitOverrides{.max_workgroup_invocations = 32, .no_subgroup_arithmetic = true},
        vk::LimitOverrides{.max_shared_memory = 16384, .max_workgroup_invocations = 16}}) {
    test::LoweredGpu low(g, limits);
    // 2 and 4 rows of W per workgroup (the tuning's gemv_outs): at 4, 8 rows of x make more
    // sums than a 16-invocation workgroup has invocations.
    for (uint32_t outs : {2u, 4u}) {
      model::gpu::KernelPolicy policy = low.kernels.policy();
      policy.tuning.gemv_outs = outs;
      const model::gpu::Ops ops(low.device.kernels(), policy);
      for (DType dtype : {DType::F32, DType::F16})
        for (const Case& c : {Case{1, 768, 130, true, Activation::None, Residual::InPlace},
                              Case{6, 1600, 45, true, Activation::GeluTanh, Residual::Separate}}) {
          Case cc = c;
          cc.layout = WeightLayout::NK;
          cc.dtype = dtype;
          Problem p = test::make_problem(cc, seed += 10);
          std::string what = test::describe(cc, MatmulKernel::VectorWide) + " invocations " +
                             std::to_string(low.device.caps().max_workgroup_invocations) +
                             (low.device.caps().subgroup_arithmetic ? " subgroupAdd" : " tree") +
                             ", outputs per workgroup " + std::to_string(outs);
          CAPTURE(what);
          CHECK(matches(p, run_gpu(low.device, ops, p, MatmulKernel::VectorWide), what));
        }
    }
  }
}

// The wide kernel's shapes the tuning table may choose (GPT2VK_GEMV=WGxOUTS sets it): 1, 2 and 4
// rows of W per workgroup of 32 to 128 invocations, N not a multiple of the rows (the last
// workgroup's extra rows read the last row and store nothing), one to eight rows of x, with the
// subgroup reduction and the tree, and the fused LayerNorm. Tolerance: kTol of the magnitude.
TEST_CASE("matmul's wide kernel at every workgroup shape the tuning may pick") {
  GPU_TEST(g);
  unsigned seed = 2300;
  for (const char* shape : {"32x1", "64x2", "128x4", "128x1"})
    for (bool tree : {false, true}) {
      setenv("GPT2VK_GEMV", shape, 1);
      test::LoweredGpu low(g, {.no_subgroup_arithmetic = tree}, vk::KernelSet::Gpu);
      CHECK(model::gpu::Ops(low.device).policy().tuning.gemv_workgroup == std::stoul(shape));
      for (const Case& c : {Case{1, 1600, 6403, true, Activation::GeluTanh, Residual::None},
                            Case{8, 768, 130, false, Activation::None, Residual::InPlace},
                            Case{3, 64, 7, true, Activation::None, Residual::Separate}}) {
        Case cc = c;
        cc.layout = WeightLayout::NK;
        cc.dtype = DType::F16;
        Problem p = test::make_problem(cc, seed += 10);
        const std::string what = test::describe(cc, MatmulKernel::VectorWide) + " GEMV " + shape +
                                 (tree ? " tree" : " subgroupAdd");
        CAPTURE(what);
        CHECK(matches(p, run_gpu(low.device, low.kernels, p, MatmulKernel::VectorWide), what));
        if (cc.K % 4 == 0) {  // the fused LayerNorm: the reference normalises in double
          const std::vector<float> gamma = test::random_floats(cc.K, seed + 1, 0.5f, 1.5f),
                                   beta = test::random_floats(cc.K, seed + 2);
          std::vector<float> h(p.x.size());
          model::cpu::layernorm(h.data(), p.x.data(), gamma.data(), beta.data(), cc.T, cc.K,
                                1e-5f, model::LayerNormKind::Standard);
          Problem ref = p;
          ref.x = h;
          ref = test::make_problem_from(ref);
          vk::Arena arena(low.device, 2 * cc.K * 4 + 1024, vk::MemoryKind::Device, "test norm");
          const model::gpu::MatmulNorm norm{upload(low.device, arena, gamma.data(), cc.K * 4),
                                            upload(low.device, arena, beta.data(), cc.K * 4),
                                            model::LayerNormKind::Standard, 1e-5f};
          CHECK(matches(ref, run_gpu(low.device, low.kernels, p, MatmulKernel::VectorWide, nullptr, &norm),
                        what + " with its LayerNorm"));
        }
      }
    }
  unsetenv("GPT2VK_GEMV");
}

TEST_CASE("matmul's wide kernel with a fused LayerNorm matches layernorm then matmul on the CPU") {
  GPU_TEST(g);
  // Rows like GPT-2's residual stream: a mean in the thousands, a small spread. The tolerance
  // is the matmul's, relative to sum_k |layernorm(x)_k W(k, n)| + |b[n]| + |r[t, n]|: the
  // statistics are fp32 sums in another order than the CPU's double ones. Both reductions
  // (subgroupAdd, the shared-memory tree at 64 and 16 invocations), 1 to 8 rows, K of 8 texels
  // or past the workgroup's, ragged N, and rows read from x_row (the head's last row).
  unsigned seed = 5100;
  for (const vk::LimitOverrides& limits :
       {vk::LimitOverrides{}, vk::LimitOverrides{.no_subgroup_arithmetic = true},
        vk::LimitOverrides{.max_workgroup_invocations = 16, .no_subgroup_arithmetic = true}}) {
    test::LoweredGpu low(g, limits);
    for (model::LayerNormKind kind :
         {model::LayerNormKind::Standard, model::LayerNormKind::StdPlusEps})
      for (DType dtype : {DType::F32, DType::F16})
        for (auto [T, K, N, x_row] :
             {std::tuple{1u, 768u, 130u, 0u}, std::tuple{3u, 1600u, 45u, 2u},
              std::tuple{8u, 64u, 70u, 0u}, std::tuple{5u, 768u, 200u, 9u}}) {
          Case c{T, K, N, true, Activation::GeluTanh,
                 x_row == 2 ? Residual::InPlace : Residual::Separate, WeightLayout::NK, dtype};
          const std::string what =
              test::describe(c, MatmulKernel::VectorWide) + " +layernorm kind " +
              std::to_string(static_cast<int>(kind)) + " x_row " + std::to_string(x_row) +
              (low.device.caps().subgroup_arithmetic ? " subgroupAdd" : " tree") +
              " invocations " + std::to_string(low.device.caps().max_workgroup_invocations);
          CAPTURE(what);
          std::vector<float> x = test::random_floats(size_t(x_row + T) * K, seed++, -2.0f, 2.0f);
          for (float& v : x) v += 3000.0f;
          const std::vector<float> gamma = test::random_floats(K, seed++, 0.5f, 1.5f);
          const std::vector<float> beta = test::random_floats(K, seed++);
          Problem p = test::make_problem(c, seed++);
          // The reference: layernorm in double, then the problem's own reference on its rows.
          std::vector<float> h(x.size());
          model::cpu::layernorm(h.data(), x.data(), gamma.data(), beta.data(), x_row + T, K, 1e-5f,
                                kind);
          Problem ref = p;
          ref.x.assign(h.begin() + ptrdiff_t{x_row} * K, h.end());
          ref = test::make_problem_from(ref);
          vk::Arena arena(low.device, 2 * K * 4 + 1024, vk::MemoryKind::Device, "test norm");
          const model::gpu::MatmulNorm norm{upload(low.device, arena, gamma.data(), K * 4),
                                            upload(low.device, arena, beta.data(), K * 4), kind,
                                            1e-5f};
          p.x = x;  // the GPU reads the raw rows and normalises them itself
          CHECK(matches(ref,
                        run_gpu(low.device, low.kernels, p, MatmulKernel::VectorWide, nullptr,
                                &norm, nullptr, x_row),
                        what));
        }
  }
  // The kernels that cannot fuse one say so.
  Case c{9, 64, 16, false, Activation::None, Residual::None, WeightLayout::NK, DType::F32};
  Problem p = test::make_problem(c, 77);
  vk::Arena arena(g.device, 1024, vk::MemoryKind::Device, "test norm");
  const std::vector<float> ones(64, 1.0f);
  const model::gpu::MatmulNorm norm{upload(g.device, arena, ones.data(), 256),
                                    upload(g.device, arena, ones.data(), 256)};
  for (MatmulKernel kernel : {MatmulKernel::Tiled, MatmulKernel::Vector})
    CHECK_THROWS_WITH_AS(run_gpu(g.device, g.kernels, p, kernel, nullptr, &norm),
                         doctest::Contains("a fused LayerNorm needs interleaved weights or the "
                                           "wide matrix-vector kernel"),
                         vk::Error);
}

TEST_CASE("matmul picks its kernel by T and by device") {
  GPU_TEST(g);
  if (!g.device.caps().timestamps) {
    MESSAGE("SKIPPED: no timestamps to name the dispatched shaders");
    return;
  }
  vk::Arena arena(g.device, 1 << 16, vk::MemoryKind::Device, "test matmul auto");
  vk::BufferSpan x = arena.alloc(16 * 64 * 4), out = arena.alloc(16 * 32 * 4);
  model::gpu::Weight w{arena.alloc(64 * 32 * 4), DType::F32};
  vk::Recorder rec(g.device, true);
  rec.begin();
  for (uint32_t T : {1u, model::gpu::kMatmulVecRows, model::gpu::kMatmulVecRows + 1})
    model::gpu::matmul(g.kernels, rec, {.out = out, .x = x, .w = w, .T = T, .K = 64, .N = 32});
  rec.run();
  std::vector<vk::DispatchTime> t = rec.timings();
  // CPU devices take the texel kernel wherever the shape allows it, as this one does, for any T
  // (in passes of kMatmulVecRows rows); GPUs the matrix-vector kernel up to kMatmulVecRows rows,
  // then the tiles.
  const vk::DeviceCaps& caps = g.device.caps();
  if (model::gpu::Ops(g.device).policy().texel_matmul && caps.storage_texel_buffers) {
    REQUIRE(t.size() == 4);  // T = 9: two passes
    for (const vk::DispatchTime& d : t) CHECK(d.shader == "matmul_vec_texel");
  } else {
    REQUIRE(t.size() == 3);
    CHECK(t[0].shader == "matmul_vec");
    CHECK(t[1].shader == "matmul_vec");
    CHECK(t[2].shader == "matmul");
  }
  // W [N, K] in whole vectors on 16-byte spans: the GPU set's decode (forced here) takes the
  // wide kernel.
  {
    test::LoweredGpu gpu_set(g, {}, vk::KernelSet::Gpu);
    vk::Arena nk_arena(gpu_set.device, 1 << 16, vk::MemoryKind::Device, "test matmul wide");
    vk::BufferSpan nx = nk_arena.alloc(64 * 4), nout = nk_arena.alloc(32 * 4);
    model::gpu::Weight nw{nk_arena.alloc(64 * 32 * 4), DType::F32};
    vk::Recorder nk(gpu_set.device, true);
    nk.begin();
    model::gpu::matmul(gpu_set.kernels, nk,
                       {.out = nout,
                        .x = nx,
                        .w = nw,
                        .T = 1,
                        .K = 64,
                        .N = 32,
                        .options = {.layout = WeightLayout::NK}});
    nk.run();
    const std::string expect =
        caps.subgroup_arithmetic ? "matmul_vec_wide" : "matmul_vec_wide_shared";
    REQUIRE(nk.timings().size() == 1);
    CHECK(nk.timings()[0].shader == expect);
  }
}

TEST_CASE("matmul rejects bad arguments") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 1 << 16, vk::MemoryKind::Device, "test matmul errors");
  vk::BufferSpan x = arena.alloc(4 * 64 * 4), out = arena.alloc(4 * 32 * 4);
  vk::BufferSpan bias = arena.alloc(32 * 4);
  model::gpu::Weight w{arena.alloc(64 * 32 * 4), DType::F32};
  model::gpu::Weight w16{arena.alloc(64 * 32 * 2), DType::F16};
  vk::Recorder rec(g.device);
  rec.begin();
  auto throws = [&](auto call, const char* message) {
    CHECK_THROWS_WITH_AS(call(), doctest::Contains(message), vk::Error);
  };
  const auto run = [&](const model::gpu::MatmulArgs& a) { model::gpu::matmul(g.kernels, rec, a); };
  throws([&] { run({.out = out, .x = x, .w = w, .T = 0, .K = 64, .N = 32}); }, "must be positive");
  throws([&] { run({.out = out, .x = x, .w = w, .T = 5, .K = 64, .N = 32}); }, "out holds");
  throws([&] { run({.out = out, .x = x, .w = w, .T = 1, .K = 65, .N = 32}); }, "w holds");
  throws([&] { run({.out = out, .x = x, .w = w16, .T = 1, .K = 64, .N = 33}); }, "w holds");
  throws(
      [&] {
        run({.out = out,
             .x = x,
             .w = w,
             .T = 1,
             .K = 64,
             .N = 32,
             .options = {.kernel = MatmulKernel::VectorWide}});
      },
      "wide kernel cannot run");
  throws(
      [&] {
        run({.out = out,
             .x = x,
             .w = w,
             .T = 1,
             .K = 62,
             .N = 30,
             .options = {.kernel = MatmulKernel::VectorTexel}});
      },
      "texel-buffer kernel cannot run");
  vk::BufferSpan short_bias = bias.sub(0, 16 * 4);
  throws([&] { run({.out = out, .x = x, .w = w, .bias = &short_bias, .T = 4, .K = 64, .N = 32}); },
         "bias holds");
  vk::BufferSpan inside = out.sub(16, 16 * 4);
  throws([&] { run({.out = inside, .x = out, .w = w, .T = 1, .K = 16, .N = 16}); },
         "out overlaps x");
  vk::BufferSpan shifted = out.sub(64, 3 * 32 * 4);
  throws(
      [&] {
        run({.out = out,
             .x = x,
             .w = w,
             .bias = &bias,
             .residual = &shifted,
             .T = 3,
             .K = 64,
             .N = 32});
      },
      "residual overlaps out");
  throws([&] { run({.out = bias, .x = x, .w = w, .bias = &bias, .T = 1, .K = 64, .N = 32}); },
         "out overlaps bias");
  rec.end();
}

TEST_CASE("matmul reads x from row x_row, wherever it falls against the alignment") {
  GPU_TEST(g);
  // K = 37: row 4 starts at byte 592, not a multiple of 16 (lavapipe) nor 64 or 256.
  const uint32_t rows = 5, K = 37, N = 29, x_row = 4;
  std::vector<float> x = test::random_floats(size_t(rows) * K, 7);
  std::vector<float> w = test::random_floats(size_t(N) * K, 8);
  std::vector<float> ref(N), mag(N), ax(x), aw(w);
  model::cpu::matmul(ref.data(), x.data() + size_t(x_row) * K, w.data(), nullptr, nullptr, 1, K, N,
              WeightLayout::NK);
  for (float& v : ax) v = std::fabs(v);
  for (float& v : aw) v = std::fabs(v);
  model::cpu::matmul(mag.data(), ax.data() + size_t(x_row) * K, aw.data(), nullptr, nullptr, 1, K, N,
              WeightLayout::NK);
  vk::Arena arena(g.device, 1 << 16, vk::MemoryKind::Device, "test matmul x_row");
  vk::BufferSpan xs = upload(g.device, arena, x.data(), x.size() * 4);
  model::gpu::Weight ws{upload(g.device, arena, w.data(), w.size() * 4), DType::F32};
  vk::BufferSpan out = arena.alloc(2 * N * 4);  // room for the 2 rows of the bad call below
  for (MatmulKernel kernel : {MatmulKernel::Vector, MatmulKernel::Tiled}) {
    vk::Recorder rec(g.device);
    rec.begin();
    model::gpu::matmul(g.kernels, rec,
                       {.out = out,
                        .x = xs,
                        .w = ws,
                        .T = 1,
                        .K = K,
                        .N = N,
                        .options = {.layout = WeightLayout::NK, .kernel = kernel, .x_row = x_row}});
    rec.run();
    std::vector<float> got(N), gn(N), rn(N);
    vk::download(g.device, got.data(), out, N * 4);
    for (size_t i = 0; i < N; i++) {
      gn[i] = got[i] / mag[i];
      rn[i] = ref[i] / mag[i];
    }
    CHECK(test::close("matmul x_row, values / mag", gn, rn, {kTol, 0}));
  }
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::matmul(g.kernels, rec,
                         {.out = out,
                          .x = xs,
                          .w = ws,
                          .T = 2,
                          .K = K,
                          .N = N,
                          .options = {.layout = WeightLayout::NK, .x_row = x_row}}),
      doctest::Contains("x holds"), vk::Error);
  rec.end();
}

TEST_CASE("transpose_kn turns W [K, N] into [N, K] across its blocks") {
  // 37 x 70: blocks of 32 with remainders on both axes.
  const uint32_t K = 37, N = 70;
  std::vector<uint32_t> w(size_t(K) * N), t(w.size());
  std::vector<uint16_t> h(w.size()), th(w.size());
  for (size_t i = 0; i < w.size(); i++) {
    w[i] = static_cast<uint32_t>(i * 2654435761u);
    h[i] = static_cast<uint16_t>(i * 40503u);
  }
  model::gpu::transpose_kn(t.data(), w.data(), DType::F32, K, N);
  model::gpu::transpose_kn(th.data(), h.data(), DType::F16, K, N);
  size_t wrong = 0;
  for (uint32_t k = 0; k < K; k++)
    for (uint32_t n = 0; n < N; n++)
      wrong += size_t{t[size_t(n) * K + k] != w[size_t(k) * N + n]} +
               size_t{th[size_t(n) * K + k] != h[size_t(k) * N + n]};
  CHECK(wrong == 0);
}

namespace {

// The device's kernels with every cooperative-matrix call in 128 x 128 tiles (large) or in
// 64 x 64 ones, whatever its grid.
model::gpu::Ops coop_tiles(const vk::Device& device, const model::gpu::Ops& ops, bool large) {
  model::gpu::KernelPolicy policy = ops.policy();
  policy.tuning.coop_large_groups = large ? 1 : UINT32_MAX;
  return model::gpu::Ops(device.kernels(), policy);
}

// The cooperative-matrix kernels this device runs: the emulation everywhere (with 128-invocation
// workgroups), the matrix units where the device lists them.
std::vector<MatmulKernel> coop_kernels(const vk::Device& device) {
  std::vector<MatmulKernel> v = {MatmulKernel::CoopEmulated};
  if (device.caps().coop_matrix && device.caps().subgroup_size == 32)
    v.push_back(MatmulKernel::Coop);
  else
    MESSAGE("SKIPPED (matmul_coop on matrix units): device '" << device.caps().name
            << "' lists no 16x16x16 fp16 cooperative matrices with 32-lane subgroups");
  return v;
}

}  // namespace

// The cooperative-matrix tiling (matmul_coop.glsl), its fragment operations on the matrix units
// (Coop) or emulated (CoopEmulated: the same staging, prefetch and epilogue code on lavapipe).
// Tolerance: its inputs are x and W rounded to fp16, as a matrix unit's are: each product is off
// by at most 2 * 2^-11 of itself with round-to-nearest (a conversion's rounding mode is the
// driver's; truncation doubles that), so |gpu - ref| <= 2^-10 * mag and, with the sums' order,
// 3e-3 * mag.
TEST_CASE("matmul's cooperative-matrix tiling, on matrix units and emulated, GPT-2 shapes and ragged edges") {
  GPU_TEST(g);
  if (g.device.caps().max_workgroup_invocations < 128) {
    MESSAGE("SKIPPED: fewer than 128 invocations per workgroup");
    return;
  }
  // T = 1, 127, 128, 129, 130 against the 64- and 128-row tiles, each tile forced; K and N not
  // multiples of 16 or 64; K = 264 in whole 16-byte vectors but not whole 32-deep steps, K = 100
  // and 17 not in whole vectors (gathered by element); both dtypes; GPT-2 small's c_attn and mlp
  // c_proj at prefill (N cut to keep lavapipe's time down: the emulation is scalar). W [N, K],
  // the GPU set's layout, everywhere; [K, N] on the small shapes. The dtypes alternate by case
  // and tile, so each tile meets both and every epilogue: each combination is a pipeline, and
  // lavapipe compiling them was ~90% of this test's cold time.
  const Case cases[] = {{1, 768, 400, true},
                        {127, 768, 96, true, Activation::GeluTanh, Residual::Separate},
                        {128, 3072, 64, true, Activation::None, Residual::InPlace},
                        {129, 100, 67, true, Activation::GeluErf, Residual::Separate},
                        {130, 264, 136, true, Activation::Relu, Residual::Separate},
                        {33, 17, 5, false, Activation::Relu}};
  for (MatmulKernel kernel : coop_kernels(g.device))
    for (bool large : {false, true}) {
      const model::gpu::Ops ops = coop_tiles(g.device, g.kernels, large);
      unsigned seed = 4100;
      for (size_t n = 0; n < std::size(cases); n++)
        for (WeightLayout layout : {WeightLayout::NK, WeightLayout::KN}) {
          Case c = cases[n];
          if (layout == WeightLayout::KN && uint64_t{c.K} * c.N > 10000) continue;
          c.layout = layout;
          c.dtype = (n + large) % 2 ? DType::F32 : DType::F16;
          const DType dtype = c.dtype;
          Problem p = test::make_problem(c, seed += 10);
          const std::string what =
              test::describe(c, kernel) + (large ? ", 128 x 128" : ", 64 x 64");
          CAPTURE(what);
          std::set<std::string> shaders;
          const std::vector<float> got =
              run_gpu(g.device, ops, p, kernel, nullptr, nullptr, &shaders);
          // The tile asked for is the module that ran.
          const std::string module =
              std::string(kernel == MatmulKernel::Coop ? "matmul_coop" : "matmul_coop_emulated") +
              (large ? "_large" : "");
          if (g.device.caps().timestamps) CHECK(shaders == std::set<std::string>{module});
          std::vector<float> gn(got.size()), rn(got.size());
          for (size_t i = 0; i < got.size(); i++) {
            gn[i] = got[i] / p.mag[i];
            rn[i] = p.ref[i] / p.mag[i];
          }
          CHECK(test::close(what + ", values / mag", gn, rn, {3e-3, 0}));
          // Not within fp32's tolerance everywhere: the inputs really are rounded to fp16.
          if (dtype == DType::F32 && c.K >= 100) {
            double worst = 0;
            for (size_t i = 0; i < gn.size(); i++)
              worst = std::max(worst, std::fabs(double{gn[i]} - double{rn[i]}));
            CHECK(worst > kTol);
          }
        }
    }
}

TEST_CASE("matmul's cooperative-matrix tiling splits tensors past maxStorageBufferRange") {
  GPU_TEST(g);
  // 3 KiB: W [N, K] in chunks of N, W [K, N] in chunks of K summed into out, x in passes.
  test::LoweredGpu small(g, {.max_storage_buffer_range = 3072});
  for (MatmulKernel kernel : coop_kernels(small.device)) {
    unsigned seed = 4300;
    for (WeightLayout layout : {WeightLayout::NK, WeightLayout::KN}) {
      const Case c{37, 41, 71, true, Activation::GeluTanh, Residual::Separate, layout, DType::F16};
      Problem p = test::make_problem(c, seed += 10);
      vk::RecorderStats stats;
      const std::vector<float> got = run_gpu(small.device, small.kernels, p, kernel, &stats);
      std::vector<float> gn(got.size()), rn(got.size());
      for (size_t i = 0; i < got.size(); i++) {
        gn[i] = got[i] / p.mag[i];
        rn[i] = p.ref[i] / p.mag[i];
      }
      CHECK(test::close(test::describe(c, kernel), gn, rn, {3e-3, 0}));
      CHECK(stats.dispatches >= 4);
    }
  }
  test::LoweredGpu narrow(g, {.max_workgroup_invocations = 64});
  Problem p = test::make_problem({4, 32, 32}, 4400);
  CHECK_THROWS_WITH_AS(run_gpu(narrow.device, narrow.kernels, p, MatmulKernel::CoopEmulated),
                       doctest::Contains("workgroups of 128"), vk::Error);
  test::LoweredGpu none(g, {.no_coop_matrix = true});
  CHECK_THROWS_WITH_AS(run_gpu(none.device, none.kernels, p, MatmulKernel::Coop),
                       doctest::Contains("no cooperative matrices"), vk::Error);
}

TEST_CASE("the cooperative-matrix self-test passes, and Auto takes the matrix units where asked") {
  GPU_TEST(g);
  // The self-test's own comparison, through the emulation on any device.
  if (g.device.caps().max_workgroup_invocations >= 128)
    CHECK(model::gpu::check_coop_matrix(g.kernels, MatmulKernel::CoopEmulated) == "");
  // GPT2VK_COOP_MATRIX=on and off, as vk::DeviceOptions: a prompt's fp16 matmul takes
  // matmul_coop exactly where the device has matrix units and they are on, after the self-test
  // passed; fp32 weights never do.
  const bool has_units = g.device.caps().coop_matrix && g.device.caps().subgroup_size == 32;
  for (bool on : {true, false}) {
    CAPTURE(on);
    vk::DeviceOptions o;
    o.select = std::to_string(g.device.index());
    o.kernels = vk::KernelSet::Gpu;
    o.coop_matrix = on;
    vk::Device dev(g.instance, o);
    const bool units = on && has_units;
    const model::gpu::Ops kernels = model::gpu::checked_ops(dev);  // the units tested first
    CHECK(kernels.policy().coop_matrix == units);
    CHECK(kernels.note() == "");
    for (DType dtype : {DType::F16, DType::F32}) {
      CAPTURE(static_cast<int>(dtype));
      Problem p = test::make_problem({40, 96, 72, true, Activation::GeluTanh, Residual::Separate,
                                      WeightLayout::NK, dtype},
                                     4500);
      std::set<std::string> shaders;
      const std::vector<float> got =
          run_gpu(dev, kernels, p, MatmulKernel::Auto, nullptr, nullptr, &shaders);
      if (dev.caps().timestamps)
        CHECK(shaders.count("matmul_coop") == (units && dtype == DType::F16 ? 1u : 0u));
      else
        MESSAGE("SKIPPED (which kernel ran): device '" << dev.caps().name << "' has no timestamps");
      std::vector<float> gn(got.size()), rn(got.size());
      for (size_t i = 0; i < got.size(); i++) {
        gn[i] = got[i] / p.mag[i];
        rn[i] = p.ref[i] / p.mag[i];
      }
      CHECK(test::close("auto", gn, rn, {units && dtype == DType::F16 ? 3e-3 : kTol, 0}));
    }
  }
}

// A sum over K longer than llvmpipe runs in one invocation (vk::DeviceCaps::loop_iteration_cap:
// 65,535 loop iterations in all, 28 a k step of the tiled kernel): the head's input gradient in
// training, K = 50,257 logits, past the GEMV's 8 rows. W [K, N] splits K into chunks that sum
// into out; W [N, K] cannot, and says so where the cap binds. x and W all ones, so every output
// is exactly K, and random data at the tiled kernel's tolerance.
TEST_CASE("matmul's tiled kernels sum a K past the device's loop cap") {
  GPU_TEST(g);
  for (MatmulKernel kernel : {MatmulKernel::Tiled, MatmulKernel::CoopEmulated}) {
    if (kernel == MatmulKernel::CoopEmulated && g.device.caps().max_workgroup_invocations < 128)
      continue;
    Case c{9, 50257, 64};
    c.layout = WeightLayout::KN;
    c.dtype = kernel == MatmulKernel::Tiled ? DType::F32 : DType::F16;
    Problem ones = test::make_problem(c, 4500);
    std::fill(ones.x.begin(), ones.x.end(), 1.0f);
    std::fill(ones.w.begin(), ones.w.end(), 1.0f);
    ones = test::make_problem_from(ones);
    const std::string what = test::describe(c, kernel);
    const std::vector<float> got = run_gpu(g.device, g.kernels, ones, kernel);
    CHECK_MESSAGE(std::count(got.begin(), got.end(), 50257.0f) == long(got.size()), what);
    if (kernel == MatmulKernel::Tiled) {
      const Problem p = test::make_problem(c, 4501);
      CHECK(matches(p, run_gpu(g.device, g.kernels, p, kernel), what));
    }
  }
  if (g.device.caps().loop_iteration_cap != 0) {
    Case c{9, 50257, 64};
    c.layout = WeightLayout::NK;
    const Problem p = test::make_problem(c, 4502);
    CHECK_THROWS_WITH_AS(run_gpu(g.device, g.kernels, p, MatmulKernel::Tiled),
                         doctest::Contains("more loop iterations than device"), vk::Error);
  }
}
