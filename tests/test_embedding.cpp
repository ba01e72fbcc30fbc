// embedding: GPU against the CPU reference.
// Learned and no positions: exact (tolerance 0). Each output is one fp32 add of two stored values
// (fp16 weights widen to fp32 exactly, and the reference is given those same rounded values); the
// reference adds in double and rounds once, and a double sum of two floats rounded to float is
// the correctly rounded fp32 sum (53 >= 2 * 24 + 2 bits, so the double rounding is innocuous),
// which is what Vulkan requires of an fp32 add.
// Sinusoidal: see sinusoid_tolerance below.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "model/ops/cpu/common.h"
#include "model/ops/cpu/embedding.h"
#include "model/ops/gpu/embedding.h"
#include "model/ops/gpu/embedding_backward.h"
#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/matmul.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

using model::DType;
using model::PositionKind;

// A weight on the device, and the values the GPU sees (fp16-rounded for DType::F16).
struct HostWeight {
  model::gpu::Weight gpu;
  std::vector<float> seen;
};

HostWeight make_weight(const vk::Device& device, vk::Arena& arena, size_t n, DType dtype,
                       unsigned seed) {
  HostWeight w{{}, test::random_floats(n, seed)};
  w.gpu.dtype = dtype;
  if (dtype == DType::F16) {
    std::vector<uint16_t> half = model::gpu::to_half(w.seen.data(), n);
    for (float& x : w.seen) x = model::cpu::round_to_half(x);
    w.gpu.span = arena.alloc(half.size() * sizeof(uint16_t));
    vk::upload(device, w.gpu.span, half.data(), half.size() * sizeof(uint16_t));
  } else {
    w.gpu.span = test::to_gpu(device, arena, w.seen);
  }
  return w;
}

// T ids in [0, V) that include both ends of the vocabulary.
std::vector<int32_t> make_ids(size_t T, uint32_t V, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V) - 1);
  std::vector<int32_t> ids(T);
  for (int32_t& id : ids) id = dist(rng);
  ids[0] = static_cast<int32_t>(V) - 1;
  if (T > 1) ids[T - 1] = 0;
  return ids;
}

struct Case {
  uint32_t T, C, V, n_pos, pos_offset;
  DType wte_dtype, wpe_dtype;
  PositionKind position;
  bool interleaved = false;  // wte in matmul's Interleaved layout
  uint32_t n_types = 0;      // token types: a wtt [n_types, C] in wte's dtype, when not 0
  float scale = 1.0f;        // multiplies wte's row (Marian's sqrt(C))
};

// wte's values repacked into the Interleaved layout, in a new span.
model::gpu::Weight interleaved_wte(const vk::Device& device, vk::Arena& arena, const HostWeight& wte,
                            uint32_t C, uint32_t V) {
  std::vector<uint8_t> packed(model::gpu::interleaved_bytes(wte.gpu.dtype, C, V));
  if (wte.gpu.dtype == DType::F16) {
    std::vector<uint16_t> half = model::gpu::to_half(wte.seen.data(), wte.seen.size());
    model::gpu::interleave(packed.data(), half.data(), model::WeightLayout::NK, DType::F16, C, V);
  } else {
    model::gpu::interleave(packed.data(), wte.seen.data(), model::WeightLayout::NK, DType::F32, C, V);
  }
  model::gpu::Weight w{arena.alloc(packed.size()), wte.gpu.dtype};
  vk::upload(device, w.span, packed.data(), packed.size());
  return w;
}

