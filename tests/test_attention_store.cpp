// attention_store: kv_store and attention of the same new tokens in one call (one dispatch with
// the texel kernel), over sequences of calls, against model::cpu::kv_store + model::cpu::attention;
// and attention_store_batch, each row against its decode step alone (bit for bit) and the
// reference.
//
// Tolerance: test_attention.cpp's, atol 1e-6 + rtol 1e-5, for the same reasons (the same
// kernels); the cache copies are exact.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/ops/cpu/attention.h"
#include "model/ops/cpu/common.h"
#include "model/ops/cpu/kv_store.h"
#include "model/ops/gpu/attention.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"
#include "vk/sizes.h"

namespace {

constexpr test::Tolerance kTol{1e-6, 1e-5};

// attention_store over a sequence of calls (prefill, chunks, decode steps) in one recording, so
// each call reads the rows the earlier ones wrote: out after every call, and the caches at the
// end, against model::cpu::kv_store + model::cpu::attention. The copies are exact; rows past the last written
// keep their initial values. Calls up to fused_to keys are expected to be one dispatch (the
// texel kernel with kv_store fused in), later ones two (kv_store, attention); the split kernel
// (kv_store fused in too) is always two (attention_split, attention_merge). With `tap`, every
// call also writes its softmax weights (AttentionOptions::probs), checked against the reference's.
// With an fp16 cache the reference's kv_store rounds as the GPU's does (to nearest even), so
// the caches still match exactly.
void check_store(const model::gpu::Ops& kernels, model::gpu::AttentionKernel kernel, uint32_t C, uint32_t H,
                 uint32_t n_ctx, std::initializer_list<uint32_t> steps, bool causal, unsigned seed,
                 uint32_t fused_to, bool tap = false, model::DType cache = model::DType::F32) {
  const vk::Device& device = kernels.device();
  const bool f16 = cache == model::DType::F16;
  std::vector<float> k_ref = test::random_floats(size_t{n_ctx} * C, seed),
                     v_ref = test::random_floats(size_t{n_ctx} * C, seed + 1);
  if (f16)  // the initial rows as the fp16 cache holds them
    for (std::vector<float>* r : {&k_ref, &v_ref})
      for (float& x : *r) x = model::cpu::round_to_half(x);
  vk::Arena arena(device,
                  (size_t{n_ctx} * 6 * C + 4 * k_ref.size() + size_t{H} * n_ctx * n_ctx) *
                          sizeof(float) + 65536,
                   vk::MemoryKind::Device, "test attention_store");
  const vk::BufferSpan k = test::to_gpu(device, arena, k_ref, cache),
                       v = test::to_gpu(device, arena, v_ref, cache);
  std::vector<std::vector<float>> qkv, ref, probs_ref;
  std::vector<vk::BufferSpan> qkv_gpu, out_gpu, probs_gpu;
  vk::Recorder rec(device, tap);  // with the tap, timestamps name the shaders that ran
  rec.begin();
  model::gpu::AttentionOptions options{{causal, 0}, kernel};
  options.cache = cache;
  const bool split = kernel == model::gpu::AttentionKernel::Split;
  const bool tiled = kernel == model::gpu::AttentionKernel::Tiled;
  vk::BufferSpan scratch;
  if (split || tiled) {  // the tiled kernel splits the keys past 64 (then attention_merge)
    scratch = arena.alloc(model::gpu::attention_split_scratch_bytes(std::max(steps), n_ctx, C, H));
    options.scratch = &scratch;
  }
  uint32_t pos = 0;
  for (uint32_t T : steps) {
    qkv.push_back(test::random_floats(size_t{T} * 3 * C, seed += 10));
    qkv_gpu.push_back(test::to_gpu(device, arena, qkv.back()));
    out_gpu.push_back(arena.alloc(size_t{T} * C * sizeof(float)));
    probs_ref.emplace_back(tap ? size_t{H} * T * (pos + T) : 0);
    if (tap) probs_gpu.push_back(arena.alloc(probs_ref.back().size() * sizeof(float)));
    options.probs = tap ? &probs_gpu.back() : nullptr;
    const uint32_t before = rec.stats().dispatches;
    model::gpu::attention_store(kernels, rec,
                                {.out = out_gpu.back(),
                                 .k_cache = k,
                                 .v_cache = v,
                                 .qkv = qkv_gpu.back(),
                                 .T = T,
                                 .pos = pos,
                                 .C = C,
                                 .H = H,
                                 .options = options});
    const uint32_t expected = tiled ? (pos + T > 64 ? 3u : 2u)
                              : !split && pos + T <= fused_to ? 1u
                                                              : 2u;
    CHECK(rec.stats().dispatches - before == expected);
    model::cpu::kv_store(k_ref.data(), v_ref.data(), qkv.back().data(), T, C, pos, cache);
    pos += T;
  }
  rec.run();
  const std::vector<float> k_got = test::from_gpu(device, k, k_ref.size(), cache),
                           v_got = test::from_gpu(device, v, v_ref.size(), cache);
  pos = 0;
  for (size_t i = 0; i < qkv.size(); i++) {
    const auto T = static_cast<uint32_t>(qkv[i].size() / (3 * C));
    ref.emplace_back(size_t{T} * C);
    model::cpu::attention(ref.back().data(), qkv[i].data(), 3 * size_t{C},
                          k_ref.data(), v_ref.data(), T, pos + T, C, H, options,
                          tap ? probs_ref[i].data() : nullptr);
    pos += T;
  }
  if (tap && device.caps().timestamps)
    for (const vk::DispatchTime& t : rec.timings())
      CHECK_MESSAGE((kernel == model::gpu::AttentionKernel::Texel
                         ? t.shader == "attention_texel_store_probs"
                         : t.shader == "kv_store" || t.shader == "attention_probs"),
                    t.shader);
  const std::string what = std::string(kernel == model::gpu::AttentionKernel::Texel      ? "texel"
                                       : kernel == model::gpu::AttentionKernel::Portable ? "portable"
                                       : kernel == model::gpu::AttentionKernel::Tiled    ? "tiled"
                                       : split                                           ? "split"
                                                                                  : "auto") +
                           " C=" + std::to_string(C) + " H=" + std::to_string(H) +
                           (causal ? " causal" : " bidirectional") + (f16 ? " fp16 cache" : "");
  pos = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    const uint32_t T = static_cast<uint32_t>(ref[i].size() / C);
    CHECK(test::close(what + ": step of T=" + std::to_string(T) + " at pos " + std::to_string(pos),
                      test::from_gpu(device, out_gpu[i], ref[i].size()), ref[i], kTol));
    if (tap)
      CHECK(test::close(what + ": probabilities of T=" + std::to_string(T) + " at pos " +
                            std::to_string(pos),
                        test::from_gpu(device, probs_gpu[i], probs_ref[i].size()), probs_ref[i],
                        kTol));
    pos += T;
  }
  CHECK(test::close(what + ": k_cache", k_got, k_ref, {0, 0}));
  CHECK(test::close(what + ": v_cache", v_got, v_ref, {0, 0}));
}

}  // namespace

