// attention: GPU against the CPU reference (double accumulation, exact exp, rounded once), for
// every kernel: the portable one (storage buffers) everywhere, the split (decode) and tiled
// (prompts) ones, and the texel one (storage texel buffers, what CPU devices take) wherever the
// device and the shape allow it. The tolerance and its reasons: tests/attention_case.h. Which
// kernel runs where, and the limits: tests/test_attention_choice.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "model/ops/cpu/attention.h"
#include "model/ops/cpu/common.h"
#include "model/ops/cpu/kv_store.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/kv_store.h"
#include "shaders/attention.h"
#include "tests/attention_case.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

using namespace test::attention;

namespace {

// The attention tap: the probabilities [H, T, L] the GPU kernel writes beside out, and the CPU
// reference's; each also checks its out against the reference.
void check_probs(const model::gpu::Ops& kernels, Case c, unsigned seed, const char* what) {
  const Inputs in = make_inputs(c, seed);
  const size_t n_probs = size_t{c.H} * c.T * c.L;
  std::vector<float> ref_out(size_t{c.T} * c.C), ref(n_probs);
  model::cpu::attention(ref_out.data(), in.qkv.data(), 3 * size_t{c.C}, in.k_cache.data(),
                        in.v_cache.data(), c.T, c.L, c.C, c.H, c.options, ref.data());
  // The reference itself: every row sums to 1 over the keys its query sees, 0 past them.
  for (size_t h = 0; h < c.H; h++)
    for (size_t t = 0; t < c.T; t++) {
      const size_t n = c.options.causal ? c.L - c.T + t + 1 : c.L;
      double sum = 0;
      for (size_t j = 0; j < c.L; j++) {
        const float w = ref[(h * c.T + t) * c.L + j];
        if (j >= n) REQUIRE(w == 0.0f);
        sum += double{w};
      }
      REQUIRE(std::fabs(sum - 1) < 1e-6);
    }
  for (auto kernel : {model::gpu::AttentionKernel::Portable, model::gpu::AttentionKernel::Texel}) {
    c.options.kernel = kernel;
    if (kernel == model::gpu::AttentionKernel::Texel && !texel_runs(kernels.device().caps(), c))
      continue;
    std::string shader;
    std::vector<float> probs;
    const std::vector<float> out = run_gpu(kernels, c, in, &shader, false, &probs);
    CHECK(shader == (kernel == model::gpu::AttentionKernel::Texel ? "attention_texel_probs"
                                                                  : "attention_probs"));
    CHECK(test::close(name(what, c) + " out", out, ref_out, kTol));
    CHECK(test::close(name(what, c) + " probs", probs, ref, kTol));
  }
}

}  // namespace

TEST_CASE("attention tap: the softmax weights match the CPU reference") {
  GPU_TEST(g);
  // Prefill (the texel kernel's queries per invocation, a partial last block), decode (the
  // texel kernel splits one query's keys over a workgroup), bidirectional, a caller's scale, one
  // head, and two chunks of the portable kernel's online softmax.
  check_probs(g.kernels, {23, 23, 48, 4}, 900, "prefill");
  check_probs(g.kernels, {1, 40, 64, 2}, 910, "decode");
  check_probs(g.kernels, {5, 20, 40, 5, {false, 0}}, 920, "encoder, T < L");
  check_probs(g.kernels, {9, 9, 32, 1, {true, 2.5f}}, 930, "one head, scale 2.5");
  check_probs(g.kernels, {3, 2100, 16, 1}, 940, "2 chunks");
}

