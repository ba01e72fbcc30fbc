// attention_sequences (training's forward): GPU (fp32, online softmax per query) against
// model::cpu::attention_sequences (double: cpu::attention per sequence), for self-attention (q,
// k and v the fused QKV projection) and cross-attention (queries over a source's S keys and
// values).
// Tolerance: test_attention.cpp's, |d| <= 1e-6 + 1e-5 |ref|, for the same reasons (the same
// arithmetic: fp32 dot products over D, an online softmax, a weighted sum of values), with its
// inputs in [-1, 1). Both kernel sets: attention_sequences (the GPU set's) and
// attention_sequences_texel (the CPU set's where D is in whole texels).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "model/ops/cpu/attention.h"
#include "model/ops/gpu/attention_backward.h"
#include "model/ops/gpu/policy.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

// self: q, k and v one qkv; else three tensors. lens: each sequence's keys (a padded batch), or
// none.
void check(const vk::Device& g, const model::SequenceRows& r, const model::AttentionSpec& spec,
           bool self, unsigned seed, const std::vector<uint32_t>& lens = {}) {
  const std::vector<float> q = test::random_floats(size_t{r.B} * r.T * r.q_stride, seed),
                           k = self
                                   ? q
                                   : test::random_floats(size_t{r.B} * r.S * r.kv_stride, seed + 1),
                           v = self
                                   ? q
                                   : test::random_floats(size_t{r.B} * r.S * r.kv_stride, seed + 2);
  std::vector<float> ref(size_t{r.B} * r.T * r.C);
  model::cpu::attention_sequences(ref.data(), q.data(), k.data(), v.data(), r, spec,
                                  lens.empty() ? nullptr : lens.data());
  vk::Arena arena(g, (q.size() + k.size() + v.size() + ref.size()) * 4 + 65536,
                  vk::MemoryKind::Device, "test attention_sequences");
  const vk::BufferSpan gq = test::to_gpu(g, arena, q), gk = self ? gq : test::to_gpu(g, arena, k),
                       gv = self ? gq : test::to_gpu(g, arena, v),
                       out = arena.alloc(ref.size() * 4), key_lens = arena.alloc(4 * r.B);
  if (!lens.empty()) vk::upload(g, key_lens, lens.data(), 4 * r.B);
  const std::vector<float> nan(ref.size(), std::numeric_limits<float>::quiet_NaN());
  vk::upload(g, out, nan.data(), ref.size() * 4);  // every output row is written
  vk::Recorder rec(g, true);
  rec.begin();
  model::gpu::attention_sequences(model::gpu::Ops(g), rec,
                                  {.out = out,
                                   .q = gq,
                                   .k = gk,
                                   .v = gv,
                                   .key_lens = lens.empty() ? nullptr : &key_lens,
                                   .rows = r,
                                   .spec = spec});
  rec.run();
  CHECK(rec.stats().dispatches == 1);
  const std::string what = std::string(self ? "self" : "cross") + (spec.causal ? " causal" : "") +
                           " B=" + std::to_string(r.B) + " T=" + std::to_string(r.T) +
                           " S=" + std::to_string(r.S) + " C=" + std::to_string(r.C) +
                           " H=" + std::to_string(r.H) + (lens.empty() ? "" : " padded");
  CHECK(test::close(what, test::from_gpu(g, out, ref.size()), ref, {1e-6, 1e-5}));
  // The kernel the policy picks (arena spans are texel-aligned).
  const bool texel = model::gpu::Ops(g).policy().texel_attention &&
                     g.caps().storage_texel_buffers && (r.C / r.H) % 4 == 0;
  if (g.caps().timestamps) {
    const std::vector<vk::DispatchTime> ran = rec.timings();
    CHECK_MESSAGE((ran.size() == 1 && ran[0].shader == (texel ? "attention_sequences_texel" : "attention_sequences")),
                  what);
  }
}

void check_self(const vk::Device& g, uint32_t B, uint32_t T, uint32_t C, uint32_t H,
                const model::AttentionSpec& spec, unsigned seed) {
  check(g, model::self_attention_rows(B, T, C, H), spec, true, seed);
}
void check_cross(const vk::Device& g, uint32_t B, uint32_t T, uint32_t S, uint32_t C, uint32_t H,
                 unsigned seed) {
  check(g, model::cross_attention_rows(B, T, S, C, H), {false, 0}, false, seed);
}

}  // namespace

TEST_CASE("attention_sequences matches the CPU reference, both kernel sets") {
  GPU_TEST(gpu);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& g = gpu.with_kernels(set);
    check_self(g, 3, 17, 96, 3, {true, 0}, 1100);      // D = 32
    check_self(g, 2, 17, 96, 3, {false, 0}, 1110);     // bidirectional
    check_self(g, 1, 64, 128, 2, {true, 0.3f}, 1120);  // D = 64, a given scale
    check_self(g, 4, 1, 32, 4, {true, 0}, 1130);       // one token
    check_self(g, 1, 9, 128, 1, {true, 0}, 1140);      // one head of 128, the largest D
    check_self(g, 2, 5, 12, 2, {true, 0}, 1150);       // D = 6: the portable kernel on either set
    // Cross-attention: fewer and more source rows than queries, one source row, D = 6; GPT-2's
    // heads over a 200-token source.
    check_cross(g, 2, 9, 23, 96, 3, 1160);
    check_cross(g, 3, 17, 5, 128, 2, 1170);
    check_cross(g, 2, 6, 1, 32, 4, 1180);
    check_cross(g, 2, 7, 11, 12, 2, 1190);
    check_cross(g, 2, 96, 200, 768, 12, 1195);
    // Padded batches (key lengths): bidirectional self-attention, and cross-attention over
    // sources of 23 rows with 23, 9 and 1 real ones, and of 200 with 200 and 57 at GPT-2's heads.
    check(g, model::self_attention_rows(3, 17, 96, 3), {false, 0}, true, 1196, {17, 4, 1});
    check(g, model::cross_attention_rows(3, 9, 23, 96, 3), {false, 0}, false, 1197, {23, 9, 1});
    check(g, model::cross_attention_rows(2, 7, 11, 12, 2), {false, 0}, false, 1198, {3, 11});
    check(g, model::cross_attention_rows(2, 96, 200, 768, 12), {false, 0}, false, 1199, {200, 57});
  }
}
