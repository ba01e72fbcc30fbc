// topk: GPU against the CPU reference. Tolerance: exact, ids and value bits. Selection only
// compares and copies, and the order (value, then lower id) is total, so there is exactly one
// right answer however the work is split.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "model/ops/cpu/topk.h"
#include "model/ops/gpu/topk.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Result {
  std::vector<int32_t> ids;
  std::vector<float> values;
  uint32_t dispatches = 0;
};

Result gpu_topk(const model::gpu::Ops& kernels, const std::vector<float>& logits, uint32_t k) {
  const vk::Device& device = kernels.device();
  const auto V = static_cast<uint32_t>(logits.size());
  const size_t scratch_bytes = model::gpu::topk_scratch_bytes(model::gpu::Ops(device), V, k);
  vk::Arena arena(device, V * 4 + scratch_bytes + 2 * k * 4 + 4096, vk::MemoryKind::Device,
                   "test topk");
  vk::BufferSpan in = test::to_gpu(device, arena, logits), ids = arena.alloc(k * 4),
                  values = arena.alloc(k * 4);
  vk::BufferSpan scratch = scratch_bytes ? arena.alloc(scratch_bytes) : vk::BufferSpan{};
  vk::Recorder rec(device);
  rec.begin();
  model::gpu::topk(
      kernels, rec,
      {.out_ids = ids, .out_values = values, .logits = in, .scratch = scratch, .V = V, .k = k});
  rec.run();
  Result r{std::vector<int32_t>(k), std::vector<float>(k), rec.stats().dispatches};
  vk::download(device, r.ids.data(), ids, k * 4);
  vk::download(device, r.values.data(), values, k * 4);
  return r;
}

// Exact agreement with the CPU reference: ids equal, values bit for bit.
void check_topk(const model::gpu::Ops& kernels, const std::vector<float>& logits, uint32_t k,
                const char* what) {
  CAPTURE(what);
  CAPTURE(logits.size());
  CAPTURE(k);
  Result got = gpu_topk(kernels, logits, k);
  std::vector<int32_t> ids(k);
  std::vector<float> values(k);
  model::cpu::topk(ids.data(), values.data(), logits.data(), logits.size(), k);
  size_t bad = 0;
  for (size_t r = 0; r < k; r++) {
    if (got.ids[r] != ids[r] || std::memcmp(&got.values[r], &values[r], 4) != 0) {
      if (bad++ < 5)
        FAIL_CHECK("[" << r << "] gpu id " << got.ids[r] << " value " << got.values[r]
                       << ", ref id " << ids[r] << " value " << values[r]);
    }
  }
  CHECK(bad == 0);
}

// Logits with many exact ties (multiples of 1/4 in [-8, 8]), and some -inf, NaN and signed zeros.
std::vector<float> tricky_logits(size_t V, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q(-32, 32), kind(0, 99);
  std::vector<float> x(V);
  for (float& v : x) {
    int c = kind(rng);
    v = c < 3 ? -kInf : c < 6 ? kNaN : c < 8 ? -0.0f : static_cast<float>(q(rng)) / 4;
  }
  return x;
}

}  // namespace

TEST_CASE("topk matches the CPU reference exactly") {
  GPU_TEST(g);
  for (uint32_t V : {1u, 7u, 1000u, 50257u}) {
    for (uint32_t k : {1u, 2u, 40u, 64u}) {
      if (k > V) continue;
      check_topk(g.kernels, test::random_floats(V, V + k, -10, 10), k, "random");
      check_topk(g.kernels, tricky_logits(V, V * 3 + k), k, "ties, -inf, NaN");
    }
  }
  check_topk(g.kernels, tricky_logits(50257, 9), model::gpu::kTopkMax, "k = kTopkMax");
}

TEST_CASE("topk semantics: ties to the lower id, NaN as -inf, +0 above -0") {
  GPU_TEST(g);
  // Hand-written expectations, so the reference is checked too.
  Result equal = gpu_topk(g.kernels, std::vector<float>(1000, 1.5f), 40);
  for (int32_t r = 0; r < 40; r++) {
    CHECK(equal.ids[size_t(r)] == r);
    CHECK(equal.values[size_t(r)] == 1.5f);
  }
  std::vector<float> x = {kNaN, -kInf, 2.0f, -0.0f, kNaN, 0.0f, 2.0f, -kInf, -1.0f};
  Result r = gpu_topk(g.kernels, x, 9);
  CHECK(r.ids == std::vector<int32_t>{2, 6, 5, 3, 8, 0, 1, 4, 7});
  CHECK(r.values[0] == 2.0f);
  CHECK(!std::signbit(r.values[2]));
  CHECK(std::signbit(r.values[3]));
  for (size_t i = 5; i < 9; i++) CHECK(r.values[i] == -kInf);  // NaN reported as -inf
  check_topk(g.kernels, std::vector<float>(50257, kNaN), 64, "all NaN");
  check_topk(g.kernels, std::vector<float>(50257, -kInf), 40, "all -inf");
  std::vector<float> one_peak(50257, -kInf);
  one_peak[50256] = -1e30f;
  Result peak = gpu_topk(g.kernels, one_peak, 1);
  CHECK(peak.ids[0] == 50256);
  CHECK(peak.values[0] == -1e30f);
}