TEST_CASE("attention prefill matches the CPU reference") {
  GPU_TEST(g);
  // T = L. Head dims D = 1, 8, 12 (3 texels), 16, 32, 64, 80 (does not divide the workgroup:
  // idle invocations), 128, 256 (the texel kernel's largest); one head, GPT-2 small's 12 and XL's
  // 25 heads, and T = L = 1024 with a small C. The texel kernel splits the keys of fewer than 16
  // queries over a workgroup (T = 1, 5, 7, 15) and gives each invocation 4 queries from 16 on,
  // whole (16, 20, 64, 1024) or not (33, 37: a last invocation with 1 query, the rest idle).
  const Case cases[] = {{1, 1, 8, 1},        {7, 7, 4, 4},     {7, 7, 24, 3},    {64, 64, 64, 4},
                        {33, 33, 80, 1},     {20, 20, 256, 2}, {7, 7, 1600, 25}, {5, 5, 768, 12},
                        {1024, 1024, 64, 2}, {37, 37, 36, 3},  {15, 15, 96, 2},  {16, 16, 256, 1}};
  unsigned seed = 100;
  for (const Case& c : cases) check_case(g.kernels, c, seed += 10, "prefill");
}

TEST_CASE("attention decode (T = 1) matches the CPU reference") {
  GPU_TEST(g);
  unsigned seed = 200;
  for (uint32_t L : {1u, 5u, 1000u}) check_case(g.kernels, {1, L, 1600, 25}, seed += 10, "decode");
  check_case(g.kernels, {1, 77, 64, 1}, seed += 10, "decode");
}

TEST_CASE("attention's split kernel at decode shapes: GPT-2 small, medium, XL, both masks") {
  GPU_TEST(g);
  if (!split_runs(g.device.caps(), {1, 1, 64, 1})) {
    MESSAGE("SKIPPED: 64-invocation workgroups or 9.5 KiB of shared memory unavailable");
    return;
  }
  // L across the 64-key blocks (1, 127, 128, 129, 1024); T = 1 .. 8 decode and verification
  // steps, whose causal queries end in different blocks. D = 64 (GPT-2's heads) takes 16 lanes
  // per key, D = 4 one, D = 256 all 64 in a batch of 31 keys and 4 dims per lane.
  struct Shape {
    uint32_t C, H;
  };
  unsigned seed = 3000;
  for (const Shape s : {Shape{768, 12}, Shape{1024, 16}, Shape{1600, 25}})
    for (uint32_t L : {1u, 127u, 128u, 129u, 1024u})
      for (uint32_t T : {1u, 3u, 8u}) {
        if (T > L) continue;
        for (bool causal : {true, false}) {
          Case c{T, L, s.C, s.H, {.kernel = model::gpu::AttentionKernel::Split}};
          c.options.causal = causal;
          if (s.C != 768 && (L != 129 || !causal)) continue;  // fewer pipelines and cases
          const Inputs in = make_inputs(c, seed += 10);
          CHECK(test::close(name("split", c), run_gpu(g.kernels, c, in), run_cpu(c, in), kTol));
        }
      }
  for (const Case& c : {Case{2, 300, 8, 2}, Case{5, 200, 512, 2}, Case{8, 129, 144, 3}}) {
    Case s = c;
    s.options.kernel = model::gpu::AttentionKernel::Split;
    const Inputs in = make_inputs(s, seed += 10);
    CHECK(test::close(name("split", s), run_gpu(g.kernels, s, in), run_cpu(s, in), kTol));
  }
}

