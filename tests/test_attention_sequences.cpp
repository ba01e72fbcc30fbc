// attention_sequences (training's forward): GPU (fp32, online softmax per query) against
// model::cpu::attention (double), each sequence's keys and values given as caches of T rows.
// Tolerance: test_attention.cpp's, |d| <= 1e-6 + 1e-5 |ref|, for the same reasons (the same
// arithmetic: fp32 dot products over D, an online softmax, a weighted sum of values), with its
// inputs in [-1, 1).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/ops/cpu/attention.h"
#include "model/ops/gpu/attention.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

void check(test::Gpu& g, uint32_t B, uint32_t T, uint32_t C, uint32_t H,
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
  vk::Arena arena(g.device, (qkv.size() + ref.size()) * 4 + 65536, vk::MemoryKind::Device,
                  "test attention_sequences");
  const vk::BufferSpan gq = test::to_gpu(g.device, arena, qkv), out = arena.alloc(ref.size() * 4);
  vk::Recorder rec(g.device);
  rec.begin();
  model::gpu::attention_sequences(g.kernels, rec, out, gq, B, T, C, H, spec);
  rec.run();
  CHECK(rec.stats().dispatches == 1);
  CHECK(test::close(std::string(spec.causal ? "causal" : "bidirectional") + " B=" + std::to_string(B) +
                        " T=" + std::to_string(T) + " C=" + std::to_string(C),
                    test::from_gpu(g.device, out, ref.size()), ref, {1e-6, 1e-5}));
}

}  // namespace

TEST_CASE("attention_sequences matches the CPU reference") {
  GPU_TEST(g);
  check(g, 3, 17, 96, 3, {true, 0}, 1100);
  check(g, 2, 17, 96, 3, {false, 0}, 1110);
  check(g, 1, 64, 128, 2, {true, 0.3f}, 1120);
  check(g, 4, 1, 32, 4, {true, 0}, 1130);
  check(g, 1, 9, 128, 1, {true, 0}, 1140);
}
