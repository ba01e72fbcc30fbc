// The forward pass on the GPU against the CPU reference, for GPT-2's block and every variant,
// and the properties the generation loop relies on: decoding with the KV cache gives the logits
// of recomputing the sequence, one submission and one wait per token, and the context limit.
//
// Tolerance: |gpu - cpu| <= 2e-5 * max(1, max |logit| of the row). Both sides use the same
// stored weights (the CPU rounds them to fp16 for an fp16 run), so what differs is fp32
// accumulation in the GPU against double in the reference: a few ulps per op over ~10 ops per
// block, well under 1e-5 of the row's scale at these widths; a wrong index or a missing barrier
// moves logits by whole units.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "model/forward/cpu_model.h"
#include "model/forward/gpu_model.h"
#include "model/generation/generate.h"
#include "model/ops/gpu/policy.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"

namespace {

constexpr double kTol = 2e-5;
// The attention tap's weights, in [0, 1]: |gpu - cpu| <= 1e-5 + 1e-4 * cpu. What reaches the
// attention differs by kTol of the residual stream's scale; a score's absolute error is its
// weight's relative error, and exp adds a few ulps. Lavapipe stays near 1e-6. A wrong key
// index, head offset or mask moves weights by tenths.
constexpr test::Tolerance kTapTol{1e-5, 1e-4};
// With an fp16 KV cache (GpuModelOptions::kv_cache) against the CPU reference's (which rounds
// to fp16 exactly as the GPU does): each side rounds its own keys and values, and where the two
// fp32 values straddle a rounding boundary (about one value in 10^4) their halves differ by an
// fp16 ulp. At two keys one such value moved a logit by 6.7e-4 of the row's scale; a value left
// unrounded, or a wrong index, moves whole rows by more.
constexpr double kKvFlipTol = 2e-3;

// Runs `first` tokens, then `ids` with the attention tap on (every layer, or `layer`); returns
// the weights [layer][H, T, L] and the pass's logits.
std::vector<std::vector<float>> tapped(model::Model& m, const std::vector<int32_t>& first,
                                       const std::vector<int32_t>& ids,
                                       std::optional<uint32_t> layer = std::nullopt,
                                       std::vector<float>* logits = nullptr) {
  m.reset();
  if (!first.empty()) m.logits(first);
  m.set_attention_taps(true, layer);
  std::vector<float> l = m.logits(ids);
  if (logits) *logits = std::move(l);
  m.set_attention_taps(false);
  return m.attention_probs();
}

std::vector<int32_t> some_ids(size_t n, uint32_t V, uint32_t seed) {
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; i++) ids[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % V);
  return ids;
}

}  // namespace

TEST_CASE("GPU forward matches the CPU reference for GPT-2's block and every variant") {
  GPU_TEST(g);
  for (const test::Variant& v : test::variants()) {
    model::Config c = test::tiny_config();
    v.apply(c);
    test::TinyModel m(c);
    const std::vector<int32_t> ids = some_ids(11, c.n_vocab, 1);
    for (model::Precision p : {model::Precision::F32, model::Precision::F16}) {
      auto cpu = model::make_cpu_model(*m.checkpoint, p);
      const std::vector<float> ref = cpu->logits(ids);
      const auto ref_probs = tapped(*cpu, {}, ids);
      for (vk::KernelSet ks : test::kKernelSets) {
        const std::string what =
            std::string(v.name) + ", " + model::precision_name(p) + ", " + test::kernels_name(ks);
        CAPTURE(what);
        auto gpu = test::gpu_model(g, *m.checkpoint, p, ks);
        CHECK(test::close_rows(what, gpu->logits(ids), ref, c.n_vocab, kTol));
        // The attention tap: the same pass with the kernels' *_probs variants.
        std::vector<float> logits;
        const auto probs = tapped(*gpu, {}, ids, std::nullopt, &logits);
        CHECK(test::close_rows(what + ", tapped", logits, ref, c.n_vocab, kTol));
        REQUIRE(probs.size() == c.n_layer);
        for (uint32_t l = 0; l < c.n_layer; l++) {
          REQUIRE(ref_probs[l].size() == size_t{c.n_head} * ids.size() * ids.size());
          CHECK(test::close(what + ", attention of layer " + std::to_string(l), probs[l],
                            ref_probs[l], kTapTol));
        }
      }
    }
  }
}

