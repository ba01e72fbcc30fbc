// The split kernel with its merge fused in (AttentionOptions::counts, AttentionPush.merge): one
// dispatch instead of attention_split then attention_merge, the last workgroup of each (query,
// head) merging the key blocks. Which workgroup is last varies from run to run; what it computes
// does not, so the results must be the two dispatches' bits exactly, on every run, and the
// counts must come back to zero so that the next dispatch (the next layer, the next token's
// replay) starts from them. Tolerance against the CPU reference: tests/attention_case.h's.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model/forward/gpu_model.h"
#include "model/ops/gpu/attention.h"
#include "tests/attention_case.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"

using namespace test::attention;

namespace {

struct Runs {
  std::vector<std::vector<float>> outs;  // one per call recorded
  std::string shaders;                   // the first call's dispatches, '+'-joined
  std::vector<uint32_t> counts;          // the counts after the recording's submissions
};

// The case `calls` times in one recording (each into an out of its own), submitted `submits`
// times; with `count_rows` > 0 the counts cover that many queries (fused where they cover T).
Runs run(const model::gpu::Ops& kernels, const Case& c, const Inputs& in, uint32_t count_rows,
         uint32_t calls, uint32_t submits) {
  const vk::Device& device = kernels.device();
  const uint64_t scratch_bytes = model::gpu::attention_split_scratch_bytes(c.T, c.L, c.C, c.H);
  const size_t out_floats = size_t{c.T} * c.C, n_counts = size_t{count_rows} * c.H;
  const size_t bytes = (in.qkv.size() + in.k_cache.size() * 2 + out_floats * calls) * 4;
  vk::Arena arena(device, bytes + scratch_bytes + n_counts * 4 + 8192, vk::MemoryKind::Device,
                  "test attention merge");
  const vk::BufferSpan qkv = test::to_gpu(device, arena, in.qkv),
                       k = test::to_gpu(device, arena, in.k_cache),
                       v = test::to_gpu(device, arena, in.v_cache);
  const vk::BufferSpan part = arena.alloc(scratch_bytes);
  vk::BufferSpan counts;
  model::gpu::AttentionOptions options = c.options;
  options.kernel = model::gpu::AttentionKernel::Split;
  options.scratch = &part;
  if (n_counts) {
    counts = test::to_gpu(device, arena, std::vector<float>(n_counts, 0.0f));  // zero bits
    options.counts = &counts;
  }
  std::vector<vk::BufferSpan> outs;
  for (uint32_t i = 0; i < calls; i++) outs.push_back(arena.alloc(out_floats * 4));
  vk::Recorder rec(device, true);
  rec.begin();
  for (const vk::BufferSpan& out : outs) record(kernels, rec, c, out, qkv, k, v, options);
  rec.run();
  Runs r;
  const std::vector<vk::DispatchTime> t = rec.timings();
  const size_t per_call = t.size() / calls;
  for (size_t i = 0; i < per_call; i++) r.shaders += (i ? "+" : "") + t[i].shader;
  for (uint32_t s = 1; s < submits; s++) {
    rec.submit();
    rec.wait();
  }
  for (const vk::BufferSpan& out : outs) r.outs.push_back(test::from_gpu(device, out, out_floats));
  if (n_counts)
    for (float f : test::from_gpu(device, counts, n_counts))
      r.counts.push_back(std::bit_cast<uint32_t>(f));
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("attention's split kernel with the merge fused: the two dispatches' bits, every run") {
  GPU_TEST(g);
  if (!split_runs(g.device.caps(), {1, 1, 64, 1})) {
    MESSAGE("SKIPPED: 64-invocation workgroups or 9.5 KiB of shared memory unavailable");
    return;
  }
  // GPT-2 small's heads over L within one block, across the first boundary and up to its
  // context (16 blocks); T = 1 (decoding) and 8 (the most Auto gives Split); XL's 25 heads; the
  // largest head dim (256, 4 dims per lane); both masks.
  struct Shape {
    uint32_t T, L, C, H;
    bool causal;
  };
  unsigned seed = 7000;
  for (const Shape s :
       {Shape{1, 1, 768, 12, true}, Shape{1, 64, 768, 12, true}, Shape{1, 65, 768, 12, true},
        Shape{1, 300, 768, 12, true}, Shape{1, 1024, 768, 12, true}, Shape{8, 1024, 768, 12, true},
        Shape{8, 129, 768, 12, false}, Shape{1, 129, 1600, 25, true},
        Shape{5, 200, 512, 2, true}}) {
    Case c{s.T, s.L, s.C, s.H};
    c.options.causal = s.causal;
    const Inputs in = make_inputs(c, seed += 10);
    const std::string what = name("fused merge", c);
    const Runs two = run(g.kernels, c, in, 0, 1, 1);
    REQUIRE(two.shaders == "attention_split+attention_merge");
    CHECK(test::close(what + " (two dispatches)", two.outs[0], run_cpu(c, in), kTol));
    // Three calls in one recording, which the counts must carry from one to the next, and
    // the recording submitted twice (a decode step's replay).
    const Runs one = run(g.kernels, c, in, s.T, 3, 2);
    CHECK(one.shaders == "attention_split");
    for (size_t i = 0; i < one.outs.size(); i++) {
      INFO(what << ", call " << i);
      CHECK(same_bits(one.outs[i], two.outs[0]));
    }
    CHECK(one.counts == std::vector<uint32_t>(size_t{s.T} * s.H, 0));
  }
}

TEST_CASE("attention's split kernel merges apart where the counts do not cover the call") {
  GPU_TEST(g);
  if (!split_runs(g.device.caps(), {1, 1, 64, 1})) {
    MESSAGE("SKIPPED: 64-invocation workgroups or 9.5 KiB of shared memory unavailable");
    return;
  }
  // Counts for 4 queries, a call of 5: the two dispatches, and the counts untouched.
  Case c{5, 130, 768, 12};
  const Inputs in = make_inputs(c, 7500);
  const Runs r = run(g.kernels, c, in, 4, 1, 1);
  CHECK(r.shaders == "attention_split+attention_merge");
  CHECK(test::close(name("counts short", c), r.outs[0], run_cpu(c, in), kTol));
  CHECK(r.counts == std::vector<uint32_t>(size_t{4} * c.H, 0));
}

TEST_CASE("a decoder's steps on the GPU set: the merge fused, the two dispatches' bits") {
  GPU_TEST(g);
  // GPT-2 small's width and heads (D = 64), 2 layers, decoded one token at a time from a short
  // prompt across three 64-key blocks; the merge apart (GPT2VK_SPLIT_MERGE=apart, read when a
  // model decides its kernels) against fused, the default. Every step's logits the same bits,
  // under both KV caches.
  model::Config c = test::tiny_config();
  c.n_embd = 768, c.n_head = 12, c.n_inner = 4 * 768, c.n_ctx = 256;
  const test::TinyModel tiny(c, test::unit_scale(c));
  for (const model::Precision cache : {model::Precision::F32, model::Precision::F16}) {
    CAPTURE(cache == model::Precision::F16 ? "f16 cache" : "f32 cache");
    const std::unique_ptr<model::Model> fused =
        test::gpu_model(g, *tiny.checkpoint, model::Precision::F16, vk::KernelSet::Gpu, cache);
    setenv("GPT2VK_SPLIT_MERGE", "apart", 1);
    const std::unique_ptr<model::Model> apart =
        test::gpu_model(g, *tiny.checkpoint, model::Precision::F16, vk::KernelSet::Gpu, cache);
    unsetenv("GPT2VK_SPLIT_MERGE");
    const std::vector<int32_t> prompt{3, 1, 4, 1, 5};
    bool same = same_bits(fused->logits(prompt), apart->logits(prompt));
    int32_t id = 9;
    for (uint32_t step = 0; step < 140 && same; step++) {
      const std::vector<float> a = fused->logits(std::vector<int32_t>{id}),
                               b = apart->logits(std::vector<int32_t>{id});
      same = same_bits(a, b);
      if (!same) INFO("step " << step);
      id = static_cast<int32_t>((id * 31 + 7) % c.n_vocab);
    }
    CHECK(same);
    CHECK(fused->length() == 145);
    // A step's dispatches: the merge's, one a layer, only where it is apart.
    CHECK(model::gpu_stats(*apart).dispatches == model::gpu_stats(*fused).dispatches + c.n_layer);
  }
}