// Runs one case on the kernels' device and returns the GPU output and the CPU reference.
std::pair<std::vector<float>, std::vector<float>> run_case(const model::gpu::Ops& kernels, const Case& c,
                                                           uint32_t* dispatches = nullptr) {
  const vk::Device& device = kernels.device();
  const size_t TC = size_t{c.T} * c.C;
  vk::Arena arena(device, (2 * size_t{c.V} + 64 + c.n_pos + c.T + c.n_types) * c.C * 4 + c.T * 8 + 16384,
                   vk::MemoryKind::Device, "test embedding");
  HostWeight wte = make_weight(device, arena, size_t{c.V} * c.C, c.wte_dtype, c.V + c.C);
  HostWeight wpe = make_weight(device, arena, size_t{c.n_pos} * c.C, c.wpe_dtype, c.n_pos + 7);
  std::vector<int32_t> ids = make_ids(c.T, c.V, c.T + c.C);
  vk::BufferSpan gids = arena.alloc(c.T * sizeof(int32_t)), out = arena.alloc(TC * 4);
  model::gpu::upload_ids(device, gids, ids, c.V);
  HostWeight wtt;
  std::vector<int32_t> types;
  vk::BufferSpan gtypes;
  if (c.n_types) {
    wtt = make_weight(device, arena, size_t{c.n_types} * c.C, c.wte_dtype, c.n_types + 11);
    types = make_ids(c.T, c.n_types, c.T + 3);
    gtypes = arena.alloc(c.T * sizeof(int32_t));
    model::gpu::upload_ids(device, gtypes, types, c.n_types);
  }

  vk::Recorder rec(device);
  rec.begin();
  const model::gpu::Weight wte_gpu =
      c.interleaved ? interleaved_wte(device, arena, wte, c.C, c.V) : wte.gpu;
  model::gpu::embedding(kernels, rec,
                        {.out = out,
                         .ids = gids,
                         .wte = wte_gpu,
                         .wpe = &wpe.gpu,
                         .T = c.T,
                         .C = c.C,
                         .V = c.V,
                         .n_pos = c.n_pos,
                         .pos_offset = c.pos_offset,
                         .position = c.position,
                         .wte_interleaved = c.interleaved,
                         .types = c.n_types ? &gtypes : nullptr,
                         .wtt = c.n_types ? &wtt.gpu : nullptr,
                         .n_types = c.n_types,
                         .scale = c.scale});
  rec.run();
  if (dispatches) *dispatches = rec.stats().dispatches;

  std::vector<float> got = test::from_gpu(device, out, TC), ref(TC);
  model::cpu::embedding(ref.data(), ids.data(), wte.seen.data(), wpe.seen.data(), c.T, c.C, c.V, c.n_pos,
                 c.pos_offset, c.position, c.n_types ? types.data() : nullptr,
                 c.n_types ? wtt.seen.data() : nullptr, c.n_types, c.scale);
  return {got, ref};
}

}  // namespace

TEST_CASE("embedding with learned or no positions is exact") {
  GPU_TEST(g);
  // One token, a long prompt with small C, GPT-2 XL's width, odd C (fp16 rows straddle words).
  const Case shapes[] = {
      {1, 8, 7, 4, 3, DType::F32, DType::F32, PositionKind::Learned},
      {1024, 12, 50, 1024, 0, DType::F32, DType::F32, PositionKind::Learned},
      {3, 1600, 100, 16, 5, DType::F32, DType::F32, PositionKind::Learned},
      {37, 33, 61, 40, 3, DType::F32, DType::F32, PositionKind::Learned},
  };
  for (const Case& shape : shapes) {
    for (DType wte_dtype : {DType::F32, DType::F16}) {
      for (DType wpe_dtype : {DType::F32, DType::F16}) {
        for (PositionKind position : {PositionKind::Learned, PositionKind::None}) {
          Case c = shape;
          c.wte_dtype = wte_dtype;
          c.wpe_dtype = wpe_dtype;
          c.position = position;
          CAPTURE(c.T);
          CAPTURE(c.C);
          CAPTURE(c.pos_offset);
          CAPTURE(static_cast<int>(wte_dtype));
          CAPTURE(static_cast<int>(wpe_dtype));
          CAPTURE(static_cast<int>(position));
          auto [got, ref] = run_case(g.kernels, c);
          CHECK(test::close("embedding", got, ref, {0, 0}));
        }
      }
    }
  }
}

// Token types (BERT's segments): two fp32 adds, (wte + wtt) + wpe, each correctly rounded,
// against the double sum rounded once: within 2 ulp of a sum below 3 in magnitude, 1e-6 absolute.
TEST_CASE("embedding adds token types") {
  GPU_TEST(g);
  // BERT-base's rows (C = 768) over 512 tokens and its 2 types; odd C in fp16; a third type.
  const Case shapes[] = {
      {512, 768, 300, 512, 0, DType::F32, DType::F32, PositionKind::Learned, false, 2},
      {37, 33, 61, 40, 0, DType::F16, DType::F16, PositionKind::Learned, false, 3},
      {9, 32, 20, 16, 0, DType::F32, DType::F32, PositionKind::None, false, 2},
  };
  for (const Case& c : shapes) {
    CAPTURE(c.T);
    CAPTURE(c.C);
    auto [got, ref] = run_case(g.kernels, c);
    CHECK(test::close("embedding with types", got, ref, {1e-6, 0}));
  }
}