TEST_CASE("GPU forward: the attention tap after cached tokens, and of one layer") {
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_layer = 3;
  test::TinyModel m(c);
  const std::vector<int32_t> first = some_ids(9, c.n_vocab, 4), ids = some_ids(4, c.n_vocab, 5);
  auto cpu = model::make_cpu_model(*m.checkpoint, model::Precision::F32);
  const auto ref = tapped(*cpu, first, ids), ref_one = tapped(*cpu, {}, ids, 1);
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(test::kernels_name(ks));
    auto gpu = test::gpu_model(g, *m.checkpoint, model::Precision::F32, ks);
    // 4 new queries against 13 keys: [H, 4, 13].
    const auto got = tapped(*gpu, first, ids);
    for (uint32_t l = 0; l < c.n_layer; l++) {
      REQUIRE(got[l].size() == size_t{c.n_head} * 4 * 13);
      CHECK(test::close("after 9 cached, layer " + std::to_string(l), got[l], ref[l], kTapTol));
    }
    const auto one = tapped(*gpu, {}, ids, 1);
    CHECK(one[0].empty());
    CHECK(one[2].empty());
    CHECK(test::close("layer 1 alone", one[1], ref_one[1], kTapTol));
    // Generation (next()) is never tapped.
    gpu->reset();
    gpu->set_attention_taps(true);
    gpu->next(ids, 1);
    CHECK(gpu->attention_probs().empty());
  }
}

TEST_CASE("GPU forward: the residual stream after every block matches the CPU's") {
  GPU_TEST(g);
  test::TinyModel m(test::tiny_config());
  auto cpu = model::make_cpu_model(*m.checkpoint, model::Precision::F32);
  cpu->set_taps(true);
  const std::vector<int32_t> ids = some_ids(7, 256, 2);
  cpu->logits(ids);
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(test::kernels_name(ks));
    auto gpu = test::gpu_model(g, *m.checkpoint, model::Precision::F32, ks);
    gpu->set_taps(true);
    gpu->logits(ids);
    REQUIRE(gpu->taps().size() == 2);
    for (size_t l = 0; l < 2; l++)
      CHECK(
          test::close_rows("block " + std::to_string(l), gpu->taps()[l], cpu->taps()[l], 48, kTol));
  }
}

TEST_CASE("decoding with the KV cache gives the logits of recomputing the whole sequence") {
  GPU_TEST(g);
  test::TinyModel m(test::tiny_config());
  const std::vector<int32_t> ids = some_ids(12, 256, 3);
  for (auto [p, ks] : test::precisions_and_kernel_sets()) {
    CAPTURE(test::kernels_name(ks));
    auto gpu = test::gpu_model(g, *m.checkpoint, p, ks);
    const std::vector<float> whole = gpu->logits(ids);
    gpu->reset();
    std::vector<float> stepped = gpu->logits(std::span(ids).first(5));  // prefill 5
    for (size_t t = 5; t < ids.size(); t++) {
      model::Candidates c = gpu->next(std::span(ids).subspan(t, 1), 0);  // all V logits
      stepped.insert(stepped.end(), c.logits.begin(), c.logits.end());
    }
    CHECK(gpu->length() == ids.size());
    CHECK(test::close_rows(std::string("cached vs whole, ") + model::precision_name(p), stepped,
                           whole, 256, kTol));
  }
}

