// attention with T5's relative position bias (AttentionSpec::bias_span): the CPU reference
// against the formula written out here, then every forward kernel (portable, texel, split,
// tiled; the taps, the fused stores, the batch of decode steps, fp32 and fp16 caches) against
// the CPU reference at T5-small's shapes (D = 64, H = 8 and 12), and the errors.
//
// The table is T5-like: each head's row spread like a learned one, head h uniform in
// [-a_h, a_h) with a_h from 2 to 8, over R = n_ctx - 1 distances with n_ctx > L, so it is wider
// than any call needs and an off-by-one in the distance reads a different, random entry.
//
// Tolerance: atol 2e-6 + rtol 1e-5, test_attention.cpp's 1e-6 + 1e-5 with the absolute part
// doubled for the bias. A biased score reaches |s| ~ 8 where an unbiased one stays near 1, so
// its fp32 rounding (half an ulp of 8 is 4.8e-7) and exp's (3 + 2|x|)-ulp bound over score
// differences up to ~16 are several times larger; each becomes the same relative error of a
// weight, and the outputs (convex combinations of V in [-1, 1]) carry it absolutely. Lavapipe
// stays within 4.8e-7 absolute on every case here; the bound leaves room for a GPU's coarser exp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "model/ops/cpu/attention.h"
#include "model/ops/cpu/common.h"
#include "model/ops/cpu/kv_store.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/attention_backward.h"
#include "shaders/attention.h"
#include "tests/compare.h"
#include "tests/gpu.h"
#include "vk/check.h"
#include "vk/sizes.h"

namespace {

using model::DType;
using model::gpu::AttentionKernel;

constexpr test::Tolerance kTol{2e-6, 1e-5};

// A T5-like table [H, 2R + 1]: head h uniform in [-a_h, a_h), a_h from 2 (head 0) to 8.
std::vector<float> bias_table(uint32_t H, uint32_t R, unsigned seed) {
  const uint32_t span = 2 * R + 1;
  std::vector<float> table;
  for (uint32_t h = 0; h < H; h++) {
    const float a = H == 1 ? 8.0f : 2.0f + 6.0f * static_cast<float>(h) / static_cast<float>(H - 1);
    const std::vector<float> row = test::random_floats(span, seed + h, -a, a);
    table.insert(table.end(), row.begin(), row.end());
  }
  return table;
}

// ---- The CPU reference -------------------------------------------------------------------

// The formula itself, in double: out[t, h] = sum_j softmax_j(scale q.k_j + bias[h, R + j - p]) v_j
// over the visible j, p = L - T + t; probs [H, T, L] with 0 past the visible keys.
void formula(std::vector<double>& out, std::vector<double>& probs, const std::vector<float>& qkv,
             const std::vector<float>& k, const std::vector<float>& v,
             const std::vector<float>& bias, size_t T, size_t L, size_t C, size_t H, size_t R,
             bool causal) {
  const size_t D = C / H, span = 2 * R + 1;
  out.assign(T * C, 0.0);
  probs.assign(H * T * L, 0.0);
  for (size_t t = 0; t < T; t++)
    for (size_t h = 0; h < H; h++) {
      const long p = static_cast<long>(L - T + t);
      const size_t visible = causal ? L - T + t + 1 : L;
      std::vector<double> s(visible);
      for (size_t j = 0; j < visible; j++) {
        double dot = 0;
        for (size_t d = 0; d < D; d++)
          dot += double{qkv[t * 3 * C + h * D + d]} * double{k[j * C + h * D + d]};
        const long distance = static_cast<long>(j) - p;
        s[j] = dot / std::sqrt(double(D)) +
               double{bias[h * span + static_cast<size_t>(static_cast<long>(R) + distance)]};
      }
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double x : s) sum += std::exp(x - m);
      for (size_t j = 0; j < visible; j++) {
        const double w = std::exp(s[j] - m) / sum;
        probs[(h * T + t) * L + j] = w;
        for (size_t d = 0; d < D; d++) out[t * C + h * D + d] += w * double{v[j * C + h * D + d]};
      }
    }
}

std::vector<float> narrowed(const std::vector<double>& x) {
  return std::vector<float>(x.begin(), x.end());
}

