// attention_backward: GPU (fp32, the softmax weights recomputed) against
// model::cpu::attention_backward (double), for self-attention (q, k and v the fused QKV
// projection, dq, dk and dv one dqkv) and cross-attention (queries over a source's keys and
// values, three tensors).
// Tolerance |d| <= 1e-5 max|ref| + 1e-5 |ref|: each gradient is a sum over up to T keys or
// queries of products of a softmax weight (exp of an fp32 score less an fp32 logsumexp, a few
// ulp of relative error) and fp32 dot products over D; ~1e-6 relative to the largest value in
// practice. Checked bit for bit against a second run (one writer per output, a fixed order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

using Floats = std::vector<float>;

// The operands of one case: self-attention's q, k and v are one qkv (k and v empty), cross-
// attention's three tensors.
struct Case {
  model::SequenceRows rows;
  model::AttentionSpec spec;
  Floats dout, q, k, v;
  std::vector<uint32_t> lens;  // each sequence's keys (a padded batch), or none
  bool self() const { return k.empty(); }
  const uint32_t* key_lens() const { return lens.empty() ? nullptr : lens.data(); }
};

Case make_case(const model::SequenceRows& r, const model::AttentionSpec& spec, bool self,
               unsigned seed) {
  Case c{r,
         spec,
         test::random_floats(size_t{r.B} * r.T * r.C, seed + 1),
         test::random_floats(size_t{r.B} * r.T * r.q_stride, seed, -1.5f, 1.5f),
         {},
         {}};
  if (!self) {
    c.k = test::random_floats(size_t{r.B} * r.S * r.kv_stride, seed + 2, -1.5f, 1.5f);
    c.v = test::random_floats(size_t{r.B} * r.S * r.kv_stride, seed + 3, -1.5f, 1.5f);
  }
  return c;
}

// dq, dk and dv: self-attention's one dqkv in dq. `shaders` gets what ran, where the device has
// timestamps.
struct Grads {
  Floats dq, dk, dv;
};
Grads run_gpu(const vk::Device& device, const Case& c, std::vector<std::string>& shaders) {
  const model::SequenceRows& r = c.rows;
  vk::Arena arena(device,
                  (c.dout.size() + 2 * (c.q.size() + c.k.size() + c.v.size())) * 4 + 65536 * 4,
                  vk::MemoryKind::Device, "test attention_backward");
  const vk::BufferSpan gd = test::to_gpu(device, arena, c.dout),
                       gq = test::to_gpu(device, arena, c.q),
                       gk = c.self() ? gq : test::to_gpu(device, arena, c.k),
                       gv = c.self() ? gq : test::to_gpu(device, arena, c.v),
                       dq = arena.alloc(c.q.size() * 4),
                       dk = c.self() ? dq : arena.alloc(c.k.size() * 4),
                       dv = c.self() ? dq : arena.alloc(c.v.size() * 4),
                       stats =
                           arena.alloc(model::gpu::attention_backward_stats_bytes(r.B, r.T, r.H)),
                       lens = arena.alloc(4 * r.B);
  if (c.key_lens()) vk::upload(device, lens, c.lens.data(), 4 * r.B);
  // NaN first: every element the op must write (the padded keys' zeros too) is written.
  const auto poison = [&](const vk::BufferSpan& s, size_t n) {
    const Floats nan(n, std::numeric_limits<float>::quiet_NaN());
    vk::upload(device, s, nan.data(), n * 4);
  };
  poison(dq, c.q.size());
  if (!c.self()) poison(dk, c.k.size()), poison(dv, c.v.size());
  vk::Recorder rec(device, true);
  rec.begin();
  model::gpu::attention_backward(model::gpu::Ops(device), rec,
                                 {.dq = dq,
                                  .dk = dk,
                                  .dv = dv,
                                  .stats = stats,
                                  .dout = gd,
                                  .q = gq,
                                  .k = gk,
                                  .v = gv,
                                  .key_lens = c.key_lens() ? &lens : nullptr,
                                  .rows = r,
                                  .spec = c.spec});
  rec.run();
  CHECK(rec.stats().dispatches == 2);
  for (const vk::DispatchTime& t : rec.timings()) shaders.push_back(t.shader);
  Grads g{test::from_gpu(device, dq, c.q.size()), {}, {}};
  if (!c.self())
    g.dk = test::from_gpu(device, dk, c.k.size()), g.dv = test::from_gpu(device, dv, c.v.size());
  return g;
}