TEST_CASE("a long prompt and chunks over many cached keys: the tiled attention's key ranges") {
  // A context of 512: a 300-token prompt (19 blocks of 16 queries x 4 heads, under the 256
  // workgroups the tiled attention aims for, so its keys are split into ranges and merged),
  // then chunks of 20 and 40 tokens over 300 and 320 cached keys (2 and 3 blocks: most ranges).
  // Both kernel sets, fp32 and fp16 caches (D = 16: whole 16-byte units of halves), against the
  // CPU reference of the whole sequence.
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_ctx = 512;
  c.n_embd = 64;
  c.n_inner = 4 * 64;
  test::TinyModel m(c);
  const std::vector<int32_t> ids = some_ids(360, c.n_vocab, 11);
  for (const model::Precision kv : {model::Precision::F32, model::Precision::F16}) {
    auto cpu = model::make_cpu_model(*m.checkpoint, model::Precision::F32, kv);
    const std::vector<float> ref = cpu->logits(ids);
    for (vk::KernelSet ks : test::kKernelSets) {
      CAPTURE(test::kernels_name(ks));
      auto gpu = test::gpu_model(g, *m.checkpoint, model::Precision::F32, ks, kv);
      std::vector<float> got = gpu->logits(std::span(ids).first(300));
      for (const auto& [at, n] : {std::pair<size_t, size_t>{300, 20}, {320, 40}}) {
        const std::vector<float> more = gpu->logits(std::span(ids).subspan(at, n));
        got.insert(got.end(), more.begin(), more.end());
      }
      CHECK(test::close_rows(std::string("prompt and chunks, KV cache ") +
                                 model::precision_name(kv),
                             got, ref, c.n_vocab, kv == model::Precision::F16 ? kKvFlipTol : kTol));
    }
  }
}

// An fp16 KV cache (GpuModelOptions::kv_cache): the GPU against the CPU reference rounding its
// cache the same way (to nearest even, as the GPU does), within kKvFlipTol, for a prompt's pass
// and for decoding token by token; and the stated cost of the option, the reference's logits
// within kKvCacheTol of an fp32 cache's (docs/benchmark.md, "An fp16 KV cache").
TEST_CASE("an fp16 KV cache: every variant against a reference that caches the same halves") {
  GPU_TEST(g);
  // The logits' move from an fp32 cache to fp16, relative to the row's scale. Each cached value
  // moves by up to 2^-11 of itself; measured: 1.2e-3 on the shipped KJV model, 2.8e-4 on GPT-2
  // small's shape, at most 1e-3 on these tiny random models.
  constexpr double kKvCacheTol = 5e-3;
  const model::Precision f16 = model::Precision::F16;
  for (const test::Variant& v : test::variants()) {
    model::Config c = test::tiny_config();
    v.apply(c);
    test::TinyModel m(c);
    const std::vector<int32_t> ids = some_ids(14, c.n_vocab, 4);
    auto cpu = model::make_cpu_model(*m.checkpoint, f16, f16);
    const std::vector<float> ref = cpu->logits(ids);
    const std::vector<float> ref32 = model::make_cpu_model(*m.checkpoint, f16)->logits(ids);
    CHECK(ref != ref32);  // the cache's rounding reaches the logits...
    CHECK(test::close_rows(std::string(v.name) + ", fp16 cache vs fp32", ref, ref32, c.n_vocab,
                           kKvCacheTol));  // ...by no more than stated
    for (vk::KernelSet ks : test::kKernelSets) {
      const std::string what = std::string(v.name) + ", " + test::kernels_name(ks);
      CAPTURE(what);
      auto gpu = test::gpu_model(g, *m.checkpoint, f16, ks, f16);
      CHECK(test::close_rows(what, gpu->logits(ids), ref, c.n_vocab, kKvFlipTol));
      if (!c.causal) continue;  // a bidirectional model recomputes every step
      gpu->reset();
      std::vector<float> stepped = gpu->logits(std::span(ids).first(1));  // then 13 steps
      for (size_t t = 1; t < ids.size(); t++) {
        model::Candidates one = gpu->next(std::span(ids).subspan(t, 1), 0);  // all V logits
        stepped.insert(stepped.end(), one.logits.begin(), one.logits.end());
      }
      CHECK(test::close_rows(what + ", decoded", stepped, ref, c.n_vocab, kKvFlipTol));
    }
  }
}