// Sinusoidal tolerance: 1e-6 + pos * 2^-22 absolute (2.4e-4 at pos 1023). The shader forms and
// reduces the angle without rounding it (see embedding.comp), so the error is the frequency's:
// its exp2 argument -2i * (log2(10000) / C) is rounded twice (relative 2^-23), which moves freq by
// ln2 * |x| * 2^-23 relative, and freq itself rounds (2^-24, plus ~1 ulp of the polynomial); times
// the angle pos * freq, and with |x| 2^-|x| <= 0.53, that is under 2 * 2^-24 * pos radians. We
// allow twice that; the 1e-6 covers sin/cos on [-pi, pi] (Vulkan promises only 2^-11 there; real
// drivers do ~1e-7) and the final fp32 rounding. Measured on lavapipe: 1.4e-5 (pos < 1024, C = 64),
// 4.1e-5 (pos 1023, C = 1600), 2.2e-4 (pos 8191), matching a host emulation with a correctly
// rounded exp2; the driver's own exp2 (3 to 4 ulp on lavapipe) gave 1.4e-4 at pos 1023.
TEST_CASE("embedding with sinusoidal positions") {
  GPU_TEST(g);
  const Case shapes[] = {
      {1, 8, 7, 1, 0, DType::F32, DType::F32, PositionKind::Sinusoidal},
      {1024, 64, 50, 1, 0, DType::F32, DType::F32, PositionKind::Sinusoidal},
      {3, 1600, 100, 1, 1021, DType::F16, DType::F32, PositionKind::Sinusoidal},
      {16, 30, 20, 1, 8176, DType::F32, DType::F32, PositionKind::Sinusoidal},
      // Marian's layout: opus-mt's C = 512 over its 512 positions; odd C (ceil(C/2) sines).
      {512, 512, 60, 1, 0, DType::F32, DType::F32, PositionKind::SinusoidalHalves},
      {5, 33, 20, 1, 1019, DType::F16, DType::F32, PositionKind::SinusoidalHalves},
  };
  for (const Case& c : shapes) {
    CAPTURE(c.T);
    CAPTURE(c.C);
    CAPTURE(c.pos_offset);
    CAPTURE(static_cast<int>(c.position));
    auto [got, ref] = run_case(g.kernels, c);
    const double last = c.pos_offset + c.T - 1;
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++)
      worst = std::max(worst, std::fabs(double{got[i]} - double{ref[i]}));
    MESSAGE("sinusoid up to pos " << last << ": max |error| " << worst);
    CHECK(test::close("embedding sinusoid", got, ref, {1e-6 + last * std::ldexp(1.0, -22), 0}));
  }
}

// Marian scales the token's row by sqrt(C) before the position is added: one more fp32 product,
// correctly rounded, so 2^-23 relative on top of the sinusoid's bound above.
TEST_CASE("embedding scales the token's row") {
  GPU_TEST(g);
  Case c{64, 512, 60, 1, 0, DType::F16, DType::F32, PositionKind::SinusoidalHalves};
  c.scale = std::sqrt(512.0f);
  auto [got, ref] = run_case(g.kernels, c);
  CHECK(test::close("embedding scaled", got, ref, {1e-6 + 63 * std::ldexp(1.0, -22), 0x1p-23}));
  c.position = PositionKind::None;  // the product alone: exact
  auto [alone, alone_ref] = run_case(g.kernels, c);
  CHECK(test::close("embedding scaled, no positions", alone, alone_ref, {0, 0}));
}