TEST_CASE("cpu::attention's relative position bias is the formula, and it matters") {
  const size_t C = 8, H = 2, R = 6;  // R > L - 1: a wider table than needed
  for (const bool causal : {true, false})
    for (const size_t T : {size_t{1}, size_t{3}, size_t{5}}) {
      const size_t L = 5;
      const std::vector<float> qkv = test::random_floats(T * 3 * C, 11 + unsigned(T)),
                               k = test::random_floats(L * C, 12),
                               v = test::random_floats(L * C, 13), bias = bias_table(H, R, 14);
      model::AttentionSpec spec{causal, 0, 2 * R + 1};
      std::vector<float> out(T * C), probs(H * T * L);
      model::cpu::attention(out.data(), qkv.data(), 3 * C, k.data(), v.data(), T, L, C, H, spec,
                            probs.data(), bias.data());
      std::vector<double> want, want_probs;
      formula(want, want_probs, qkv, k, v, bias, T, L, C, H, R, causal);
      const std::string what =
          std::string(causal ? "causal" : "bidirectional") + " T=" + std::to_string(T);
      // Both in double, rounded once: within an ulp or so.
      CHECK(test::close(what + " out", out, narrowed(want), {1e-7, 1e-6}));
      CHECK(test::close(what + " probs", probs, narrowed(want_probs), {1e-7, 1e-6}));

      // Without the bias the output differs (the bias, up to +-8, moves the weights a lot)...
      std::vector<float> plain(T * C);
      model::cpu::attention(plain.data(), qkv.data(), 3 * C, k.data(), v.data(), T, L, C, H,
                            {causal, 0});
      double moved = 0;
      for (size_t i = 0; i < out.size(); i++)
        moved = std::max(moved, std::fabs(double{out[i]} - double{plain[i]}));
      if (!(T == 1 && causal && L == 1)) CHECK(moved > 0.05);
      // ...while a bias constant per head shifts every score of a row alike: the softmax, and so
      // the output, stay the unbiased one's.
      std::vector<float> flat(H * (2 * R + 1));
      for (size_t h = 0; h < H; h++)
        std::fill_n(flat.begin() + long(h * (2 * R + 1)), 2 * R + 1, 3.0f * float(h + 1));
      std::vector<float> shifted(T * C);
      model::cpu::attention(shifted.data(), qkv.data(), 3 * C, k.data(), v.data(), T, L, C, H, spec,
                            nullptr, flat.data());
      CHECK(test::close(what + " constant bias", shifted, plain, {1e-6, 1e-6}));
    }
}