TEST_CASE("one submission and one fence wait per decoded token; top-k comes back, not logits") {
  GPU_TEST(g);
  test::TinyModel m(test::tiny_config());
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(test::kernels_name(ks));
    auto gpu = test::gpu_model(g, *m.checkpoint, model::Precision::F16, ks);
    auto cpu = model::make_cpu_model(*m.checkpoint, model::Precision::F16);
    const std::vector<int32_t> prompt = some_ids(6, 256, 4);
    gpu->next(prompt, 1);
    cpu->next(prompt, 1);
    for (int32_t id : {5, 77, 200}) {
      const int32_t one[] = {id};
      model::Candidates gc = gpu->next(one, 40), cc = cpu->next(one, 40);
      const vk::RecorderStats& s = model::gpu_stats(*gpu);
      CHECK(s.submits == 1);
      CHECK(s.waits == 1);
      CHECK(gc.ids.size() == 40);
      CHECK(gc.ids == cc.ids);  // the candidates' order is the reference's
      CHECK(test::close_rows("top-40 logits", gc.logits, cc.logits, 40, kTol));
    }
  }
}

TEST_CASE("greedy generation on the GPU and the CPU gives the same tokens; the window slides") {
  GPU_TEST(g);
  test::TinyModel m(test::tiny_config());  // n_ctx 32
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(test::kernels_name(ks));
    auto gpu = test::gpu_model(g, *m.checkpoint, model::Precision::F32, ks);
    auto cpu = model::make_cpu_model(*m.checkpoint, model::Precision::F32);
    model::GenerateOptions o;
    o.max_new = 40;  // 10 + 40 passes n_ctx = 32: the window slides once, at 32 tokens
    o.sampling.temperature = 0;
    const std::vector<int32_t> prompt = some_ids(10, 256, 5);
    std::vector<std::string> notes;
    auto note = [&](const std::string& s) { notes.push_back(s); };
    model::GenerateResult a = model::generate(
        *gpu, prompt, o, [](int32_t) {}, note);
    model::GenerateResult b = model::generate(*cpu, prompt, o, [](int32_t) {});
    CHECK(a.tokens.size() == 40);
    CHECK(a.tokens == b.tokens);
    CHECK(a.slides == 1);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("context full") != std::string::npos);

    std::vector<int32_t> too_long = some_ids(33, 256, 6);
    CHECK_THROWS_WITH(model::generate(*gpu, too_long, o, [](int32_t) {}),
                      doctest::Contains("longer than the model's context of 32"));
    CHECK_THROWS_WITH(gpu->logits(too_long), doctest::Contains("pass the model's context of 32"));
    const int32_t bad[] = {256};
    gpu->reset();
    CHECK_THROWS_WITH(gpu->logits(bad), doctest::Contains("outside the vocabulary"));
  }
}

TEST_CASE("decode steps replayed from one recording give the logits of recording each one") {
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_ctx = 256;  // 200 steps: past several of the split kernel's 64-key blocks (a new plan)
  test::TinyModel m(c);
  const std::vector<int32_t> prompt = some_ids(5, 256, 9);
  for (auto [p, ks] : test::precisions_and_kernel_sets()) {
    CAPTURE(test::kernels_name(ks));
    CAPTURE(std::string(model::precision_name(p)));
    model::GpuModelOptions replayed{p, false, 0, {}};
    model::GpuModelOptions recorded = replayed;
    recorded.replay = false;
    auto a = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), replayed);
    auto b = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), recorded);
    a->next(prompt, 0);
    b->next(prompt, 0);
    uint32_t replays = 0, recordings = 0;
    bool same = true;
    int32_t id = 7;
    for (int step = 0; step < 200 && same; step++) {
      const int32_t one[] = {id};
      const std::vector<float> la = a->next(one, 0).logits;  // all V: no top-k
      replays += model::gpu_stats(*a).replays;
      CHECK(model::gpu_stats(*a).submits == 1);
      const std::vector<float> lb = b->next(one, 0).logits;
      recordings += model::gpu_stats(*b).commands > 0 ? 1u : 0u;
      same = la == lb;  // bit for bit
      id = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
    }
    CHECK(same);
    CHECK(recordings == 200);
    CHECK(replays >= 190);  // re-recorded only where the plan changed
    // Greedy decoding through the head's argmax, and top-k: replayed too, the same ids.
    for (uint32_t k : {1u, 40u}) {
      a->reset();
      b->reset();
      const model::Candidates ca = a->next(prompt, k), cb = b->next(prompt, k);
      CHECK(ca.ids == cb.ids);
      int32_t next_id = ca.ids[0];
      for (int step = 0; step < 20; step++) {
        const int32_t one[] = {next_id};
        const model::Candidates xa = a->next(one, k), xb = b->next(one, k);
        CHECK(xa.ids == xb.ids);
        CHECK(xa.logits == xb.logits);
        next_id = xa.ids[0];
      }
      CHECK(model::gpu_stats(*a).replays == 1);
    }
  }
}