TEST_CASE("embedding splits a vocabulary larger than maxStorageBufferRange") {
  GPU_TEST(g);
  // wte below is 9.6 KB (fp32) or 5 KB (fp16).
  test::LoweredGpu small(g, {.max_storage_buffer_range = 4096});
  // C = 24: fp32 rows of 96 bytes; C = 25 with fp16: 50-byte rows, so blocks start mid-word and
  // mid-alignment and the shader must skip into the aligned binding.
  for (auto [C, dtype] : {std::pair{24u, DType::F32}, std::pair{25u, DType::F16}}) {
    CAPTURE(C);
    const Case c{40, C, 100, 64, 20, dtype, DType::F32, PositionKind::Learned};
    uint32_t dispatches = 0;
    auto [got, ref] = run_case(small.kernels, c, &dispatches);
    CHECK(dispatches >= 2);                                   // really split
    CHECK(test::close("embedding split", got, ref, {0, 0}));  // exact, as above
  }
}

TEST_CASE("embedding reads wte in matmul's Interleaved layout, whole or in blocks") {
  GPU_TEST(g);
  // V = 300: four whole blocks of 64 rows and one of 44; ids include both ends. With an 8 KiB
  // range, fp32 rows of 96 bytes and fp16 rows of 64 bytes bind one block at a time.
  static_assert(push::MATMUL_BLOCK_ROWS == 64, "the sizes below assume 64-row blocks");
  test::LoweredGpu small(g, {.max_storage_buffer_range = 8192});
  for (auto [C, dtype] : {std::pair{24u, DType::F32}, std::pair{32u, DType::F16}}) {
    CAPTURE(C);
    const Case c{30, C, 300, 64, 20, dtype, DType::F32, PositionKind::Learned, true};
    auto [got, ref] = run_case(g.kernels, c);
    CHECK(test::close("embedding interleaved", got, ref, {0, 0}));
    uint32_t dispatches = 0;
    auto [got_split, ref_split] = run_case(small.kernels, c, &dispatches);
    CHECK(dispatches >= 3);
    CHECK(test::close("embedding interleaved split", got_split, ref_split, {0, 0}));
  }
}

TEST_CASE("upload_ids rejects ids outside the vocabulary; the shader clamps a bad buffer") {
  GPU_TEST(g);
  const uint32_t C = 8, V = 10;
  vk::Arena arena(g.device, 4096, vk::MemoryKind::Device, "test embedding ids");
  vk::BufferSpan ids = arena.alloc(16), out = arena.alloc(4 * C * 4);
  std::vector<int32_t> bad_high = {0, 9, 10, 3}, bad_low = {-1, 2};
  CHECK_THROWS_WITH_AS(model::gpu::upload_ids(g.device, ids, bad_high, V),
                       doctest::Contains("token id 10 at position 2"), vk::Error);
  CHECK_THROWS_WITH_AS(model::gpu::upload_ids(g.device, ids, bad_low, V),
                       doctest::Contains("token id -1 at position 0"), vk::Error);
  std::vector<int32_t> five(5, 0);
  CHECK_THROWS_AS(model::gpu::upload_ids(g.device, ids, five, V), vk::Error);  // dst too small
  // Targets: -100 (ignore_target) is padding there, and only there.
  const std::vector<int32_t> padded = {3, model::ignore_target, 9, model::ignore_target};
  CHECK_THROWS_WITH_AS(model::gpu::upload_ids(g.device, ids, padded, V),
                       doctest::Contains("token id -100 at position 1"), vk::Error);
  model::gpu::upload_ids(g.device, ids, padded, V, true);
  std::vector<int32_t> back(4);
  vk::download(g.device, back.data(), ids, 16);
  CHECK(back == padded);
  CHECK_THROWS_WITH_AS(
      model::gpu::upload_ids(g.device, ids, bad_low, V, true),
      doctest::Contains(
          "target -1 at position 0 is outside the vocabulary [0, 10) and not -100 (padding)"),
      vk::Error);

  // Bypassing upload_ids: the shader reads the nearest valid row instead of out of bounds.
  HostWeight wte = make_weight(g.device, arena, V * C, DType::F32, 3);
  std::vector<int32_t> raw = {-5, 10, 1 << 30, 4};
  vk::upload(g.device, ids, raw.data(), 16);
  vk::Recorder rec(g.device);
  rec.begin();
  model::gpu::embedding(g.kernels, rec,
                        {.out = out,
                         .ids = ids,
                         .wte = wte.gpu,
                         .T = 4,
                         .C = C,
                         .V = V,
                         .n_pos = 0,
                         .pos_offset = 0,
                         .position = PositionKind::None});
  rec.run();
  std::vector<int32_t> clamped = {0, 9, 9, 4};
  std::vector<float> ref(4 * C);
  model::cpu::embedding(ref.data(), clamped.data(), wte.seen.data(), nullptr, 4, C, V, 0, 0,
                 PositionKind::None);
  CHECK(test::close("embedding clamped", test::from_gpu(g, out, 4 * C), ref, {0, 0}));
}