TEST_CASE("attention_store: kv_store and attention in one call, step after step") {
  GPU_TEST(g);
  // The split kernel with the store fused: a prompt of 37 writes new keys in its one block from
  // its last query's workgroups, a decode step one key; 64 + 1 keys cross into a second block.
  check_store(g.kernels, model::gpu::AttentionKernel::Split, 96, 3, 80, {37, 5, 1, 1, 8, 14, 1},
              true, 900, 0);
  check_store(g.kernels, model::gpu::AttentionKernel::Split, 32, 4, 40, {17, 2}, false, 950, 0);
  // The tiled kernel after kv_store: a prompt of 37 (three blocks of 16, the last with 5), a
  // chunk of 60 after 37 cached keys, a decode step, a chunk of 40 (past 64 keys, split into
  // ranges and merged); an encoder.
  check_store(g.kernels, model::gpu::AttentionKernel::Tiled, 96, 3, 160, {37, 60, 1, 40}, true,
              960, 0);
  check_store(g.kernels, model::gpu::AttentionKernel::Tiled, 32, 4, 40, {17, 2}, false, 970, 0);
  for (model::gpu::AttentionKernel kernel :
       {model::gpu::AttentionKernel::Portable, model::gpu::AttentionKernel::Texel}) {
    if (kernel == model::gpu::AttentionKernel::Texel && !g.device.caps().storage_texel_buffers) continue;
    const uint32_t fused_to = kernel == model::gpu::AttentionKernel::Texel ? UINT32_MAX : 0;
    // A prefill of 37 (4 queries per invocation, the last with 1), a chunk of 5 (split keys, new
    // keys not a multiple of the 8 lanes from an odd start), decode steps; 12 rows stay unwritten.
    check_store(g.kernels, kernel, 96, 3, 64, {37, 5, 1, 1, 8}, true, 1000, fused_to);
    // One head of 64; a first chunk of 3, then one of 20 (4 queries each) after 3 cached keys.
    check_store(g.kernels, kernel, 64, 1, 30, {3, 20, 1}, true, 1100, fused_to);
    // An encoder over the whole cache; D = 8.
    check_store(g.kernels, kernel, 32, 4, 40, {17, 2}, false, 1200, fused_to);
    // The same kinds of steps with the attention tap: a prefill, split keys, a decode step;
    // then an encoder.
    check_store(g.kernels, kernel, 96, 3, 64, {37, 5, 1}, true, 1300, fused_to, true);
    check_store(g.kernels, kernel, 32, 4, 40, {17, 2}, false, 1400, fused_to, true);
  }
}