TEST_CASE("prepare() compiles every pipeline the prompt's pass and the decoding passes use") {
  GPU_TEST(g);
  test::TinyModel m(test::tiny_config());
  model::Config bidirectional = test::tiny_config();
  bidirectional.causal = false;
  test::TinyModel mb(bidirectional);
  const std::vector<int32_t> prompt = some_ids(9, 256, 8);
  struct Case {
    const model::Checkpoint& checkpoint;
    model::Precision precision;
    vk::KernelSet kernels;
    float temperature;  // 0: greedy, the head's argmax; else top-k
    uint32_t max_new;
    uint32_t context = 0;  // GenerateOptions::context: a shorter window
    float repeat_penalty = 1.0f;  // a penalty on: every logit, even greedy (k = 0)
  };
  std::vector<Case> cases;
  for (auto [p, ks] : test::precisions_and_kernel_sets()) {
    cases.push_back({*m.checkpoint, p, ks, 0.0f, 12});  // 9 + 12 < n_ctx 32: no slide
    cases.push_back({*m.checkpoint, p, ks, 0.8f, 40});  // a slide, and decoding after it
  }
  for (vk::KernelSet ks : test::kKernelSets) {
    // Bidirectional: every step a whole pass of a new length.
    cases.push_back({*mb.checkpoint, model::Precision::F32, ks, 0.0f, 30});
    // A window of 12 (-c), greedy with a penalty: slides at 12, to 6, twice.
    cases.push_back({*m.checkpoint, model::Precision::F32, ks, 0.0f, 12, 12, 1.3f});
  }
  for (const Case& t : cases) {
      CAPTURE(test::kernels_name(t.kernels));
      CAPTURE(std::string(model::precision_name(t.precision)));
      CAPTURE(t.temperature);
      CAPTURE(t.checkpoint.config().causal);
      // A device of its own, so that no earlier test has compiled anything for it.
      test::LoweredGpu fresh(g, {}, t.kernels);
      model::GpuModelOptions mo;
      mo.precision = t.precision;
      auto gpu = model::make_gpu_model(t.checkpoint, fresh.device, mo);
      model::GenerateOptions o;
      o.max_new = t.max_new;
      o.stop_at_eos = false;
      o.sampling.temperature = t.temperature;
      o.sampling.repeat_penalty = t.repeat_penalty;
      o.context = t.context;
      size_t last_done = 0, last_total = 0;
      o.on_compile = [&](size_t done, size_t total) { last_done = done, last_total = total; };
      const model::GenerateResult r = model::generate(*gpu, prompt, o, [](int32_t) {});
      CHECK(r.tokens.size() == t.max_new);
      const bool slides_once = t.max_new > 20 && t.checkpoint.config().causal;
      CHECK(r.slides == (t.context ? 2u : slides_once ? 1u : 0u));
      CHECK(r.pipelines > 0);
      CHECK(last_done == r.pipelines);
      CHECK(last_total == r.pipelines);
      // Nothing was made after prepare(): the dry passes named exactly what the real ones use.
      CHECK(fresh.device.kernels().count() == r.pipelines);
      // A second generation on the same device finds everything compiled.
      CHECK(model::generate(*gpu, prompt, o, [](int32_t) {}).pipelines == 0);
      CHECK(fresh.device.kernels().count() == r.pipelines);
    }
}