TEST_CASE("embedding rejects bad arguments") {
  GPU_TEST(g);
  const uint32_t C = 8, V = 10, n_pos = 6;
  vk::Arena arena(g.device, 8192, vk::MemoryKind::Device, "test embedding errors");
  HostWeight wte = make_weight(g.device, arena, V * C, DType::F32, 1);
  HostWeight wpe = make_weight(g.device, arena, n_pos * C, DType::F16, 2);
  vk::BufferSpan ids = arena.alloc(16), out = arena.alloc(4 * C * 4);
  vk::Recorder rec(g.device);
  rec.begin();
  auto run = [&](uint32_t T, uint32_t pos_offset, const model::gpu::Weight* p, PositionKind kind,
                 uint32_t vocab = 10) {
    model::gpu::embedding(g.kernels, rec,
                          {.out = out,
                           .ids = ids,
                           .wte = wte.gpu,
                           .wpe = p,
                           .T = T,
                           .C = C,
                           .V = vocab,
                           .n_pos = n_pos,
                           .pos_offset = pos_offset,
                           .position = kind});
  };
  CHECK_THROWS_WITH_AS(run(3, 4, &wpe.gpu, PositionKind::Learned),
                       doctest::Contains("exceed the 6 rows"), vk::Error);
  CHECK_THROWS_WITH_AS(run(3, 0, nullptr, PositionKind::Learned), doctest::Contains("wpe"),
                       vk::Error);
  CHECK_THROWS_AS(run(5, 0, nullptr, PositionKind::None), vk::Error);  // ids and out hold 4 tokens
  CHECK_THROWS_AS(run(0, 0, nullptr, PositionKind::None), vk::Error);
  CHECK_THROWS_WITH_AS(run(1, 0, nullptr, PositionKind::None, 2 * V), doctest::Contains("wte"),
                       vk::Error);  // wte holds V rows only
  model::gpu::Weight short_wpe{wpe.gpu.span.sub(0, 16), DType::F16};
  CHECK_THROWS_AS(run(1, 0, &short_wpe, PositionKind::Learned), vk::Error);
  run(3, 3, &wpe.gpu, PositionKind::Learned);  // the last rows of wpe are fine
  rec.end();
}

// embedding_backward: GPU (fp32 adds in token order) against model::cpu::embedding_backward
// (each row's sum in double, added once). Tolerance |d| <= 1e-6 + 1e-6 |ref|: a row's sum of k
// repeats rounds k times in fp32 (k <= 5 here), ~k ulp of values below 4.
namespace {

void check_backward(const vk::Device& device, const model::gpu::Ops& kernels, uint32_t B,
                    uint32_t T, uint32_t C, uint32_t V, bool learned, unsigned seed,
                    uint32_t dispatches, float scale = 1.0f) {
  const uint32_t n = B * T;
  std::vector<int32_t> ids;
  for (float u : test::random_floats(n, seed, 0.0f, 1.0f))
    ids.push_back(std::min<int32_t>(static_cast<int32_t>(u * 0.5f * static_cast<float>(V)), int32_t(V) - 1));
  ids[0] = ids[n - 1] = int32_t(V) - 1;  // the last row, and a repeat
  const std::vector<float> dout = test::random_floats(size_t{n} * C, seed + 1);
  // Gradients already there (a tied head's): the op adds to them.
  std::vector<float> dwte = test::random_floats(size_t{V} * C, seed + 2),
                     dwpe = test::random_floats(size_t{T} * C, seed + 3);
  vk::Arena arena(device, (dwte.size() + dwpe.size() + dout.size() + n) * 4 + 65536 * 4,
                  vk::MemoryKind::Device, "test embedding_backward");
  const vk::BufferSpan gwte = test::to_gpu(device, arena, dwte), gwpe = test::to_gpu(device, arena, dwpe),
                       gout = test::to_gpu(device, arena, dout), gids = arena.alloc(size_t{n} * 4);
  model::gpu::upload_ids(device, gids, ids, V);
  vk::Recorder rec(device);
  rec.begin();
  model::gpu::embedding_backward(kernels, rec,
                                 {.dwte = gwte,
                                  .dwpe = learned ? &gwpe : nullptr,
                                  .dout = gout,
                                  .ids = gids,
                                  .n = n,
                                  .T = T,
                                  .C = C,
                                  .V = V,
                                  .scale = scale});
  rec.run();
  CHECK(rec.stats().dispatches == dispatches);
  model::cpu::embedding_backward(dwte.data(), learned ? dwpe.data() : nullptr, dout.data(),
                                 ids.data(), B, T, C, scale);
  const std::string what = "embedding_backward B=" + std::to_string(B) + " T=" + std::to_string(T) +
                           " C=" + std::to_string(C) + " V=" + std::to_string(V);
  CHECK(test::close(what + ": dwte", test::from_gpu(device, gwte, dwte.size()), dwte, {1e-6, 1e-6}));
  CHECK(test::close(what + ": dwpe", test::from_gpu(device, gwpe, dwpe.size()), dwpe, {1e-6, 1e-6}));
}

}  // namespace