TEST_CASE("attention_store with an fp16 cache: the storage-buffer kernels, step after step") {
  GPU_TEST(g);
  const model::DType f16 = model::DType::F16;
  // The split kernel's fused store in fp16: 8 halves per 16 bytes, so a head of D = 4 (C = 24)
  // shares its 16 bytes with the next head's (the .xy and .zw halves, written by different
  // workgroups); 64 + 1 keys cross into a second block.
  check_store(g.kernels, model::gpu::AttentionKernel::Split, 96, 3, 80, {37, 5, 1, 1, 8, 14, 1},
              true, 2900, 0, false, f16);
  check_store(g.kernels, model::gpu::AttentionKernel::Split, 24, 6, 70, {33, 31, 1, 1}, true,
              2950, 0, false, f16);
  check_store(g.kernels, model::gpu::AttentionKernel::Split, 32, 4, 40, {17, 2}, false, 2970, 0,
              false, f16);
  // The portable kernel after kv_store: D = 32, then an odd D = 5 whose rows start mid-word.
  check_store(g.kernels, model::gpu::AttentionKernel::Portable, 96, 3, 64, {37, 5, 1, 1, 8}, true,
              3000, 0, false, f16);
  check_store(g.kernels, model::gpu::AttentionKernel::Portable, 10, 2, 30, {3, 20, 1}, true,
              3100, 0, false, f16);
  check_store(g.kernels, model::gpu::AttentionKernel::Portable, 96, 3, 64, {37, 5, 1}, true, 3300,
              0, true, f16);  // with the tap
  // The tiled kernel after kv_store: 8 halves per 16-byte load, so D = 32 and 8 (C = 32) are
  // one load per 4 texels and per texel pair of the tile; 33 + 31 keys cross tiles of 32.
  check_store(g.kernels, model::gpu::AttentionKernel::Tiled, 96, 3, 80, {37, 5, 20, 1}, true,
              3200, 0, false, f16);
  check_store(g.kernels, model::gpu::AttentionKernel::Tiled, 32, 4, 70, {33, 31, 1}, false,
              3250, 0, false, f16);
  // GPT-2's D = 64 (32-key tiles) and D = 128 (16-key tiles, 4 texels per lane), past 64 keys
  // in ranges.
  check_store(g.kernels, model::gpu::AttentionKernel::Tiled, 128, 2, 80, {40, 33, 1}, true,
              3260, 0, false, f16);
  check_store(g.kernels, model::gpu::AttentionKernel::Tiled, 256, 2, 100, {37, 40, 1}, true,
              3270, 0, false, f16);
  // Auto: never the texel kernel (it reads only fp32 caches).
  check_store(g.kernels, model::gpu::AttentionKernel::Auto, 64, 2, 40, {20, 1}, true, 3400, 0,
              false, f16);
}