TEST_CASE("attention's tiled kernel at prompt shapes: GPT-2 small, medium, XL, both masks") {
  GPU_TEST(g);
  if (!tiled_runs(g.device.caps(), {1, 1, 64, 1})) {
    MESSAGE("SKIPPED: 128-invocation workgroups or 11 KiB of shared memory unavailable");
    return;
  }
  // T and L across the 16-query blocks and the 32-key tiles (1, 127, 128, 129, 1024): blocks
  // that end part-way, causal blocks whose queries stop in different tiles, tiles cut short at
  // L. GPT-2's D = 64 at every size; small's 12 heads everywhere, medium's 16 and XL's 25 at
  // fewer shapes (the pipelines and the CPU reference's time).
  struct Shape {
    uint32_t C, H;
  };
  unsigned seed = 5000;
  const uint32_t sizes[] = {1, 127, 128, 129, 1024};
  for (const Shape s : {Shape{768, 12}, Shape{1024, 16}, Shape{1600, 25}})
    for (uint32_t L : sizes)
      for (uint32_t T : sizes) {
        if (T > L) continue;
        for (bool causal : {true, false}) {
          if (s.C != 768 && (L != 129 || T == 1 || !causal)) continue;
          if (T == 1024 && !causal) continue;  // the largest case once
          Case c{T, L, s.C, s.H, {.kernel = model::gpu::AttentionKernel::Tiled}};
          c.options.causal = causal;
          const Inputs in = make_inputs(c, seed += 10);
          CHECK(test::close(name("tiled", c), run_gpu(g.kernels, c, in), run_cpu(c, in), kTol));
        }
      }
  // Head dims other than GPT-2's: D = 4 (one texel: lanes past it idle), 12, 96 and 128 (16-key
  // tiles, 4 texels per lane), with a caller's scale.
  for (const Case& c : {Case{40, 40, 8, 2}, Case{33, 70, 36, 3, {false, 0}},
                        Case{50, 50, 192, 2}, Case{17, 300, 256, 2, {true, 0.3f}}}) {
    Case t = c;
    t.options.kernel = model::gpu::AttentionKernel::Tiled;
    const Inputs in = make_inputs(t, seed += 10);
    CHECK(test::close(name("tiled", t), run_gpu(g.kernels, t, in), run_cpu(t, in), kTol));
  }
}

TEST_CASE("attention's tiled kernel splits the keys of few query blocks into merged ranges") {
  GPU_TEST(g);
  if (!tiled_runs(g.device.caps(), {1, 1, 64, 1}) || !g.device.caps().timestamps) {
    MESSAGE("SKIPPED: the tiled kernel cannot run, or no timestamps to name the dispatches");
    return;
  }
  // Given scratch, fewer than 256 blocks x heads split the keys into ranges of whole tiles:
  // GPT-2 small's 12 heads at T = 9 .. 129 (1 to 9 blocks) over L = 129 or 1,024 keys. Each
  // block cuts its own keys into the ranges, so a causal block of early queries with fewer tiles
  // than ranges leaves the last empty (T = L = 129: 3 ranges, block 0 has 16 keys, one tile);
  // D = 128 takes 16-key tiles.
  unsigned seed = 5500;
  for (const uint32_t L : {129u, 1024u})
    for (const uint32_t T : {9u, 16u, 17u, 40u, 129u})
      for (const bool causal : {true, false}) {
        if (T > L) continue;
        Case c{T, L, 768, 12, {.kernel = model::gpu::AttentionKernel::Tiled}};
        c.options.causal = causal;
        const Inputs in = make_inputs(c, seed += 10);
        std::string shader;
        CHECK(test::close(name("tiled, split keys", c), run_gpu(g.kernels, c, in, &shader, true),
                          run_cpu(c, in), kTol));
        CHECK(shader == "attention_tiled+attention_merge");
      }
  for (const Case& c : {Case{20, 500, 256, 2}, Case{33, 90, 36, 3, {false, 0}}}) {
    Case t = c;
    t.options.kernel = model::gpu::AttentionKernel::Tiled;
    const Inputs in = make_inputs(t, seed += 10);
    std::string shader;
    CHECK(test::close(name("tiled, split keys", t), run_gpu(g.kernels, t, in, &shader, true),
                      run_cpu(t, in), kTol));
    CHECK(shader == "attention_tiled+attention_merge");
  }
}