TEST_CASE("embedding_backward matches the CPU reference") {
  GPU_TEST(g);
  check_backward(g.device, g.kernels, 3, 7, 33, 10, true, 500, 1);   // many repeats of 5 ids
  check_backward(g.device, g.kernels, 2, 16, 64, 300, false, 510, 1);
  check_backward(g.device, g.kernels, 2, 9, 32, 40, false, 515, 1, 5.656854f);  // Marian's sqrt(C)
  // dwte in blocks of rows past a lowered maxStorageBufferRange: 4096 bytes hold 15 rows of 64
  // (and the alignment slack), so 300 rows take 20 dispatches.
  test::LoweredGpu small(g, {.max_storage_buffer_range = 4096});
  check_backward(small.device, small.kernels, 2, 8, 64, 300, true, 520, 20);
}

// period: B sequences of T tokens in one call, positions restarting at each (training), against
// the reference per sequence. Learned: exact; sinusoidal: the tolerance above at pos < 8.
TEST_CASE("embedding of several sequences in one call (period)") {
  GPU_TEST(g);
  const uint32_t B = 3, T = 5, C = 12, V = 9, n_pos = 8;
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 8, 0, 8, 0, 6, 7, 7, 7, 2, 1};
  const std::vector<float> wte = test::random_floats(size_t{V} * C, 600),
                           wpe = test::random_floats(size_t{n_pos} * C, 601);
  vk::Arena arena(g.device, 65536, vk::MemoryKind::Device, "test embedding period");
  const model::gpu::Weight gwte{test::to_gpu(g.device, arena, wte), DType::F32},
                           gwpe{test::to_gpu(g.device, arena, wpe), DType::F32};
  const vk::BufferSpan gids = arena.alloc(ids.size() * 4), out = arena.alloc(size_t{B} * T * C * 4);
  model::gpu::upload_ids(g.device, gids, ids, V);
  for (PositionKind position : {PositionKind::Learned, PositionKind::Sinusoidal}) {
    vk::Recorder rec(g.device);
    rec.begin();
    model::gpu::embedding(g.kernels, rec,
                          {.out = out,
                           .ids = gids,
                           .wte = gwte,
                           .wpe = &gwpe,
                           .T = B * T,
                           .C = C,
                           .V = V,
                           .n_pos = n_pos,
                           .pos_offset = 0,
                           .position = position,
                           .wte_interleaved = false,
                           .period = T});
    rec.run();
    CHECK(rec.stats().dispatches == 1);
    std::vector<float> ref(size_t{B} * T * C);
    for (uint32_t b = 0; b < B; b++)
      model::cpu::embedding(ref.data() + size_t{b} * T * C, ids.data() + b * T, wte.data(), wpe.data(),
                            T, C, V, n_pos, 0, position);
    CHECK(test::close("embedding period", test::from_gpu(g.device, out, ref.size()), ref,
                      position == PositionKind::Learned ? test::Tolerance{0, 0} : test::Tolerance{2e-6, 0}));
  }
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(model::gpu::embedding(g.kernels, rec,
                                             {.out = out,
                                              .ids = gids,
                                              .wte = gwte,
                                              .wpe = &gwpe,
                                              .T = 14,
                                              .C = C,
                                              .V = V,
                                              .n_pos = n_pos,
                                              .pos_offset = 0,
                                              .position = PositionKind::Learned,
                                              .wte_interleaved = false,
                                              .period = T}),
                       doctest::Contains("not whole sequences"), vk::Error);
  rec.end();
}