TEST_CASE("attention_store past maxTexelBufferElements: kv_store and attention again") {
  GPU_TEST(g);
  // 4096 texels are 256 cache rows of C = 64 (or 85 new tokens' qkv): on a CPU device the calls
  // up to L = 256 keys are fused; from there on kv_store and the portable attention take over,
  // reading what the fused calls wrote.
  test::LoweredGpu small(g, {.max_texel_buffer_elements = 4096});
  const vk::DeviceCaps& caps = small.device.caps();
  const bool texel = model::gpu::Ops(small.device).policy().texel_attention && caps.storage_texel_buffers;
  check_store(small.kernels, model::gpu::AttentionKernel::Auto, 64, 2, 300, {80, 80, 80, 20, 1}, true,
              1300, texel ? 256 : 0);
}

TEST_CASE("attention_store rejects rows past the cache") {
  GPU_TEST(g);
  vk::Arena arena(g.device, 64 * 1024, vk::MemoryKind::Device, "test attention_store errors");
  vk::BufferSpan out = arena.alloc(4 * 64 * 4), qkv = arena.alloc(4 * 192 * 4),
                  k = arena.alloc(8 * 64 * 4), v = arena.alloc(8 * 64 * 4);
  vk::Recorder rec(g.device);
  rec.begin();
  CHECK_THROWS_WITH_AS(
      model::gpu::attention_store(
          g.kernels, rec,
          {.out = out, .k_cache = k, .v_cache = v, .qkv = qkv, .T = 4, .pos = 5, .C = 64, .H = 4}),
      doctest::Contains("rows 5..8 do not fit the cache of n_ctx = 8"), vk::Error);
  CHECK_THROWS_WITH_AS(model::gpu::attention_store(g.kernels, rec,
                                                   {.out = out,
                                                    .k_cache = k,
                                                    .v_cache = v,
                                                    .qkv = qkv.sub(0, 256),
                                                    .T = 4,
                                                    .pos = 0,
                                                    .C = 64,
                                                    .H = 4}),
                       doctest::Contains("qkv holds"), vk::Error);
  CHECK_THROWS_WITH_AS(
      model::gpu::attention_store(
          g.kernels, rec,
          {.out = out, .k_cache = k, .v_cache = v, .qkv = qkv, .T = 4, .pos = 0, .C = 64, .H = 5}),
      doctest::Contains("not a multiple of H"), vk::Error);
  model::gpu::attention_store(g.kernels, rec,
                              {.out = out,
                               .k_cache = k,
                               .v_cache = v,
                               .qkv = qkv,
                               .T = 4,
                               .pos = 4,
                               .C = 64,
                               .H = 4});  // the last 4 rows: fine
  // An fp16 cache: rows of C = 12 halves are not whole 16-byte units, which the split kernel
  // loads; the texel kernel reads only fp32 caches.
  model::gpu::AttentionOptions split;
  split.kernel = model::gpu::AttentionKernel::Split;
  split.cache = model::DType::F16;
  const vk::BufferSpan scratch =
      arena.alloc(model::gpu::attention_split_scratch_bytes(4, 8, 12, 3));
  split.scratch = &scratch;
  CHECK_THROWS_WITH_AS(model::gpu::attention_store(g.kernels, rec,
                                                   {.out = out,
                                                    .k_cache = k,
                                                    .v_cache = v,
                                                    .qkv = qkv,
                                                    .T = 4,
                                                    .pos = 0,
                                                    .C = 12,
                                                    .H = 3,
                                                    .options = split}),
                       doctest::Contains("not whole 16-byte units"), vk::Error);
  // The tiled kernel loads 8 halves at a time: a head slice of D = 4 (C = 16) starts mid-unit.
  model::gpu::AttentionOptions tiled;
  tiled.kernel = model::gpu::AttentionKernel::Tiled;
  tiled.cache = model::DType::F16;
  CHECK_THROWS_WITH_AS(model::gpu::attention_store(g.kernels, rec,
                                                   {.out = out,
                                                    .k_cache = k,
                                                    .v_cache = v,
                                                    .qkv = qkv,
                                                    .T = 4,
                                                    .pos = 0,
                                                    .C = 16,
                                                    .H = 4,
                                                    .options = tiled}),
                       doctest::Contains("not whole 16-byte units"), vk::Error);
  model::gpu::AttentionOptions texel;
  texel.kernel = model::gpu::AttentionKernel::Texel;
  texel.cache = model::DType::F16;
  CHECK_THROWS_WITH_AS(model::gpu::attention_store(g.kernels, rec,
                                                   {.out = out,
                                                    .k_cache = k,
                                                    .v_cache = v,
                                                    .qkv = qkv,
                                                    .T = 4,
                                                    .pos = 0,
                                                    .C = 64,
                                                    .H = 4,
                                                    .options = texel}),
                       doctest::Contains("an fp16 cache"), vk::Error);
  rec.end();
}