float peak(const Floats& v) {
  float p = 0;
  for (float x : v) p = std::max(p, std::fabs(x));
  return p;
}

void check(const vk::Device& g, const Case& c) {
  const model::SequenceRows& r = c.rows;
  Grads ref{Floats(c.q.size()), Floats(c.k.size()), Floats(c.v.size())};
  if (c.self()) {
    model::cpu::attention_backward(ref.dq.data(), ref.dq.data(), ref.dq.data(), c.dout.data(),
                                   c.q.data(), c.q.data(), c.q.data(), r, c.spec, c.key_lens());
  } else {
    model::cpu::attention_backward(ref.dq.data(), ref.dk.data(), ref.dv.data(), c.dout.data(),
                                   c.q.data(), c.k.data(), c.v.data(), r, c.spec, c.key_lens());
  }
  std::vector<std::string> shaders;
  const Grads got = run_gpu(g, c, shaders);
  const std::string what =
      std::string(c.self() ? "self" : "cross") + (c.spec.causal ? " causal" : "") +
      " B=" + std::to_string(r.B) + " T=" + std::to_string(r.T) + " S=" + std::to_string(r.S) +
      " C=" + std::to_string(r.C) + " H=" + std::to_string(r.H) + (c.lens.empty() ? "" : " padded");
  const float top = std::max({peak(ref.dq), peak(ref.dk), peak(ref.dv)});
  CHECK(test::close(what + (c.self() ? ": dqkv" : ": dq"), got.dq, ref.dq,
                    {1e-5 * double(top), 1e-5}));
  if (!c.self()) {
    CHECK(test::close(what + ": dk", got.dk, ref.dk, {1e-5 * double(top), 1e-5}));
    CHECK(test::close(what + ": dv", got.dv, ref.dv, {1e-5 * double(top), 1e-5}));
  }
  // The kernel the policy picks: attention_backward_texel for the CPU set where D is in whole
  // texels (arena spans are texel-aligned; every stride and column here is a multiple of 4),
  // attention_backward otherwise; both passes.
  const bool texel = model::gpu::Ops(g).policy().texel_attention &&
                     g.caps().storage_texel_buffers && (r.C / r.H) % 4 == 0;
  if (g.caps().timestamps)
    CHECK_MESSAGE(std::count(shaders.begin(), shaders.end(),
                             texel ? "attention_backward_texel" : "attention_backward") == 2, what);
  std::vector<std::string> unused;
  const Grads again = run_gpu(g, c, unused);
  CHECK(std::memcmp(again.dq.data(), got.dq.data(), got.dq.size() * 4) == 0);
  CHECK(again.dk == got.dk);
  CHECK(again.dv == got.dv);
}

void check_self(const vk::Device& g, uint32_t B, uint32_t T, uint32_t C, uint32_t H,
                const model::AttentionSpec& spec, unsigned seed) {
  check(g, make_case(model::self_attention_rows(B, T, C, H), spec, true, seed));
}
void check_cross(const vk::Device& g, uint32_t B, uint32_t T, uint32_t S, uint32_t C, uint32_t H,
                 unsigned seed) {
  check(g, make_case(model::cross_attention_rows(B, T, S, C, H), {false, 0}, false, seed));
}

}  // namespace