TEST_CASE("attention reads its position at run time, as the model's passes do") {
  GPU_TEST(g);
  // The model binds its caches whole and passes the position in a buffer (AttentionOptions::
  // step, holding L - T), so rows past L are bound but must never be read: they hold NaN here.
  // Every kernel that reads it, fp32 and fp16 caches; the tiled one with and without its key
  // ranges; the split one for decoding's few queries.
  using model::gpu::AttentionKernel;
  const uint32_t C = 128, H = 2, n_ctx = 400;
  struct Run {
    AttentionKernel kernel;
    uint32_t T, L;
    bool scratch;
  };
  unsigned seed = 5700;
  for (const model::DType cache : {model::DType::F32, model::DType::F16})
    for (const Run r : {Run{AttentionKernel::Portable, 40, 300, false},
                        Run{AttentionKernel::Tiled, 40, 300, false},
                        Run{AttentionKernel::Tiled, 40, 300, true},
                        Run{AttentionKernel::Tiled, 17, 300, true},
                        Run{AttentionKernel::Split, 3, 200, true}}) {
      const bool f16 = cache == model::DType::F16;
      Case c{r.T, r.L, C, H, {.kernel = r.kernel}};
      c.options.cache = cache;
      if (r.kernel == AttentionKernel::Tiled && !tiled_runs(g.device.caps(), c)) continue;
      if (r.kernel == AttentionKernel::Split && !split_runs(g.device.caps(), c)) continue;
      Inputs in = make_inputs(c, seed += 10);
      if (f16)  // the values as the fp16 cache holds them
        for (std::vector<float>* v : {&in.k_cache, &in.v_cache})
          for (float& x : *v) x = model::cpu::round_to_half(x);
      const std::vector<float> ref = run_cpu(c, in);
      std::vector<float> k = in.k_cache, v = in.v_cache;
      k.resize(size_t{n_ctx} * C, std::numeric_limits<float>::quiet_NaN());
      v.resize(size_t{n_ctx} * C, std::numeric_limits<float>::quiet_NaN());
      const vk::Device& device = g.device;
      vk::Arena arena(device, (in.qkv.size() + 2 * k.size() + size_t{r.T} * C) * 4 + (4 << 20),
                      vk::MemoryKind::Device, "test attention step");
      const vk::BufferSpan qkv = test::to_gpu(device, arena, in.qkv),
                           kc = test::to_gpu(device, arena, k, cache),
                           vc = test::to_gpu(device, arena, v, cache);
      const vk::BufferSpan out = arena.alloc(size_t{r.T} * C * sizeof(float));
      const vk::BufferSpan step = arena.alloc(16);
      const uint32_t pos = r.L - r.T;
      vk::upload(device, step, &pos, sizeof(pos));
      vk::BufferSpan scratch;
      model::gpu::AttentionOptions o = c.options;
      o.step = &step;
      if (r.scratch) {
        scratch = arena.alloc(model::gpu::attention_split_scratch_bytes(r.T, r.L, C, H));
        o.scratch = &scratch;
      }
      vk::Recorder rec(device);
      rec.begin();
      model::gpu::attention(g.kernels, rec,
                            {.out = out,
                             .q = qkv,
                             .k_cache = kc,
                             .v_cache = vc,
                             .q_stride = 3 * C,
                             .T = r.T,
                             .L = r.L,
                             .C = C,
                             .H = H,
                             .options = o});
      rec.run();
      CHECK(test::close(name("position at run time", c) + (f16 ? " fp16" : "") +
                            (r.scratch ? " with scratch" : ""),
                        test::from_gpu(device, out, size_t{r.T} * C), ref, kTol));
    }
}

TEST_CASE("attention bidirectional and a caller's scale") {
  GPU_TEST(g);
  model::gpu::AttentionOptions bidir{false, 0};
  check_case(g.kernels, {50, 50, 96, 3, bidir}, 300, "encoder");
  check_case(g.kernels, {5, 20, 40, 5, bidir}, 310, "encoder, T < L");
  check_case(g.kernels, {1, 9, 8, 2, bidir}, 320, "encoder, T = 1");
  // An attention-only textbook model scales by something other than 1/sqrt(D).
  check_case(g.kernels, {17, 17, 48, 2, {true, 0.37f}}, 330, "scale 0.37");
  check_case(g.kernels, {6, 11, 48, 2, {false, 2.5f}}, 340, "scale 2.5");
}