TEST_CASE("cpu::attention rejects a bad bias; its backward has none") {
  const size_t C = 8, H = 2, T = 2, L = 5;
  const std::vector<float> qkv = test::random_floats(T * 3 * C, 1),
                           k = test::random_floats(L * C, 2);
  const std::vector<float> table(H * 64, 0.5f);
  std::vector<float> out(T * C);
  auto run = [&](uint32_t span, const float* bias) {
    model::cpu::attention(out.data(), qkv.data(), 3 * C, k.data(), k.data(), T, L, C, H,
                          {true, 0, span}, nullptr, bias);
  };
  CHECK_NOTHROW(run(9, table.data()));  // R = 4 = L - 1
  CHECK_THROWS_WITH_AS(run(8, table.data()), doctest::Contains("is even"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(7, table.data()), doctest::Contains("need R >= 4"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(9, nullptr), doctest::Contains("no relative position bias table"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(0, table.data()), doctest::Contains("bias_span 0"),
                       std::invalid_argument);
  std::vector<float> dqkv(T * 3 * C);
  CHECK_THROWS_WITH_AS(
      model::cpu::attention_backward(
          dqkv.data(), dqkv.data(), dqkv.data(), out.data(), qkv.data(), qkv.data(), qkv.data(),
          model::self_attention_rows(1, uint32_t(T), uint32_t(C), uint32_t(H)), {true, 0, 9}),
      doctest::Contains("relative position bias has no training kernels yet"),
      std::invalid_argument);
}

// ---- The GPU kernels against the reference --------------------------------------------------

constexpr uint32_t kNctx = 320;  // the caches' rows; the table reaches R = kNctx - 1

struct Shape {
  uint32_t C, H;
};

// One call: T queries over L keys (attention), or attention_store of T new tokens at L - T.
struct Run {
  uint32_t T, L;
  bool causal;
  DType cache = DType::F32;
  bool store = false;  // attention_store: the new keys and values from qkv
  bool step = false;   // the position read at run time
};

std::string describe(const Shape& s, const Run& r) {
  return "C=" + std::to_string(s.C) + " H=" + std::to_string(s.H) + " T=" + std::to_string(r.T) +
         " L=" + std::to_string(r.L) + (r.causal ? " causal" : " bidirectional") +
         (r.cache == DType::F16 ? " fp16" : "") + (r.store ? " store" : "") +
         (r.step ? " step" : "");
}

const char* kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::Texel:
      return "texel";
    case AttentionKernel::Split:
      return "split";
    case AttentionKernel::Tiled:
      return "tiled";
    default:
      return "portable";
  }
}

// The inputs of a run: the caches [kNctx, C] (rows past the keys the call sees are NaN, so a
// kernel that read them, or weighed a masked key, would fail), qkv [T, 3C] and the table.
struct Inputs {
  std::vector<float> qkv, k, v, bias;
  // The reference: out [T, C], probs [H, T, L]
  std::vector<float> out, probs;
};

Inputs make_inputs(const Shape& s, const Run& r, unsigned seed) {
  const size_t C = s.C;
  Inputs in{test::random_floats(size_t{r.T} * 3 * C, seed),
            test::random_floats(size_t{kNctx} * C, seed + 1),
            test::random_floats(size_t{kNctx} * C, seed + 2),
            bias_table(s.H, kNctx - 1, seed + 3),
            {},
            {}};
  const size_t known = r.store ? r.L - r.T : r.L;  // rows the caches hold before the call
  for (std::vector<float>* x : {&in.k, &in.v}) {
    std::fill(x->begin() + long(known * C), x->end(), std::numeric_limits<float>::quiet_NaN());
    if (r.cache == DType::F16)
      for (float& e : *x) e = model::cpu::round_to_half(e);
  }
  std::vector<float> k = in.k, v = in.v;
  if (r.store) model::cpu::kv_store(k.data(), v.data(), in.qkv.data(), r.T, C, r.L - r.T, r.cache);
  in.out.resize(size_t{r.T} * C);
  in.probs.resize(size_t{s.H} * r.T * r.L);
  model::cpu::attention(in.out.data(), in.qkv.data(), 3 * C, k.data(), v.data(), r.T, r.L, C, s.H,
                        {r.causal, 0, 2 * kNctx - 1}, in.probs.data(), in.bias.data());
  return in;
}

// Whether `kernel` takes the run on this device (the arenas here align every span).
bool runs(const vk::DeviceCaps& caps, AttentionKernel kernel, const Shape& s, const Run& r,
          bool tap) {
  const uint32_t D = s.C / s.H;
  switch (kernel) {
    case AttentionKernel::Texel:
      return caps.storage_texel_buffers && r.cache == DType::F32 && D % 4 == 0 &&
             D <= model::gpu::kAttentionTexelMaxD;
    case AttentionKernel::Split:  // decode's kernel: each query re-reads the keys
      return !tap && r.T <= 64 && caps.max_workgroup_invocations >= push::ATTENTION_SPLIT_WG &&
             caps.max_workgroup_size[0] >= push::ATTENTION_SPLIT_WG;
    case AttentionKernel::Tiled:
      return !tap && caps.max_workgroup_invocations >= push::ATTENTION_TILED_WG &&
             caps.max_workgroup_size[0] >= push::ATTENTION_TILED_WG;
    default:
      return true;
  }
}

// Runs `kernel` (with the tap where `tap`; with scratch where `scratch`, which lets Tiled split
// its keys) and checks out, probs and, after a store, the caches' new rows.
void check_kernel(const model::gpu::Ops& ops, AttentionKernel kernel, const Shape& s, const Run& r,
                  const Inputs& in, bool tap, bool scratch) {
  const vk::Device& device = ops.device();
  const uint32_t C = s.C, H = s.H, T = r.T, L = r.L;
  const uint64_t scratch_bytes = std::max(
      model::gpu::attention_split_scratch_bytes(T, L, C, H),
      model::gpu::attention_tiled_scratch_bytes(C, H, ops.policy().tuning.attention_groups));
  const size_t n_probs = size_t{H} * T * L;
  vk::Arena arena(device,
                  (in.qkv.size() + 2 * in.k.size() + in.bias.size() + in.out.size() + n_probs) * 4 +
                      scratch_bytes + 65536,
                  vk::MemoryKind::Device, "test attention bias");
  const vk::BufferSpan qkv = test::to_gpu(device, arena, in.qkv),
                       kc = test::to_gpu(device, arena, in.k, r.cache),
                       vc = test::to_gpu(device, arena, in.v, r.cache),
                       bias = test::to_gpu(device, arena, in.bias);
  const vk::BufferSpan out = arena.alloc(in.out.size() * 4), probs = arena.alloc(n_probs * 4),
                       part = arena.alloc(scratch_bytes), step = arena.alloc(16);
  const uint32_t pos = L - T;
  vk::upload(device, step, &pos, sizeof(pos));
  model::gpu::AttentionOptions o;
  o.causal = r.causal;
  o.bias_span = 2 * kNctx - 1;
  o.bias = &bias;
  o.kernel = kernel;
  o.cache = r.cache;
  if (tap) o.probs = &probs;
  if (scratch || kernel == AttentionKernel::Split) o.scratch = &part;
  if (r.step) o.step = &step;
  vk::Recorder rec(device);
  rec.begin();
  if (r.store)
    model::gpu::attention_store(ops, rec,
                                {.out = out,
                                 .k_cache = kc,
                                 .v_cache = vc,
                                 .qkv = qkv,
                                 .T = T,
                                 .pos = pos,
                                 .C = C,
                                 .H = H,
                                 .options = o});
  else
    model::gpu::attention(ops, rec,
                          {.out = out,
                           .q = qkv,
                           .k_cache = kc,
                           .v_cache = vc,
                           .q_stride = 3 * C,
                           .T = T,
                           .L = L,
                           .C = C,
                           .H = H,
                           .options = o});
  rec.run();
  const std::string what = describe(s, r) + " (" + kernel_name(kernel) + (tap ? ", tap" : "") +
                           (scratch ? ", scratch" : "") + ")";
  CHECK(test::close(what + " out", test::from_gpu(device, out, in.out.size()), in.out, kTol));
  if (tap)
    CHECK(test::close(what + " probs", test::from_gpu(device, probs, n_probs), in.probs, kTol));
  if (r.store) {  // the new rows, as kv_store writes them
    std::vector<float> k = in.k, v = in.v;
    model::cpu::kv_store(k.data(), v.data(), in.qkv.data(), T, C, pos, r.cache);
    const size_t first = size_t{pos} * C, n = size_t{T} * C;
    const std::vector<float> got_k = test::from_gpu(device, kc, size_t{L} * C, r.cache),
                             got_v = test::from_gpu(device, vc, size_t{L} * C, r.cache);
    CHECK(test::close(what + " k rows", std::span(got_k).subspan(first, n),
                      std::span(k).subspan(first, n), {0, 0}));
    CHECK(test::close(what + " v rows", std::span(got_v).subspan(first, n),
                      std::span(v).subspan(first, n), {0, 0}));
  }
}

// The run on every kernel that takes it: without and with the tap, Tiled without and with
// scratch (its key ranges).
void check_run(const model::gpu::Ops& ops, const Shape& s, const Run& r, unsigned seed,
               bool taps = true) {
  const Inputs in = make_inputs(s, r, seed);
  const vk::DeviceCaps& caps = ops.device().caps();
  for (AttentionKernel kernel : {AttentionKernel::Portable, AttentionKernel::Texel,
                                 AttentionKernel::Split, AttentionKernel::Tiled})
    for (const bool tap : {false, true}) {
      if ((tap && !taps) || !runs(caps, kernel, s, r, tap)) continue;
      check_kernel(ops, kernel, s, r, in, tap, false);
      if (kernel == AttentionKernel::Tiled) check_kernel(ops, kernel, s, r, in, tap, true);
    }
}

constexpr Shape kShapes[] = {{512, 8}, {768, 12}};  // T5-small's D = 64, with 8 and 12 heads

TEST_CASE("attention with a relative position bias: prefill, every kernel, both masks") {
  GPU_TEST(g);
  unsigned seed = 100;
  for (const Shape& s : kShapes)
    for (const bool causal : {true, false})
      for (const uint32_t L : {1u, 65u, 300u}) {
        CAPTURE(describe(s, {L, L, causal}));
        check_run(g.kernels, s, {L, L, causal}, seed += 10, L != 300 || s.H == 8);
      }
}

TEST_CASE("attention with a relative position bias: decode and T < L, every kernel") {
  GPU_TEST(g);
  unsigned seed = 200;
  for (const Shape& s : kShapes) {
    for (const uint32_t L : {64u, 65u, 129u, 300u})
      check_run(g.kernels, s, {1, L, true}, seed += 10);
    check_run(g.kernels, s, {1, 300, false}, seed += 10, false);
    for (const bool causal : {true, false}) check_run(g.kernels, s, {17, 200, causal}, seed += 10);
    check_run(g.kernels, s, {5, 300, true}, seed += 10, false);
  }
}

TEST_CASE("attention with a relative position bias: fp16 caches") {
  GPU_TEST(g);
  unsigned seed = 300;
  const Shape s{512, 8};
  for (const Run r : {Run{65, 65, true, DType::F16}, Run{1, 300, true, DType::F16},
                      Run{17, 200, false, DType::F16}, Run{300, 300, true, DType::F16}})
    check_run(g.kernels, s, r, seed += 10, r.T != 300);
}

TEST_CASE("attention with a relative position bias: the position read at run time") {
  // The table is checked against the caches' rows (n_ctx) and the kernels take each query's
  // position from the Step binding.
  GPU_TEST(g);
  unsigned seed = 400;
  for (const Shape& s : kShapes)
    for (const DType cache : {DType::F32, DType::F16}) {
      check_run(g.kernels, s, {1, 300, true, cache, false, true}, seed += 10);
      check_run(g.kernels, s, {17, 200, true, cache, false, true}, seed += 10);
    }
}

TEST_CASE("attention_store with a relative position bias: the fused stores, every kernel") {
  // The texel kernel's fused store (attention_texel_store{,_probs}: a workgroup per decoded
  // query and its new key from q; an invocation per query in prefill), the split kernel's, and
  // kv_store then attention for the others; prefill from an empty cache, a chunk, decode steps.
  GPU_TEST(g);
  unsigned seed = 500;
  for (const Shape& s : kShapes)
    for (const DType cache : {DType::F32, DType::F16})
      for (Run r : {Run{65, 65, true}, Run{1, 1, true}, Run{1, 300, true}, Run{5, 105, true},
                    Run{40, 300, false}, Run{17, 200, true}}) {
        if (cache == DType::F16 && s.H == 12 && r.T > 1) continue;
        r.cache = cache;
        r.store = true;
        check_run(g.kernels, s, r, seed += 10);
        if (r.T == 1) {  // a decode step as the model records it
          r.step = true;
          check_run(g.kernels, s, r, seed += 10, false);
        }
      }
}

TEST_CASE("attention_store_batch with a relative position bias, both kernel sets") {
  // Each row is its own sequence's decode step: its position from the rows table, its bias at
  // distances j - pos. Against the reference and bit for bit against the step alone.
  GPU_TEST(gpu);
  const uint32_t C = 512, H = 8, S = 4, rows = 300, B = 3, longest = 300;
  const uint32_t slot[B] = {2, 0, 3}, pos[B] = {0, 299, 130};
  const std::vector<float> table = bias_table(H, rows - 1, 600);
  const uint32_t span = 2 * rows - 1;
  for (vk::KernelSet set : test::kKernelSets)
    for (DType cache : {DType::F32, DType::F16}) {
      const vk::Device& g = gpu.with_kernels(set);
      const vk::DeviceCaps& caps = g.caps();
      const bool f16 = cache == DType::F16;
      const bool texel = model::gpu::Ops(g).policy().texel_attention && !f16;
      if (texel && !caps.storage_texel_buffers) continue;
      CAPTURE(texel);
      CAPTURE(f16);
      const uint64_t eb = model::dtype_bytes(cache);
      const uint64_t stride =
          vk::align_up(uint64_t{rows} * C * eb + 256, model::gpu::texel_binding_alignment(caps)) /
          eb;
      std::vector<float> k_ref = test::random_floats(stride * S, 610),
                         v_ref = test::random_floats(stride * S, 611);
      if (f16)
        for (std::vector<float>* r : {&k_ref, &v_ref})
          for (float& x : *r) x = model::cpu::round_to_half(x);
      const std::vector<float> qkv = test::random_floats(size_t{B} * 3 * C, 612);
      const uint64_t scratch_bytes = model::gpu::attention_split_scratch_bytes(B, longest, C, H);
      vk::Arena arena(
          g, (4 * k_ref.size() + 4 * qkv.size() + table.size()) * 4 + 2 * scratch_bytes + 65536,
          vk::MemoryKind::Device, "test attention_store_batch bias");
      const vk::BufferSpan k = test::to_gpu(g, arena, k_ref, cache),
                           v = test::to_gpu(g, arena, v_ref, cache),
                           k1 = test::to_gpu(g, arena, k_ref, cache),
                           v1 = test::to_gpu(g, arena, v_ref, cache),
                           q = test::to_gpu(g, arena, qkv), bias = test::to_gpu(g, arena, table);
      const vk::BufferSpan scratch = arena.alloc(scratch_bytes),
                           scratch1 = arena.alloc(scratch_bytes);
      std::vector<uint32_t> rows_table;
      for (uint32_t b = 0; b < B; b++)
        rows_table.insert(rows_table.end(), {pos[b], uint32_t(slot[b] * stride * eb / 16)});
      const vk::BufferSpan rows_gpu = arena.alloc(rows_table.size() * 4);
      vk::upload(g, rows_gpu, rows_table.data(), rows_table.size() * 4);
      const vk::BufferSpan out = arena.alloc(size_t{B} * C * 4);
      model::gpu::AttentionOptions o;
      o.scratch = &scratch;
      o.cache = cache;
      o.bias_span = span;
      o.bias = &bias;
      vk::Recorder rec(g);
      rec.begin();
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
      model::gpu::AttentionOptions one = o;
      one.kernel = texel ? AttentionKernel::Texel : AttentionKernel::Split;
      one.scratch = &scratch1;
      std::vector<vk::BufferSpan> alone;
      for (uint32_t b = 0; b < B; b++) {
        alone.push_back(arena.alloc(size_t{C} * 4));
        model::gpu::attention_store(
            model::gpu::Ops(g), rec,
            {.out = alone.back(),
             .k_cache = k1.sub(slot[b] * stride * eb, uint64_t{rows} * C * eb),
             .v_cache = v1.sub(slot[b] * stride * eb, uint64_t{rows} * C * eb),
             .qkv = q.sub(b * 3 * C * 4, 3 * C * 4),
             .T = 1,
             .pos = pos[b],
             .C = C,
             .H = H,
             .options = one});
      }
      rec.run();
      const std::vector<float> got = test::from_gpu(g, out, size_t{B} * C);
      std::vector<float> kr = k_ref, vr = v_ref;
      for (uint32_t b = 0; b < B; b++) {
        const std::string what = std::string(texel ? "texel" : "split") + (f16 ? " fp16" : "") +
                                 " row " + std::to_string(b) + " pos " + std::to_string(pos[b]);
        const std::span<const float> row(got.data() + b * C, C);
        CHECK(test::close(what + " against alone", row, test::from_gpu(g, alone[b], C), {0, 0}));
        model::cpu::kv_store(kr.data() + slot[b] * stride, vr.data() + slot[b] * stride,
                             qkv.data() + b * 3 * C, 1, C, pos[b], cache);
        std::vector<float> ref(C);
        model::cpu::attention(ref.data(), qkv.data() + b * 3 * C, 3 * size_t{C},
                              kr.data() + slot[b] * stride, vr.data() + slot[b] * stride, 1,
                              pos[b] + 1, C, H, {true, 0, span}, nullptr, table.data());
        CHECK(test::close(what + " against the reference", row, ref, kTol));
      }
    }
}

TEST_CASE("attention with a relative position bias rejects bad tables; training has none") {
  GPU_TEST(g);
  const vk::Device& device = g.device;
  const uint32_t C = 64, H = 4, T = 4, n_ctx = 16;
  vk::Arena arena(device, 1 << 20, vk::MemoryKind::Device, "test attention bias errors");
  const vk::BufferSpan qkv = arena.alloc(T * 3 * C * 4), k = arena.alloc(n_ctx * C * 4),
                       v = arena.alloc(n_ctx * C * 4), out = arena.alloc(T * 3 * C * 4),
                       table = arena.alloc(H * 64 * 4), step = arena.alloc(16),
                       rows = arena.alloc(T * 8),
                       scratch =
                           arena.alloc(model::gpu::attention_split_scratch_bytes(T, n_ctx, C, H));
  auto options = [&](uint32_t span, const vk::BufferSpan* bias) {
    model::gpu::AttentionOptions o;
    o.bias_span = span;
    o.bias = bias;
    o.scratch = &scratch;
    return o;
  };
  auto attention = [&](uint32_t L, const model::gpu::AttentionOptions& o) {
    vk::Recorder rec(device);
    rec.begin();
    model::gpu::attention(g.kernels, rec,
                          {.out = out,
                           .q = qkv,
                           .k_cache = k,
                           .v_cache = v,
                           .q_stride = 3 * C,
                           .T = T,
                           .L = L,
                           .C = C,
                           .H = H,
                           .options = o});
  };
  auto store = [&](uint32_t pos, model::gpu::AttentionOptions o, bool at_run_time) {
    if (at_run_time) o.step = &step;
    vk::Recorder rec(device);
    rec.begin();
    model::gpu::attention_store(g.kernels, rec,
                                {.out = out,
                                 .k_cache = k,
                                 .v_cache = v,
                                 .qkv = qkv,
                                 .T = T,
                                 .pos = pos,
                                 .C = C,
                                 .H = H,
                                 .options = o});
  };
  CHECK_NOTHROW(attention(8, options(15, &table)));  // R = 7 = L - 1
  CHECK_THROWS_WITH_AS(attention(8, options(14, &table)),
                       doctest::Contains("bias_span = 14 is even"), vk::Error);
  CHECK_THROWS_WITH_AS(attention(8, options(13, &table)),
                       doctest::Contains("R = 6, but L = 8 positions need R >= 7"), vk::Error);
  CHECK_THROWS_WITH_AS(attention(8, options(15, nullptr)),
                       doctest::Contains("no relative position bias table"), vk::Error);
  CHECK_THROWS_WITH_AS(attention(8, options(0, &table)), doctest::Contains("bias_span = 0"),
                       vk::Error);
  const vk::BufferSpan little = table.sub(0, H * 15 * 4 - 4);
  CHECK_THROWS_WITH_AS(attention(8, options(15, &little)), doctest::Contains("bias"), vk::Error);
  // Positions read at run time: the table must reach every row of the caches.
  CHECK_NOTHROW(store(4, options(15, &table), false));
  CHECK_THROWS_WITH_AS(store(4, options(15, &table), true),
                       doctest::Contains("the cache's n_ctx = 16 positions need R >= 15"),
                       vk::Error);
  CHECK_NOTHROW(store(4, options(31, &table), true));
  {  // the batch: against its longest row
    vk::Recorder rec(device);
    rec.begin();
    const model::gpu::AttentionStoreBatchArgs a{.out = out,
                                                .k_caches = k,
                                                .v_caches = v,
                                                .qkv = qkv,
                                                .rows = rows,
                                                .T = T,
                                                .max_len = 12,
                                                .C = C,
                                                .H = H,
                                                .options = options(21, &table)};
    if (model::gpu::attention_store_batch_unsupported(g.kernels, a).empty())
      CHECK_THROWS_WITH_AS(model::gpu::attention_store_batch(g.kernels, rec, a),
                           doctest::Contains("max_len = 12 positions need R >= 11"), vk::Error);
  }
  // Training's kernels have no bias.
  const vk::BufferSpan stats = arena.alloc(model::gpu::attention_backward_stats_bytes(1, T, H));
  for (const bool backward : {false, true}) {
    vk::Recorder rec(device);
    rec.begin();
    const model::AttentionSpec spec{true, 0, 15};
    if (backward)
      CHECK_THROWS_WITH_AS(
          model::gpu::attention_backward(g.kernels, rec,
                                         {.dq = qkv,
                                          .dk = qkv,
                                          .dv = qkv,
                                          .stats = stats,
                                          .dout = out,
                                          .q = qkv,
                                          .k = qkv,
                                          .v = qkv,
                                          .rows = model::self_attention_rows(1, T, C, H),
                                          .spec = spec}),
          doctest::Contains("relative position bias has no training kernels yet"), vk::Error);
    else
      CHECK_THROWS_WITH_AS(
          model::gpu::attention_sequences(g.kernels, rec,
                                          {.out = out,
                                           .q = qkv,
                                           .k = qkv,
                                           .v = qkv,
                                           .rows = model::self_attention_rows(1, T, C, H),
                                           .spec = spec}),
          doctest::Contains("relative position bias has no training kernels yet"), vk::Error);
  }
}

}  // namespace