TEST_CASE("attention_store_batch: each row as its decode step alone, both kernel sets") {
  GPU_TEST(gpu);
  for (vk::KernelSet set : test::kKernelSets) {
    for (model::DType cache : {model::DType::F32, model::DType::F16}) {
      const vk::Device& g = gpu.with_kernels(set);
      const vk::DeviceCaps& caps = g.caps();
      const bool f16 = cache == model::DType::F16;
      // The texel kernel where the policy asks for it, for an fp32 cache; else the split one.
      const bool texel = model::gpu::Ops(g).policy().texel_attention && !f16;
      CAPTURE(texel);
      CAPTURE(f16);
      // 5 sequences of up to 150 cached rows of C = 96 (H = 3), their caches 150 rows plus
      // padding apart, as GpuModel lays out its slots; a batch of 4 of them in a shuffled order,
      // at positions 0 (an empty cache), 149 (the last row), 70 and 130: the split kernel's
      // 64-key blocks, 1 to 3 of them, and empty blocks for the shorter rows.
      const uint32_t C = 96, H = 3, S = 5, rows = 150, B = 4, longest = 150;
      const uint64_t eb = model::dtype_bytes(cache);  // bytes per cache element
      const uint64_t stride =  // elements between slots, on the texel binding's alignment
          vk::align_up(uint64_t{rows} * C * eb + 256, model::gpu::texel_binding_alignment(caps)) /
          eb;
      const uint32_t slot[B] = {3, 0, 4, 1}, pos[B] = {0, 149, 70, 130};
      std::vector<float> k_ref = test::random_floats(stride * S, 2000),
                         v_ref = test::random_floats(stride * S, 2001);
      if (f16)
        for (std::vector<float>* r : {&k_ref, &v_ref})
          for (float& x : *r) x = model::cpu::round_to_half(x);
      const std::vector<float> qkv = test::random_floats(size_t{B} * 3 * C, 2002);
      const uint64_t scratch_bytes = model::gpu::attention_split_scratch_bytes(B, longest, C, H);
      vk::Arena arena(g, (8 * k_ref.size() + 8 * qkv.size()) * sizeof(float) + 2 * scratch_bytes +
                             65536,
                      vk::MemoryKind::Device, "test attention_store_batch");
      const vk::BufferSpan k = test::to_gpu(g, arena, k_ref, cache),
                           v = test::to_gpu(g, arena, v_ref, cache),
                           k1 = test::to_gpu(g, arena, k_ref, cache),
                           v1 = test::to_gpu(g, arena, v_ref, cache),
                           q = test::to_gpu(g, arena, qkv);
      const vk::BufferSpan scratch = arena.alloc(scratch_bytes),
                           scratch1 = arena.alloc(scratch_bytes);
      model::gpu::AttentionOptions o;
      o.scratch = &scratch;
      o.cache = cache;
      const std::string why =
          model::gpu::attention_store_batch_unsupported(model::gpu::Ops(g), {.k_caches = k,
                                                                             .v_caches = v,
                                                                             .qkv = q,
                                                                             .T = B,
                                                                             .max_len = longest,
                                                                             .C = C,
                                                                             .H = H,
                                                                             .options = o});
      if (texel && !caps.storage_texel_buffers) {  // the CPU set forced on a device without them
        CHECK_MESSAGE(!why.empty(), "no storage texel buffers, yet no reason");
        continue;
      }
      REQUIRE_MESSAGE(why.empty(), why);
      std::vector<uint32_t> table;  // {pos, the cache's first 16 bytes}
      for (uint32_t b = 0; b < B; b++)
        table.insert(table.end(), {pos[b], uint32_t(slot[b] * stride * eb / 16)});
      const vk::BufferSpan rows_gpu = arena.alloc(table.size() * 4);
      vk::upload(g, rows_gpu, table.data(), table.size() * 4);
      const vk::BufferSpan out = arena.alloc(size_t{B} * C * 4);
      std::vector<vk::BufferSpan> alone;
      vk::Recorder rec(g, true);
      rec.begin();
      const uint32_t before = rec.stats().dispatches;
      model::gpu::attention_store_batch(model::gpu::Ops(g), rec,
                                        {.out = out,
                                         .k_caches = k,
                                         .v_caches = v,
                                         .qkv = q,
                                         .rows = rows_gpu,
                                         .T = B,
                                         .max_len = longest,
                                         .C = C,
                                         .H = H,
                                         .options = o});
      // The texel kernel's one dispatch, or attention_split (the store fused) and
      // attention_merge.
      CHECK(rec.stats().dispatches - before == (texel ? 1u : 2u));
      // Each row alone on the other copy of the caches: attention_store of one token on the same
      // kernel.
      model::gpu::AttentionOptions one;
      one.kernel = texel ? model::gpu::AttentionKernel::Texel : model::gpu::AttentionKernel::Split;
      one.scratch = &scratch1;
      one.cache = cache;
      const uint64_t slot_bytes = uint64_t{rows} * C * eb;
      for (uint32_t b = 0; b < B; b++) {
        alone.push_back(arena.alloc(size_t{C} * 4));
        model::gpu::attention_store(model::gpu::Ops(g), rec,
                                    {.out = alone.back(),
                                     .k_cache = k1.sub(slot[b] * stride * eb, slot_bytes),
                                     .v_cache = v1.sub(slot[b] * stride * eb, slot_bytes),
                                     .qkv = q.sub(b * 3 * C * 4, 3 * C * 4),
                                     .T = 1,
                                     .pos = pos[b],
                                     .C = C,
                                     .H = H,
                                     .options = one});
      }
      rec.run();
      if (caps.timestamps) {
        const std::vector<vk::DispatchTime> ran = rec.timings();
        REQUIRE(!ran.empty());
        CHECK(ran[0].shader == (texel ? "attention_texel_store" : "attention_split"));
      }
      const std::vector<float> got = test::from_gpu(g, out, size_t{B} * C);
      std::vector<float> kr = k_ref, vr = v_ref;
      for (uint32_t b = 0; b < B; b++) {
        const std::string what = "row " + std::to_string(b) + " (slot " + std::to_string(slot[b]) +
                                 ", pos " + std::to_string(pos[b]) + ")";
        const std::span<const float> row(got.data() + b * C, C);
        // The same bits as alone (the batch must not change a request's results)...
        CHECK(test::close(what + " against alone", row, test::from_gpu(g, alone[b], C), {0, 0}));
        // ...and the reference's values, within test_attention.cpp's tolerance.
        model::cpu::kv_store(kr.data() + slot[b] * stride, vr.data() + slot[b] * stride,
                             qkv.data() + b * 3 * C, 1, C, pos[b], cache);
        std::vector<float> ref(C);
        model::cpu::attention(ref.data(), qkv.data() + b * 3 * C, 3 * size_t{C},
                              kr.data() + slot[b] * stride, vr.data() + slot[b] * stride, 1,
                              pos[b] + 1, C, H, model::AttentionSpec{});
        CHECK(test::close(what + " against the reference", row, ref, kTol));
      }
      // Every row's key and value at its slot's position, nothing else touched.
      CHECK(test::close("k caches", test::from_gpu(g, k, kr.size(), cache), kr, {0, 0}));
      CHECK(test::close("v caches", test::from_gpu(g, v, vr.size(), cache), vr, {0, 0}));
      CHECK(test::close("k caches alone", test::from_gpu(g, k1, kr.size(), cache), kr, {0, 0}));
      CHECK(test::close("v caches alone", test::from_gpu(g, v1, vr.size(), cache), vr, {0, 0}));
    }
  }
}

