// attention_backward: GPU (fp32, the softmax weights recomputed) against
// model::cpu::attention_backward (double).
// Tolerance |d| <= 1e-5 max|ref| + 1e-5 |ref|: each gradient is a sum over up to T keys or
// queries of products of a softmax weight (exp of an fp32 score less an fp32 logsumexp, a few
// ulp of relative error) and fp32 dot products over D; ~1e-6 relative to the largest value in
// practice. Checked bit for bit against a second run (one writer per output, a fixed order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/ops/cpu/attention.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/attention_backward.h"
#include "model/ops/gpu/policy.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

// dqkv; `shaders` gets what ran, where the device has timestamps.
std::vector<float> run_gpu(const vk::Device& device, const std::vector<float>& dout,
                           const std::vector<float>& qkv, uint32_t B, uint32_t T, uint32_t C,
                           uint32_t H, const model::AttentionSpec& spec,
                           std::vector<std::string>& shaders) {
  vk::Arena arena(device, (dout.size() + 2 * qkv.size()) * 4 + 65536 * 4, vk::MemoryKind::Device,
                  "test attention_backward");
  const vk::BufferSpan gd = test::to_gpu(device, arena, dout), gq = test::to_gpu(device, arena, qkv),
                       dq = arena.alloc(qkv.size() * 4),
                       stats = arena.alloc(model::gpu::attention_backward_stats_bytes(B, T, H));
  vk::Recorder rec(device, true);
  rec.begin();
  model::gpu::attention_backward(model::gpu::Ops(device), rec,
                                 {.dqkv = dq,
                                  .stats = stats,
                                  .dout = gd,
                                  .qkv = gq,
                                  .B = B,
                                  .T = T,
                                  .C = C,
                                  .H = H,
                                  .spec = spec});
  rec.run();
  CHECK(rec.stats().dispatches == 2);
  for (const vk::DispatchTime& t : rec.timings()) shaders.push_back(t.shader);
  return test::from_gpu(device, dq, qkv.size());
}

void check(const vk::Device& g, uint32_t B, uint32_t T, uint32_t C, uint32_t H, const model::AttentionSpec& spec,
           unsigned seed) {
  const std::vector<float> qkv = test::random_floats(size_t{B} * T * 3 * C, seed, -1.5f, 1.5f),
                           dout = test::random_floats(size_t{B} * T * C, seed + 1);
  std::vector<float> ref(qkv.size());
  model::cpu::attention_backward(ref.data(), dout.data(), qkv.data(), B, T, C, H, spec);
  std::vector<std::string> shaders;
  const std::vector<float> got = run_gpu(g, dout, qkv, B, T, C, H, spec, shaders);
  float peak = 0;
  for (float v : ref) peak = std::max(peak, std::fabs(v));
  const std::string what = std::string(spec.causal ? "causal" : "bidirectional") + " B=" + std::to_string(B) +
                           " T=" + std::to_string(T) + " C=" + std::to_string(C) + " H=" + std::to_string(H);
  CHECK(test::close(what + ": dqkv", got, ref, {1e-5 * double(peak), 1e-5}));
  // The kernel the policy picks: attention_backward_texel for the CPU set where D is in whole
  // texels (arena spans are texel-aligned), attention_backward otherwise; both passes.
  const bool texel = model::gpu::Ops(g).policy().texel_attention && g.caps().storage_texel_buffers &&
                     (C / H) % 4 == 0;
  if (g.caps().timestamps)
    CHECK_MESSAGE(std::count(shaders.begin(), shaders.end(),
                             texel ? "attention_backward_texel" : "attention_backward") == 2, what);
  std::vector<std::string> unused;
  const std::vector<float> again = run_gpu(g, dout, qkv, B, T, C, H, spec, unused);
  CHECK(std::memcmp(again.data(), got.data(), got.size() * 4) == 0);
}

}  // namespace

// Both kernel sets: the portable kernel (the GPU set's) and the texel one (the CPU set's, on a
// device with storage texel buffers).
TEST_CASE("attention_backward matches the CPU reference, both kernel sets") {
  GPU_TEST(gpu);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& g = gpu.with_kernels(set);
    check(g, 2, 17, 96, 3, {true, 0}, 1000);   // D = 32
    check(g, 2, 17, 96, 3, {false, 0}, 1010);  // bidirectional
    check(g, 1, 40, 128, 2, {true, 0.3f}, 1020);  // D = 64, a given scale
    check(g, 3, 1, 32, 4, {true, 0}, 1030);     // one token: dq = dk = 0, dv = dout
    check(g, 1, 9, 128, 1, {true, 0}, 1040);    // one head of 128, the largest D
    check(g, 2, 5, 12, 2, {true, 0}, 1050);     // D = 6: the portable kernel on either set
  }
}

TEST_CASE("attention_backward rejects what it cannot run") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 1 << 20, vk::MemoryKind::Device, "test attention_backward errors");
  const vk::BufferSpan a = arena.alloc(1 << 18);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::attention_backward(
          g.kernels, rec,
          {.dqkv = a, .stats = a, .dout = a, .qkv = a, .B = 1, .T = 4, .C = 96, .H = 5}),
      doctest::Contains("not a positive multiple of H"), vk::Error);
  CHECK_THROWS_WITH_AS(
      model::gpu::attention_backward(
          g.kernels, rec,
          {.dqkv = a, .stats = a, .dout = a, .qkv = a, .B = 1, .T = 4, .C = 256, .H = 1}),
      doctest::Contains("exceeds 128"), vk::Error);
  rec.end();
}
