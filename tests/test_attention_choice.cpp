// attention: which kernel runs on which device and shape (the policy's order, the limits of
// shared memory, workgroups and texel buffers), each checked against the CPU reference, and the
// arguments it refuses. The cases and the tolerance: tests/attention_case.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "model/ops/cpu/attention.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/choose.h"
#include "shaders/attention.h"
#include "tests/attention_case.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

using namespace test::attention;

TEST_CASE("attention on a device with little shared memory and small or odd workgroups") {
  GPU_TEST(g);
  {
    // 16 KiB, the least a Vulkan device has: the shaders' fixed-size shared arrays fit (the
    // portable kernel's 10 KiB, the texel kernel's 8 KiB merge), up to the largest head dim.
    test::LoweredGpu least(g, {.max_shared_memory = 16384});
    check_case(least.kernels, {3, 1000, 64, 2}, 500, "16 KiB shared");
    check_case(least.kernels, {1, 2100, 256, 1}, 510, "16 KiB shared, decode, D=256, 2 chunks");
    check_case(least.kernels, {40, 450, 8, 8, {false, 0}}, 520, "16 KiB shared, encoder");
  }
  {
    // 2 KiB, below that: a clear error from both kernels, not a kernel that overruns.
    test::LoweredGpu small(g, {.max_shared_memory = 2048});
    Case c{1, 4, 64, 1, {.kernel = model::gpu::AttentionKernel::Portable}};
    Inputs in = make_inputs(c, 530);
    CHECK_THROWS_WITH_AS(run_gpu(small.kernels, c, in), doctest::Contains("shared memory"),
                         vk::Error);
    if (texel_runs(small.device.caps(), c)) {
      c.options.kernel = model::gpu::AttentionKernel::Texel;
      CHECK_THROWS_WITH_AS(run_gpu(small.kernels, c, in), doctest::Contains("shared memory"),
                           vk::Error);
    }
  }
  {
    // The portable kernel keeps the query's head slice in a shared array of ATTENTION_MAX_D.
    Case wide{1, 4, 320, 1, {.kernel = model::gpu::AttentionKernel::Portable}};
    Inputs in = make_inputs(wide, 535);
    CHECK_THROWS_WITH_AS(run_gpu(g.kernels, wide, in),
                         doctest::Contains("head dim D=320 exceeds the portable kernel's 256"),
                         vk::Error);
  }
  {
    // 32-invocation workgroups: D = 80 and 128 exceed the workgroup (several dims per
    // invocation); D = 1 and 8 split it into many parts.
    test::LoweredGpu tiny(g, {.max_workgroup_invocations = 32});
    check_case(tiny.kernels, {9, 300, 160, 2}, 540, "32 invocations, D=80");
    check_case(tiny.kernels, {1, 200, 128, 1}, 550, "32 invocations, D=128");
    check_case(tiny.kernels, {12, 12, 5, 5}, 560, "32 invocations, D=1");
    check_case(tiny.kernels, {30, 130, 24, 3, {false, 0}}, 570, "32 invocations, D=8");
  }
  {
    // 100 invocations, not a power of two. D = 64 leaves 36 invocations idle in the weighted
    // sum, D = 8 makes 12 parts (4 idle), D = 160 takes two dims per invocation; chunks are 2000
    // keys, so L = 2100 takes two. (The softmax is exact for any m, so a wrong maximum would only
    // show as overflow; the odd-size tree itself is checked by the layernorm tests.)
    test::LoweredGpu odd(g, {.max_workgroup_invocations = 100});
    check_case(odd.kernels, {5, 300, 128, 2}, 580, "100 invocations, D=64");
    check_case(odd.kernels, {9, 9, 24, 3}, 590, "100 invocations, D=8");
    check_case(odd.kernels, {3, 40, 320, 2}, 600, "100 invocations, D=160");
    check_case(odd.kernels, {1, 2100, 64, 1}, 610, "100 invocations, 2 chunks");
  }
}
TEST_CASE("attention picks its kernel by device and shape") {
  GPU_TEST(g);
  const vk::DeviceCaps& caps = g.device.caps();
  if (!caps.timestamps) {
    MESSAGE("SKIPPED: no timestamps to name the dispatched shaders");
    return;
  }
  // The CPU kernel set takes the texel kernel where the head dim is whole texels, the GPU set
  // the tiled one for these 20 queries; a head dim of 5 only the portable one.
  std::string shader;
  const Case d16{20, 20, 64, 4}, d5{20, 20, 60, 12};
  CHECK(test::close(name("auto", d16), run_gpu(g.kernels, d16, make_inputs(d16, 950), &shader),
                    run_cpu(d16, make_inputs(d16, 950)), kTol));
  CHECK(shader == auto_shader(g.kernels, d16));
  CHECK(test::close(name("auto", d5), run_gpu(g.kernels, d5, make_inputs(d5, 960), &shader),
                    run_cpu(d5, make_inputs(d5, 960)), kTol));
  CHECK(shader == "attention");
  // Given scratch, the GPU set (forced here) decodes (T <= kAttentionSplitMaxT) with the split
  // kernel, and takes the tiled one for more queries: with its keys split and merged where its
  // blocks x heads are fewer than the tuning's 256 workgroups (9 queries: 1 block x 4 heads),
  // not where they are as many (1,024 queries: 64 x 4) or without scratch. A head dim the tiled
  // kernel cannot take (D = 5) goes to the portable one.
  test::LoweredGpu gpu_set(g, {}, vk::KernelSet::Gpu);
  if (!split_runs(caps, d16) || !tiled_runs(caps, d16)) {
    MESSAGE("SKIPPED: the GPU set's choices (the split or tiled kernel cannot run here)");
    return;
  }
  const uint32_t S = model::gpu::kAttentionSplitMaxT;
  struct Choice {
    Case c;
    bool scratch;
    const char* shader;
  };
  for (const Choice& x : {Choice{{1, 300, 64, 4}, true, "attention_split+attention_merge"},
                          Choice{{S, 300, 64, 4}, true, "attention_split+attention_merge"},
                          Choice{{S + 1, 300, 64, 4}, true, "attention_tiled+attention_merge"},
                          Choice{{S + 1, 300, 64, 4}, false, "attention_tiled"},
                          Choice{{1024, 1024, 64, 4}, true, "attention_tiled"},
                          Choice{{S, 300, 60, 12}, true, "attention"}}) {
    const Inputs in = make_inputs(x.c, 965);
    CHECK(test::close(name("auto", x.c), run_gpu(gpu_set.kernels, x.c, in, &shader, x.scratch),
                      run_cpu(x.c, in), kTol));
    CHECK(shader == x.shader);
  }
  CHECK(test::close(name("auto", d5),
                    run_gpu(gpu_set.kernels, d5, make_inputs(d5, 960), &shader, true),
                    run_cpu(d5, make_inputs(d5, 960)), kTol));
  CHECK(shader == "attention");
}