TEST_CASE("generation stops at the config's end-of-text token") {
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  test::TinyModel probe(c);
  auto cpu = model::make_cpu_model(*probe.checkpoint, model::Precision::F32);
  model::GenerateOptions o;
  o.max_new = 6;
  o.sampling.temperature = 0;
  const std::vector<int32_t> prompt = some_ids(4, 256, 7);
  const std::vector<int32_t> free_run = model::generate(*cpu, prompt, o, [](int32_t) {}).tokens;
  REQUIRE(free_run.size() == 6);
  // The same weights, with the first greedy token after the first that was not seen before
  // declared end-of-text: generation stops right before it.
  size_t k = 1;
  while (k < free_run.size() && std::find(free_run.begin(), free_run.begin() + long(k),
                                          free_run[k]) != free_run.begin() + long(k))
    k++;
  REQUIRE(k < free_run.size());
  c.eos_token_id = free_run[k];
  test::TinyModel m(c);
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(test::kernels_name(ks));
    auto gpu = test::gpu_model(g, *m.checkpoint, model::Precision::F32, ks);
    const model::GenerateResult r = model::generate(*gpu, prompt, o, [](int32_t) {});
    CHECK(r.stop == "eos");
    CHECK(r.tokens == std::vector<int32_t>(free_run.begin(), free_run.begin() + long(k)));
  }
}

TEST_CASE("GPT-2 small's shape (124M, V = 50257): GPU matches the CPU reference, fp16 and fp32" *
          doctest::test_suite("shapes")) {
  GPU_TEST(g);
  // At fp32 the [50257, 768] embedding is 154 MB, over lavapipe's 128 MiB storage-buffer range:
  // the embedding and the head split it.
  const model::Config c = model::gpt2_config(768, 12, 12);
  test::TempDir dir;
  model::RandomCheckpointOptions o;
  o.dtype = model::TensorDType::F16;
  model::write_random_checkpoint(dir.path(), c, model::config_json(c), o);
  auto ckpt = model::Checkpoint::load(dir.path());
  const std::vector<int32_t> ids = {15496, 11, 616, 50256};
  for (model::Precision p : {model::Precision::F16, model::Precision::F32}) {
    auto cpu = model::make_cpu_model(*ckpt, p);
    const std::vector<float> ref = cpu->logits(ids);
    for (vk::KernelSet ks : test::kKernelSets) {
      auto gpu = test::gpu_model(g, *ckpt, p, ks);
      CHECK(test::close_rows(
          std::string("gpt-2 small ") + model::precision_name(p) + ", " + test::kernels_name(ks),
          gpu->logits(ids), ref, c.n_vocab, kTol));
    }
  }
}

TEST_CASE("GPU forward under lowered limits: 16 KiB shared, 128 invocations, no subgroup ops") {
  GPU_TEST(g);
  // The limits every Vulkan device meets (16 KiB of shared memory, 128 invocations) and neither
  // subgroup arithmetic nor shuffles, the device features kernels branch on: both kernel sets, a
  // prompt (the CPU set's interleaved matmul then loads x in every invocation), then decoded
  // tokens (the GPU set's wide GEMV and split attention), against the CPU.
  model::Config c = test::tiny_config();
  test::TinyModel m(c);
  const std::vector<int32_t> prompt = some_ids(9, c.n_vocab, 6), steps = some_ids(3, c.n_vocab, 7);
  auto cpu = model::make_cpu_model(*m.checkpoint, model::Precision::F16);
  std::vector<std::vector<float>> ref{cpu->logits(prompt)};
  for (int32_t id : steps) ref.push_back(cpu->logits({&id, 1}));
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(test::kernels_name(ks));
    test::LoweredGpu low(g,
                         {.max_shared_memory = 16384, .max_workgroup_invocations = 128,
                          .no_subgroup_arithmetic = true, .no_subgroup_shuffle = true,
                          .no_coop_matrix = true},
                         ks);
    model::GpuModelOptions o;
    o.precision = model::Precision::F16;
    auto gpu = model::make_gpu_model(*m.checkpoint, low.device, o);
    CHECK(test::close_rows("prompt", gpu->logits(prompt), ref[0], c.n_vocab, kTol));
    for (size_t i = 0; i < steps.size(); i++)
      CHECK(test::close_rows("decoded token " + std::to_string(i), gpu->logits({&steps[i], 1}),
                             ref[i + 1], c.n_vocab, kTol));
  }
}