TEST_CASE("topk with small workgroups runs a deeper tree") {
  GPU_TEST(g);
  // Slices of 256 for k = 64: five levels; CPU devices take slices of 2048 (64 per invocation,
  // see model/ops/gpu/policy.cpp): two levels, the second of 25 groups' candidates.
  test::LoweredGpu small(g, {.max_workgroup_invocations = 32});
  Result deep = gpu_topk(small.kernels, tricky_logits(50257, 5), 64);
  CHECK(deep.dispatches >= (model::gpu::Ops(small.device).policy().topk_per_invocation == 64 ? 2 : 4));
  check_topk(small.kernels, tricky_logits(50257, 5), 64, "workgroup 32");
  check_topk(small.kernels, test::random_floats(50257, 6), 1, "workgroup 32, argmax");
}

TEST_CASE("argmax is topk with k = 1") {
  GPU_TEST(g);
  std::vector<float> x = test::random_floats(50257, 17, -5, 5);
  x[31337] = 7.0f;
  x[40000] = 7.0f;  // a tie: the lower id wins
  const size_t scratch_bytes = model::gpu::topk_scratch_bytes(model::gpu::Ops(g.device), 50257, 1);
  vk::Arena arena(g.device, x.size() * 4 + scratch_bytes + 4096, vk::MemoryKind::Device,
                   "argmax");
  vk::BufferSpan in = test::to_gpu(g, arena, x), id = arena.alloc(4), value = arena.alloc(4);
  vk::BufferSpan scratch = arena.alloc(scratch_bytes);
  vk::Recorder rec(g.device);
  rec.begin();
  model::gpu::argmax(
      g.kernels, rec,
      {.out_id = id, .out_value = value, .logits = in, .scratch = scratch, .V = 50257});
  rec.run();
  int32_t got_id = -1;
  vk::download(g.device, &got_id, id, 4);
  CHECK(got_id == 31337);
  CHECK(test::from_gpu(g, value, 1)[0] == 7.0f);
}

TEST_CASE("topk rejects bad arguments") {
  GPU_TEST(g);
  const uint32_t V = 50257;
  CHECK_THROWS_WITH_AS(model::gpu::topk_scratch_bytes(model::gpu::Ops(g.device), V, 0), doctest::Contains("k must be"),
                       vk::Error);
  CHECK_THROWS_WITH_AS(model::gpu::topk_scratch_bytes(model::gpu::Ops(g.device), 7, 8), doctest::Contains("exceeds V"),
                       vk::Error);
  CHECK_THROWS_WITH_AS(model::gpu::topk_scratch_bytes(model::gpu::Ops(g.device), V, model::gpu::kTopkMax + 1),
                       doctest::Contains("supported maximum"), vk::Error);
  CHECK(model::gpu::topk_scratch_bytes(model::gpu::Ops(g.device), 7, 7) == 0);  // one workgroup: no scratch
  const size_t need = model::gpu::topk_scratch_bytes(model::gpu::Ops(g.device), V, 40);
  CHECK(need > 0);
  vk::Arena arena(g.device, V * 4 + need + 4096, vk::MemoryKind::Device, "test topk errors");
  vk::BufferSpan in = arena.alloc(V * 4), ids = arena.alloc(160), values = arena.alloc(160);
  vk::BufferSpan scratch = arena.alloc(need);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(model::gpu::topk(g.kernels, rec,
                                        {.out_ids = ids,
                                         .out_values = values,
                                         .logits = in,
                                         .scratch = scratch.sub(0, need - 4),
                                         .V = V,
                                         .k = 40}),
                       doctest::Contains("scratch"), vk::Error);
  CHECK_THROWS_AS(model::gpu::topk(g.kernels, rec,
                                   {.out_ids = ids,
                                    .out_values = values,
                                    .logits = in,
                                    .scratch = scratch,
                                    .V = V,
                                    .k = 41}),
                  vk::Error);  // out [40]
  CHECK_THROWS_AS(
      model::gpu::topk(
          g.kernels, rec,
          {.out_ids = ids, .out_values = values, .logits = in, .scratch = scratch, .V = V, .k = 0}),
      vk::Error);
  CHECK_THROWS_AS(model::gpu::topk(g.kernels, rec,
                                   {.out_ids = ids,
                                    .out_values = values,
                                    .logits = in.sub(0, 400),
                                    .scratch = scratch,
                                    .V = V,
                                    .k = 40}),
                  vk::Error);
  model::gpu::topk(
      g.kernels, rec,
      {.out_ids = ids, .out_values = values, .logits = in, .scratch = scratch, .V = V, .k = 40});
  rec.end();
}