TEST_CASE("attention_store_batch says why it cannot run, both kernel sets") {
  GPU_TEST(gpu);
  for (vk::KernelSet set : test::kKernelSets) {
    const vk::Device& g = gpu.with_kernels(set);
    const bool texel = model::gpu::Ops(g).policy().texel_attention;
    CAPTURE(texel);
    vk::Arena arena(g, 1 << 20, vk::MemoryKind::Device, "test attention_store_batch errors");
    const vk::BufferSpan k = arena.alloc(64 * 64 * 4), v = arena.alloc(64 * 64 * 4),
                         qkv = arena.alloc(16 * 192 * 4), out = arena.alloc(16 * 64 * 4),
                         rows = arena.alloc(16 * 8),
                         scratch = arena.alloc(model::gpu::attention_split_scratch_bytes(8, 64, 64, 4));
    model::gpu::AttentionOptions o;
    o.scratch = &scratch;
    auto why = [&](uint32_t T, uint32_t max_len, uint32_t H,
                   const model::gpu::AttentionOptions& opt) {
      return model::gpu::attention_store_batch_unsupported(model::gpu::Ops(g), {.k_caches = k,
                                                                                .v_caches = v,
                                                                                .qkv = qkv,
                                                                                .T = T,
                                                                                .max_len = max_len,
                                                                                .C = 64,
                                                                                .H = H,
                                                                                .options = opt});
    };
    CHECK(why(4, 64, 4, o).empty());
    CHECK(why(0, 64, 4, o).find("a batch of 0 rows") == 0);
    CHECK(why(4, 64, 5, o).find("not a multiple of H") != std::string::npos);
    if (texel) {
      CHECK(why(16, 64, 4, o).find("a batch of 16 rows") == 0);
    } else {
      CHECK(why(9, 64, 4, o).find("a batch of 9 rows (1 to 8)") == 0);
      CHECK(why(4, 65, 4, o).find("the longest row's 65 keys") == 0);
      CHECK(why(4, 64, 4, {}).find("no scratch") == 0);
      model::gpu::AttentionOptions small;
      const vk::BufferSpan little = scratch.sub(0, 64);
      small.scratch = &little;
      CHECK(why(4, 64, 4, small).find("the scratch holds 64 bytes") == 0);
    }
    vk::Recorder rec(g);
    rec.begin();
    CHECK_THROWS_WITH_AS(model::gpu::attention_store_batch(model::gpu::Ops(g), rec,
                                                           {.out = out,
                                                            .k_caches = k,
                                                            .v_caches = v,
                                                            .qkv = qkv,
                                                            .rows = rows,
                                                            .T = 16,
                                                            .max_len = 64,
                                                            .C = 64,
                                                            .H = 4,
                                                            .options = o}),
                         doctest::Contains("attention_store_batch cannot run"), vk::Error);
    CHECK_THROWS_WITH_AS(model::gpu::attention_store_batch(model::gpu::Ops(g), rec,
                                                           {.out = out,
                                                            .k_caches = k,
                                                            .v_caches = v,
                                                            .qkv = qkv,
                                                            .rows = rows.sub(0, 8),
                                                            .T = 4,
                                                            .max_len = 64,
                                                            .C = 64,
                                                            .H = 4,
                                                            .options = o}),
                         doctest::Contains("rows holds"), vk::Error);
    rec.end();
  }
}