TEST_CASE("slots: a batch's later steps replay its recording, the same bits as recording anew") {
  // Four slots decoding together step after step: from the second step each batch pass is the
  // recording of the step before, submitted again (ids and positions are read from buffers),
  // except where the longest row crosses a 64-key block of the split attention. Its logits
  // must be the bits of a model that records every step.
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_ctx = 80;
  test::TinyModel m(c);
  const std::vector<std::vector<int32_t>> prompts = {
      some_ids(60, c.n_vocab, 31), some_ids(3, c.n_vocab, 32), some_ids(10, c.n_vocab, 33),
      some_ids(1, c.n_vocab, 34)};
  const auto S = static_cast<uint32_t>(prompts.size());
  for (auto [p, ks] : test::precisions_and_kernel_sets()) {
    CAPTURE(test::kernels_name(ks));
    CAPTURE(std::string(model::precision_name(p)));
    model::GpuModelOptions o;
    o.precision = p;
    o.slots = S;
    o.slot_context = c.n_ctx;
    auto replayed = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), o);
    o.replay = false;
    auto recorded = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), o);
    for (uint32_t s = 0; s < S; s++) {
      replayed->slot_prefill(s, prompts[s], false);
      recorded->slot_prefill(s, prompts[s], false);
    }
    uint32_t replays = 0;
    const uint32_t steps = 8;  // the first slot's rows 60 .. 67: its keys cross 64
    for (uint32_t step = 0; step < steps; step++) {
      std::vector<model::Model::SlotToken> rows;
      for (uint32_t s = 0; s < S; s++)
        rows.push_back({s, static_cast<int32_t>((step * 7 + s * 13) % c.n_vocab)});
      // The same size in another order: the table, not the recording, says which row is whose.
      if (step % 2 == 1) std::reverse(rows.begin(), rows.end());
      const std::vector<float> a = replayed->slot_decode(rows);
      replays += model::gpu_stats(*replayed).replays;
      CHECK(model::gpu_stats(*recorded).replays == 0);
      CHECK(a == recorded->slot_decode(rows));
    }
    // The first step is recorded, and with the split attention (the GPU set) also the one whose
    // longest row first has 65 keys; the texel attention's plan does not change with length.
    const bool split = model::gpu::Ops(g.with_kernels(ks)).policy().split_attention;
    CHECK(replays == (split ? steps - 2 : steps - 1));
  }
}