TEST_CASE("attention past maxTexelBufferElements: Auto falls back, Texel refuses") {
  GPU_TEST(g);
  if (!g.device.caps().storage_texel_buffers || !g.device.caps().timestamps) {
    MESSAGE("SKIPPED: no storage texel buffers or no timestamps");
    return;
  }
  // A cache of L rows of C = 64 is 16 L texels, q (T rows of 3C) 48 (T - 1) + 16: 4096 texels
  // hold L = 256 cache rows, or T = 86 query rows.
  test::LoweredGpu small(g, {.max_texel_buffer_elements = 4096});
  struct Limit {
    Case c;
    bool fits;
  };
  const Limit limits[] = {{{1, 256, 64, 2}, true},
                          {{1, 257, 64, 2}, false},
                          {{86, 90, 64, 2}, true},
                          {{87, 90, 64, 2}, false},
                          {{40, 300, 64, 1, {false, 0}}, false}};
  unsigned seed = 970;
  for (const Limit& l : limits) {
    Inputs in = make_inputs(l.c, seed += 10);
    const std::vector<float> ref = run_cpu(l.c, in);
    std::string shader;
    CHECK(test::close(name("auto", l.c), run_gpu(small.kernels, l.c, in, &shader), ref, kTol));
    CHECK(shader == auto_shader(small.kernels, l.c, l.fits));
    Case forced = l.c;
    forced.options.kernel = model::gpu::AttentionKernel::Texel;
    if (l.fits)
      CHECK(test::close(name("forced", forced), run_gpu(small.kernels, forced, in), ref, kTol));
    else
      CHECK_THROWS_WITH_AS(run_gpu(small.kernels, forced, in),
                           doctest::Contains("over maxTexelBufferElements 4096"), vk::Error);
  }
}