TEST_CASE("attention with more keys than one chunk takes the online-softmax path") {
  GPU_TEST(g);
  // The default chunk is at most 2048 keys, so L = 3000 needs two, with rescaling between them.
  check_case(g.kernels, {1, 3000, 64, 2}, 400, "decode, 2 chunks");
  check_case(g.kernels, {4, 2500, 32, 1}, 410, "chunked prefill, 2 chunks");
  check_case(g.kernels, {3, 2100, 16, 1, {false, 0}}, 420, "encoder, 2 chunks");
  check_case(g.kernels, {40, 2100, 32, 1}, 430, "chunked prefill, 2 chunks, 4 queries each");
}
TEST_CASE("attention: the last row of a prefill equals a decode step at that position") {
  GPU_TEST(g);
  for (model::gpu::AttentionKernel kernel :
       {model::gpu::AttentionKernel::Portable, model::gpu::AttentionKernel::Texel}) {
    Case prefill{40, 40, 96, 3, {.kernel = kernel}}, decode{1, 40, 96, 3, {.kernel = kernel}};
    if (!texel_runs(g.device.caps(), prefill) && kernel == model::gpu::AttentionKernel::Texel) continue;
    Inputs in = make_inputs(prefill, 600);
    std::vector<float> rows = run_gpu(g.kernels, prefill, in);
    Inputs last = in;  // the same cache; the decode query is the prefill's last query row
    last.qkv.assign(in.qkv.end() - 3 * 96, in.qkv.end());
    std::vector<float> step = run_gpu(g.kernels, decode, last);
    std::vector<float> last_row(rows.end() - 96, rows.end());
    CHECK(test::close(name("prefill", prefill), rows, run_cpu(prefill, in), kTol));
    CHECK(test::close(name("decode", decode), step, run_cpu(decode, last), kTol));
    // Portable: exact, the same workgroup does the same arithmetic for the same query position.
    // Texel: decode splits the keys over a workgroup, prefill does not, so the sums run in
    // another order.
    const bool exact = kernel == model::gpu::AttentionKernel::Portable;
    CHECK(test::close(name("prefill's last row vs decode", decode), last_row, step,
                      exact ? test::Tolerance{0, 0} : kTol));
  }
}

TEST_CASE("attention of a chunked prefill through the KV cache") {
  GPU_TEST(g);
  // 10 tokens prefilled, then 3 more appended: kv_store writes their K and V at rows 10..12 and
  // the 3 queries (positions 10..12, read from qkv with stride 3C) attend 11, 12 and 13 keys.
  const uint32_t C = 48, H = 4, n_ctx = 16, T0 = 10, T1 = 3;
  std::vector<float> qkv0 = test::random_floats(T0 * 3 * C, 700),
                     qkv1 = test::random_floats(T1 * 3 * C, 701);
  std::vector<float> k_ref(n_ctx * C, 0.0f), v_ref(n_ctx * C, 0.0f);
  vk::Arena arena(g.device, 64 * 1024, vk::MemoryKind::Device, "test chunked prefill");
  vk::BufferSpan g0 = test::to_gpu(g, arena, qkv0), g1 = test::to_gpu(g, arena, qkv1);
  vk::BufferSpan k = test::to_gpu(g, arena, k_ref), v = test::to_gpu(g, arena, v_ref);
  vk::BufferSpan out = arena.alloc(T1 * C * sizeof(float));
  vk::Recorder rec(g.device);
  rec.begin();
  model::gpu::kv_store(g.kernels, rec,
                       {.k_cache = k, .v_cache = v, .qkv = g0, .T = T0, .C = C, .pos = 0});
  model::gpu::kv_store(g.kernels, rec,
                       {.k_cache = k, .v_cache = v, .qkv = g1, .T = T1, .C = C, .pos = T0});
  model::gpu::attention(g.kernels, rec,
                        {.out = out,
                         .q = g1,
                         .k_cache = k,
                         .v_cache = v,
                         .q_stride = 3 * C,
                         .T = T1,
                         .L = T0 + T1,
                         .C = C,
                         .H = H});
  rec.run();

  model::cpu::kv_store(k_ref.data(), v_ref.data(), qkv0.data(), T0, C, 0);
  model::cpu::kv_store(k_ref.data(), v_ref.data(), qkv1.data(), T1, C, T0);
  std::vector<float> ref(T1 * C);
  model::cpu::attention(ref.data(), qkv1.data(), 3 * C, k_ref.data(), v_ref.data(), T1, T0 + T1, C, H);
  CHECK(test::close("chunked prefill", test::from_gpu(g, out, T1 * C), ref, kTol));
}