// Both kernel sets: the portable kernel (the GPU set's) and the texel one (the CPU set's, on a
// device with storage texel buffers).
TEST_CASE("attention_backward matches the CPU reference, both kernel sets") {
  GPU_TEST(gpu);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& g = gpu.with_kernels(set);
    check_self(g, 2, 17, 96, 3, {true, 0}, 1000);      // D = 32
    check_self(g, 2, 17, 96, 3, {false, 0}, 1010);     // bidirectional
    check_self(g, 1, 40, 128, 2, {true, 0.3f}, 1020);  // D = 64, a given scale
    check_self(g, 3, 1, 32, 4, {true, 0}, 1030);       // one token: dq = dk = 0, dv = dout
    check_self(g, 1, 9, 128, 1, {true, 0}, 1040);      // one head of 128, the largest D
    check_self(g, 2, 5, 12, 2, {true, 0}, 1050);       // D = 6: the portable kernel on either set
    // Cross-attention: fewer and more source rows than queries, one source row.
    check_cross(g, 2, 9, 23, 96, 3, 1060);
    check_cross(g, 3, 17, 5, 128, 2, 1070);
    check_cross(g, 2, 6, 1, 32, 4, 1080);
    check_cross(g, 2, 7, 11, 12, 2, 1090);  // D = 6
    // Padded batches (key lengths): bidirectional self-attention over sequences of 17 with 17, 4
    // and 1 real tokens, cross-attention over sources of 23 and of 11 rows.
    Case self = make_case(model::self_attention_rows(3, 17, 96, 3), {false, 0}, true, 1091);
    self.lens = {17, 4, 1};
    check(g, self);
    Case cross = make_case(model::cross_attention_rows(3, 9, 23, 96, 3), {false, 0}, false, 1092);
    cross.lens = {23, 9, 1};
    check(g, cross);
    Case portable =
        make_case(model::cross_attention_rows(2, 7, 11, 12, 2), {false, 0}, false, 1093);
    portable.lens = {3, 11};
    check(g, portable);
  }
}

// What a user's model trains at: GPT-2 small's heads (12 of 64) over hundreds of tokens, and
// cross-attention of 96 target tokens over a 200-token source.
TEST_CASE("attention_backward at GPT-2's head dims, both kernel sets" *
          doctest::test_suite("shapes")) {
  GPU_TEST(gpu);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& g = gpu.with_kernels(set);
    check_self(g, 1, 256, 768, 12, {true, 0}, 1100);
    check_cross(g, 2, 96, 200, 768, 12, 1110);
    // A padded batch of sources at that shape.
    Case padded =
        make_case(model::cross_attention_rows(2, 96, 200, 768, 12), {false, 0}, false, 1120);
    padded.lens = {200, 57};
    check(g, padded);
  }
}

TEST_CASE("attention_backward rejects what it cannot run") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 1 << 20, vk::MemoryKind::Device, "test attention_backward errors");
  const vk::BufferSpan a = arena.alloc(1 << 18);
  vk::Recorder rec(g.device);
  rec.begin();
  const auto run = [&](const model::SequenceRows& rows, const model::AttentionSpec& spec = {},
                       const vk::BufferSpan* key_lens = nullptr) {
    model::gpu::attention_backward(g.kernels, rec,
                                   {.dq = a,
                                    .dk = a,
                                    .dv = a,
                                    .stats = a,
                                    .dout = a,
                                    .q = a,
                                    .k = a,
                                    .v = a,
                                    .key_lens = key_lens,
                                    .rows = rows,
                                    .spec = spec});
  };
  CHECK_THROWS_WITH_AS(run(model::self_attention_rows(1, 4, 96, 5)),
                       doctest::Contains("not a positive multiple of H"), vk::Error);
  CHECK_THROWS_WITH_AS(run(model::self_attention_rows(1, 4, 256, 1)),
                       doctest::Contains("exceeds 128"), vk::Error);
  CHECK_THROWS_WITH_AS(run(model::cross_attention_rows(1, 4, 6, 32, 1)),
                       doctest::Contains("causal attention needs as many keys as queries"),
                       vk::Error);
  CHECK_THROWS_WITH_AS(run(model::cross_attention_rows(1, 4, 0, 32, 1), {false, 0}),
                       doctest::Contains("no keys"), vk::Error);
  model::SequenceRows past = model::cross_attention_rows(1, 4, 6, 32, 1);
  past.v_col = 4;
  CHECK_THROWS_WITH_AS(run(past, {false, 0}), doctest::Contains("past their rows' strides"),
                       vk::Error);
  CHECK_THROWS_WITH_AS(run(model::cross_attention_rows(1, 4, 100000, 32, 1), {false, 0}),
                       doctest::Contains("k holds"), vk::Error);
  CHECK_THROWS_WITH_AS(run(model::self_attention_rows(1, 4, 32, 1), {true, 0}, &a),
                       doctest::Contains("key lengths are for bidirectional"), vk::Error);
  rec.end();
}