TEST_CASE("attention rejects bad arguments") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 64 * 1024, vk::MemoryKind::Device, "test attention errors");
  vk::BufferSpan out = arena.alloc(4 * 64 * 4), q = arena.alloc(4 * 192 * 4),
                 k = arena.alloc(8 * 64 * 4), v = arena.alloc(8 * 64 * 4);
  vk::Recorder rec(g.device);
  rec.begin();
  // A call that runs; each bad one below is it with a field or two changed.
  const model::gpu::AttentionArgs fine{.out = out,
                                       .q = q,
                                       .k_cache = k,
                                       .v_cache = v,
                                       .q_stride = 192,
                                       .T = 4,
                                       .L = 8,
                                       .C = 64,
                                       .H = 4};
  const auto with = [&](auto change) {
    model::gpu::AttentionArgs a = fine;
    change(a);
    return a;
  };
  const auto attention = [&](const model::gpu::AttentionArgs& a) {
    model::gpu::attention(g.kernels, rec, a);
  };
  CHECK_THROWS_WITH_AS(attention(with([](auto& a) { a.H = 5; })),
                       doctest::Contains("not a multiple of H"), vk::Error);
  CHECK_THROWS_WITH_AS(attention(with([](auto& a) { a.L = 9; })),
                       doctest::Contains("k_cache holds only 8 rows"), vk::Error);
  CHECK_THROWS_WITH_AS(attention(with([&](auto& a) {
                         a.v_cache = v.sub(0, 4 * 64 * 4);
                         a.T = 1;
                         a.L = 5;
                       })),
                       doctest::Contains("v_cache holds only 4 rows"), vk::Error);
  CHECK_THROWS_WITH_AS(attention(with([](auto& a) { a.L = 3; })), doctest::Contains("T=4 > L=3"),
                       vk::Error);
  CHECK_THROWS_WITH_AS(attention(with([](auto& a) { a.q_stride = 32; })),
                       doctest::Contains("q_stride"), vk::Error);
  CHECK_THROWS_AS(attention(with([](auto& a) { a.q_stride = 256; })), vk::Error);
  CHECK_THROWS_AS(attention(with([](auto& a) { a.T = 0; })), vk::Error);
  CHECK_THROWS_AS(attention(with([](auto& a) { a.H = 0; })), vk::Error);
  attention(fine);  // the same buffers are fine
  // D = 10 (C = 60, H = 6) for one query: not whole texels.
  const auto d10 = [](auto& a) {
    a.q_stride = 180;
    a.T = 1;
    a.C = 60;
    a.H = 6;
  };

  // The split kernel, asked for without scratch, with too little, or for a head dim it cannot
  // take.
  model::gpu::AttentionOptions split{.kernel = model::gpu::AttentionKernel::Split};
  const auto with_split = [&](auto change) {
    return with([&](auto& a) {
      a.options = split;
      change(a);
    });
  };
  const auto as_is = [](auto&) {};
  CHECK_THROWS_WITH_AS(attention(with_split(as_is)), doctest::Contains("no scratch"), vk::Error);
  vk::BufferSpan part = arena.alloc(64);
  split.scratch = &part;
  CHECK_THROWS_WITH_AS(attention(with_split(as_is)),
                       doctest::Contains("the scratch holds 64 bytes, needs"), vk::Error);
  CHECK_THROWS_WITH_AS(attention(with_split(d10)), doctest::Contains("D=10 is not a multiple of 4"),
                       vk::Error);

  // The tiled kernel, asked for where it cannot run: D = 10, the tap, q not on 16 bytes,
  // q_stride not whole texels, a device whose workgroups hold fewer than 128 invocations, and
  // one with less shared memory than its arrays.
  model::gpu::AttentionOptions tiled{.kernel = model::gpu::AttentionKernel::Tiled};
  const auto with_tiled = [&](auto change) {
    return with([&](auto& a) {
      a.options = tiled;
      change(a);
    });
  };
  attention(with_tiled(as_is));  // it can here
  CHECK_THROWS_WITH_AS(attention(with_tiled(d10)), doctest::Contains("tiled kernel cannot run"),
                       vk::Error);
  CHECK_THROWS_WITH_AS(attention(with_tiled([&](auto& a) { a.q = q.sub(4, q.size - 4); })),
                       doctest::Contains("does not start on 16 bytes"), vk::Error);
  vk::BufferSpan weights = arena.alloc(4 * 4 * 8 * 4);
  tiled.probs = &weights;
  CHECK_THROWS_WITH_AS(attention(with_tiled(as_is)), doctest::Contains("the attention tap"),
                       vk::Error);
  tiled.probs = nullptr;
  CHECK_THROWS_WITH_AS(attention(with_tiled([](auto& a) { a.q_stride = 190; })),
                       doctest::Contains("q_stride=190 is not a multiple of 4"), vk::Error);
  for (const vk::LimitOverrides& limits : {vk::LimitOverrides{.max_workgroup_invocations = 64},
                                           vk::LimitOverrides{.max_shared_memory = 8192}}) {
    test::LoweredGpu small(g, limits);
    vk::Recorder small_rec(small.device);
    small_rec.begin();
    CHECK_THROWS_WITH_AS(
        model::gpu::attention(small.kernels, small_rec, with_tiled(as_is)),
        doctest::Contains(limits.max_shared_memory ? "bytes of shared memory exceed"
                                                   : "workgroups of 128 invocations"),
        vk::Error);
    small_rec.end();
  }

  // The texel kernel, asked for where it cannot run: D = 5 and D = 260 (not whole texels, too
  // many registers), q_stride not whole texels, q not at a texel-aligned offset.
  if (g.device.caps().storage_texel_buffers) {
    const model::gpu::AttentionOptions texel{.kernel = model::gpu::AttentionKernel::Texel};
    const auto with_texel = [&](auto change) {
      return with([&](auto& a) {
        a.options = texel;
        change(a);
      });
    };
    vk::BufferSpan wide = arena.alloc(3 * 260 * 4);
    CHECK_THROWS_WITH_AS(attention(with_texel([](auto& a) {
                           a.q_stride = 180;
                           a.C = 60;
                           a.H = 12;
                         })),
                         doctest::Contains("texel kernel cannot run"), vk::Error);
    CHECK_THROWS_WITH_AS(attention({.out = wide,
                                    .q = wide,
                                    .k_cache = wide,
                                    .v_cache = wide,
                                    .q_stride = 260,
                                    .T = 1,
                                    .L = 1,
                                    .C = 260,
                                    .H = 1,
                                    .options = texel}),
                         doctest::Contains("D=260 is not a multiple of 4 up to 256"), vk::Error);
    CHECK_THROWS_WITH_AS(attention(with_texel([](auto& a) { a.q_stride = 190; })),
                         doctest::Contains("q_stride=190 is not a multiple of 4"), vk::Error);
    CHECK_THROWS_WITH_AS(attention(with_texel([&](auto& a) { a.q = q.sub(4, q.size - 4); })),
                         doctest::Contains("minTexelBufferOffsetAlignment"), vk::Error);
  }
  rec.end();
}