TEST_CASE("slots: sequences decoded together give each the bits it gets alone") {
  // Eight prompts of different lengths in eight slots, greedy-decoded: once each alone (batches
  // of one row), once all together; every step's logits must be the same bits. And the
  // CPU reference over each whole sequence agrees within kTol (so the rows are also right).
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_layer = 3;
  test::TinyModel m(c);
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t s = 0; s < model::kMaxSlots; s++)
    prompts.push_back(some_ids(1 + (s * 5) % 14, c.n_vocab, 21 + s));
  const uint32_t S = model::kMaxSlots, steps = 10, V = c.n_vocab;
  auto argmax = [&](std::span<const float> row) {
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  };
  // Both weight precisions under both kernel sets; then fp16 weights with an fp16 KV cache
  // (each batch's attention on the split kernel, under either set).
  std::vector<std::tuple<model::Precision, vk::KernelSet, model::Precision>> runs;
  for (auto [p, ks] : test::precisions_and_kernel_sets())
    runs.emplace_back(p, ks, model::Precision::F32);
  for (vk::KernelSet ks : test::kKernelSets)
    runs.emplace_back(model::Precision::F16, ks, model::Precision::F16);
  for (auto [p, ks, kv] : runs) {
    CAPTURE(test::kernels_name(ks));
    CAPTURE(std::string(model::precision_name(p)));
    CAPTURE(std::string(model::precision_name(kv)));
    model::GpuModelOptions o;
    o.precision = p;
    o.kv_cache = kv;
    o.slots = S;
    o.slot_context = 24;
    auto alone = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), o);
    auto together = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), o);
    REQUIRE(together->slots() == S);
    // [slot][step] logits rows; the first from the prompt's pass.
    std::vector<std::vector<std::vector<float>>> a(S), b(S);
    std::vector<std::vector<int32_t>> seq(S);
    for (uint32_t s = 0; s < S; s++) {
      a[s].push_back(alone->slot_prefill(s, prompts[s], false));
      b[s].push_back(together->slot_prefill(s, prompts[s], false));
      seq[s] = prompts[s];
    }
    for (uint32_t step = 0; step < steps; step++) {
      std::vector<model::Model::SlotToken> rows;
      for (uint32_t s = 0; s < S; s++) {
        const int32_t id = argmax(a[s].back());
        seq[s].push_back(id);
        const model::Model::SlotToken one[] = {{s, id}};
        a[s].push_back(alone->slot_decode(one));
        // Rows in a changing order, and slot 2 sitting out every third step.
        const uint32_t slot = (s + step) % S;
        if (!(slot == 2 && step % 3 == 0)) rows.push_back({slot, 0});
      }
      for (auto& r : rows) r.id = seq[r.slot].back();
      const uint32_t one_row = model::gpu_stats(*alone).dispatches;
      const std::vector<float> out = together->slot_decode(rows);
      // Every dispatch takes all the rows, the embedding's and a batch's attention too, under
      // either kernel set.
      CHECK(model::gpu_stats(*together).dispatches == one_row);
      for (size_t r = 0; r < rows.size(); r++)
        b[rows[r].slot].push_back(std::vector<float>(out.begin() + long(r * V), out.begin() + long((r + 1) * V)));
      if (step % 3 == 0) {  // slot 2 catches up alone
        const model::Model::SlotToken one[] = {{2, seq[2].back()}};
        b[2].push_back(together->slot_decode(one));
      }
    }
    auto cpu = model::make_cpu_model(*m.checkpoint, p, kv);
    for (uint32_t s = 0; s < S; s++) {
      CAPTURE(s);
      CHECK(alone->slot_length(s) == seq[s].size());
      CHECK(together->slot_length(s) == seq[s].size());
      REQUIRE(a[s].size() == b[s].size());
      for (size_t t = 0; t < a[s].size(); t++) CHECK(a[s][t] == b[s][t]);
      cpu->reset();
      const std::vector<float> ref = cpu->logits(seq[s]);
      const size_t P = prompts[s].size();
      std::vector<float> got;
      for (size_t t = 0; t < a[s].size(); t++) got.insert(got.end(), a[s][t].begin(), a[s][t].end());
      CHECK(test::close_rows("slot logits", got, std::span(ref).subspan((P - 1) * V, got.size()),
                             V, kv == model::Precision::F16 ? kKvFlipTol : kTol));
    }
    // prepare() names every pipeline a prompt chunk and batches of any size use: on a device
    // that has compiled nothing, running them afterwards creates none.
    {
      test::LoweredGpu fresh(g, {}, ks);
      auto m4 = model::make_gpu_model(*m.checkpoint, fresh.device, o);
      const size_t made = m4->prepare(8, 16, 0);
      CHECK(made > 0);
      for (uint32_t s = 0; s < S; s++) m4->slot_prefill(s, some_ids(8, V, s), false);
      for (uint32_t n = S; n >= 1; n--) {
        std::vector<model::Model::SlotToken> rows;
        for (uint32_t s = 0; s < n; s++) rows.push_back({s, int32_t(s)});
        m4->slot_decode(rows);
      }
      CHECK(fresh.device.kernels().count() == made);
    }
    // A slot past its context, a slot twice in a batch: refused.
    const model::Model::SlotToken twice[] = {{0, 1}, {0, 2}};
    CHECK_THROWS_WITH_AS(together->slot_decode(twice), doctest::Contains("twice"), std::runtime_error);
    together->slot_reset(1);
    CHECK(together->slot_length(1) == 0);
    CHECK_THROWS_WITH_AS(together->slot_prefill(1, some_ids(25, V, 1), false),
                         doctest::Contains("slot's context of 24"), std::runtime_error);
  }
}