TEST_CASE("attention: large scores do not overflow, masked keys are never read") {
  GPU_TEST(g);
  // q, k uniform in [-30, 30), scale 1: |q.k| reaches thousands. Without the max subtraction
  // exp() overflows to inf and the output is NaN.
  check_case(g.kernels, {20, 20, 64, 1, {true, 1.0f}}, 800, "large scores", -30, 30);

  // A NaN in key and value row P: only the queries at P and later may see it; exp(-1e9)-style
  // masking would turn it into NaN * 0 = NaN for every row. T = 8: the texel kernel splits each
  // query's keys; T = 20: its invocation with queries 16..19 reads row 17 for the later ones, and
  // query 16 must still not see it.
  for (const uint32_t T : {8u, 20u})
    for (model::gpu::AttentionKernel kernel :
         {model::gpu::AttentionKernel::Portable, model::gpu::AttentionKernel::Texel,
          model::gpu::AttentionKernel::Split, model::gpu::AttentionKernel::Tiled}) {
      const Case c{T, T, 32, 2, {.kernel = kernel}};
      if (kernel == model::gpu::AttentionKernel::Texel && !texel_runs(g.device.caps(), c)) continue;
      if (kernel == model::gpu::AttentionKernel::Split && !split_runs(g.device.caps(), c)) continue;
      if (kernel == model::gpu::AttentionKernel::Tiled && !tiled_runs(g.device.caps(), c)) continue;
      const uint32_t P = T - 3;
      Inputs poisoned = make_inputs(c, 810);
      for (uint32_t d = 0; d < c.C; d++)
        poisoned.k_cache[P * c.C + d] = poisoned.v_cache[P * c.C + d] =
            std::numeric_limits<float>::quiet_NaN();
      std::vector<float> got = run_gpu(g.kernels, c, poisoned), ref = run_cpu(c, poisoned);
      const size_t seen = size_t{P} * c.C;  // rows 0 .. P-1
      CHECK(test::close(name("rows before the NaN key", c), std::span(got).first(seen),
                        std::span(ref).first(seen), kTol));
      CHECK(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(seen), got.end(),
                        [](float x) { return std::isnan(x); }));
    }
}

TEST_CASE("attention with more queries than maxComputeWorkGroupCount[0]") {
  GPU_TEST(g);
  // Queries fold into z past the limit. Bidirectional with L = 2 keeps it cheap.
  const uint32_t limit = test::group_count_limit_x(g, 1u << 20);
  if (limit == 0) return;
  const uint32_t T = limit + 100;
  // 32-invocation workgroups: lavapipe takes ~5 s for 65k workgroups of 256, ~0.4 s for these.
  test::LoweredGpu small(g, {.max_workgroup_invocations = 32});
  check_case(small.kernels, {T, 2, 2, 1, {false, 0}}, 900, "folded");
}
