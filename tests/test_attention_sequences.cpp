// attention_sequences (training's forward): GPU (fp32, online softmax per query) against
// model::cpu::attention (double), each sequence's keys and values given as caches of T rows.
// Tolerance: test_attention.cpp's, |d| <= 1e-6 + 1e-5 |ref|, for the same reasons (the same
// arithmetic: fp32 dot products over D, an online softmax, a weighted sum of values), with its
// inputs in [-1, 1). Both kernel sets: attention_sequences (the GPU set's) and
// attention_sequences_texel (the CPU set's where D is in whole texels).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/ops/cpu/attention.h"
#include "model/ops/gpu/attention_backward.h"
#include "model/ops/gpu/policy.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

void check(const vk::Device& g, uint32_t B, uint32_t T, uint32_t C, uint32_t H,
           const model::AttentionSpec& spec, unsigned seed) {
  const std::vector<float> qkv = test::random_floats(size_t{B} * T * 3 * C, seed);
  std::vector<float> ref(size_t{B} * T * C), k(size_t{T} * C), v(size_t{T} * C);
  for (uint32_t b = 0; b < B; b++) {
    const float* in = qkv.data() + size_t{b} * T * 3 * C;
    for (uint32_t t = 0; t < T; t++)
      for (uint32_t i = 0; i < C; i++) {
        k[size_t{t} * C + i] = in[size_t{t} * 3 * C + C + i];
        v[size_t{t} * C + i] = in[size_t{t} * 3 * C + 2 * C + i];
      }
    model::cpu::attention(ref.data() + size_t{b} * T * C, in, 3 * C, k.data(), v.data(), T, T, C, H, spec);
  }
  vk::Arena arena(g, (qkv.size() + ref.size()) * 4 + 65536, vk::MemoryKind::Device,
                  "test attention_sequences");
  const vk::BufferSpan gq = test::to_gpu(g, arena, qkv), out = arena.alloc(ref.size() * 4);
  vk::Recorder rec(g, true);
  rec.begin();
  model::gpu::attention_sequences(
      model::gpu::Ops(g), rec,
      {.out = out, .qkv = gq, .B = B, .T = T, .C = C, .H = H, .spec = spec});
  rec.run();
  CHECK(rec.stats().dispatches == 1);
  const std::string what = std::string(spec.causal ? "causal" : "bidirectional") + " B=" + std::to_string(B) +
                           " T=" + std::to_string(T) + " C=" + std::to_string(C) + " H=" + std::to_string(H);
  CHECK(test::close(what, test::from_gpu(g, out, ref.size()), ref, {1e-6, 1e-5}));
  // The kernel the policy picks (arena spans are texel-aligned).
  const bool texel = model::gpu::Ops(g).policy().texel_attention && g.caps().storage_texel_buffers &&
                     (C / H) % 4 == 0;
  if (g.caps().timestamps) {
    const std::vector<vk::DispatchTime> ran = rec.timings();
    CHECK_MESSAGE((ran.size() == 1 && ran[0].shader == (texel ? "attention_sequences_texel" : "attention_sequences")),
                  what);
  }
}

}  // namespace

TEST_CASE("attention_sequences matches the CPU reference, both kernel sets") {
  GPU_TEST(gpu);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& g = gpu.with_kernels(set);
    check(g, 3, 17, 96, 3, {true, 0}, 1100);    // D = 32
    check(g, 2, 17, 96, 3, {false, 0}, 1110);   // bidirectional
    check(g, 1, 64, 128, 2, {true, 0.3f}, 1120);  // D = 64, a given scale
    check(g, 4, 1, 32, 4, {true, 0}, 1130);     // one token
    check(g, 1, 9, 128, 1, {true, 0}, 1140);    // one head of 128, the largest D
    check(g, 2, 5, 12, 2, {true, 0}, 1150);     // D = 6: the portable kernel on either set
  }
}