// embedding_batch: each row its own sequence at the position the batch table gives it (serving
// several sequences at once), against the reference per row, fp32 or fp16 weights, wte plain or
// interleaved. Learned and none: exact; sinusoidal: the tolerance above at the largest position.
// The table is written after the recording and again between two submissions of it, as a
// replayed decode step does.
TEST_CASE("embedding of a batch, each row at its table's position") {
  GPU_TEST(g);
  const uint32_t B = 5, C = 16, V = 9, n_pos = 40;
  const std::vector<int32_t> ids = {8, 0, 3, 3, 5};
  vk::Arena arena(g.device, 65536, vk::MemoryKind::Device, "test embedding batch");
  const vk::BufferSpan gids = arena.alloc(ids.size() * 4), out = arena.alloc(size_t{B} * C * 4);
  const vk::BufferSpan table = arena.alloc(size_t{B} * 8);
  model::gpu::upload_ids(g.device, gids, ids, V);
  // {position, cache texel} per row; the texels are what kv_store reads and must not matter.
  const std::vector<std::vector<uint32_t>> steps = {{0, 7, 39, 1, 12, 99, 5, 3, 20, 0},
                                                    {1, 7, 3, 1, 13, 99, 6, 3, 38, 0}};
  for (DType dtype : {DType::F32, DType::F16})
    for (bool interleaved : {false, true})
      for (PositionKind position :
           {PositionKind::Learned, PositionKind::None, PositionKind::Sinusoidal}) {
        CAPTURE(static_cast<int>(dtype));
        CAPTURE(interleaved);
        CAPTURE(static_cast<int>(position));
        const HostWeight wte = make_weight(g.device, arena, size_t{V} * C, dtype, 700);
        const HostWeight wpe = make_weight(g.device, arena, size_t{n_pos} * C, dtype, 701);
        const model::gpu::Weight wte_gpu =
            interleaved ? interleaved_wte(g.device, arena, wte, C, V) : wte.gpu;
        vk::Recorder rec(g.device);
        rec.begin();
        model::gpu::embedding_batch(g.kernels, rec,
                                    {.out = out,
                                     .ids = gids,
                                     .rows = table,
                                     .wte = wte_gpu,
                                     .wpe = &wpe.gpu,
                                     .T = B,
                                     .C = C,
                                     .V = V,
                                     .n_pos = n_pos,
                                     .position = position,
                                     .wte_interleaved = interleaved});
        rec.end();
        CHECK(rec.stats().dispatches == 1);
        for (const std::vector<uint32_t>& at : steps) {
          vk::upload(g.device, table, at.data(), at.size() * 4);
          rec.submit();
          rec.wait();
          std::vector<float> ref(size_t{B} * C);
          for (uint32_t b = 0; b < B; b++)
            model::cpu::embedding(ref.data() + size_t{b} * C, &ids[b], wte.seen.data(),
                                  wpe.seen.data(), 1, C, V, n_pos, at[2 * b], position);
          CHECK(test::close("embedding batch", test::from_gpu(g.device, out, ref.size()), ref,
                            position == PositionKind::Sinusoidal
                                ? test::Tolerance{1e-6 + 39 * std::ldexp(1.0, -22), 0}
                                : test::Tolerance{0, 0}));
        }
      }
  const HostWeight wte = make_weight(g.device, arena, size_t{V} * C, DType::F32, 702);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(model::gpu::embedding_batch(g.kernels, rec,
                                                   {.out = out,
                                                    .ids = gids,
                                                    .rows = table.sub(0, 8 * (B - 1)),
                                                    .wte = wte.gpu,
                                                    .wpe = &wte.gpu,
                                                    .T = B,
                                                    .C = C,
                                                    .V = V,
                                                    .n_pos = n_pos,
                                                    .position = PositionKind::None,
                                                    .wte_interleaved = false}),
                       doctest::Contains("rows"), vk::Error);
  rec.end();
}
