#include "tests/attention_case.h"

#include <doctest/doctest.h>

#include "model/ops/cpu/attention.h"
#include "model/ops/gpu/choose.h"
#include "shaders/attention.h"
#include "tests/gpu.h"

namespace test::attention {

Inputs make_inputs(const Case& c, unsigned seed, float lo, float hi) {
  return {test::random_floats(size_t{c.T} * 3 * c.C, seed, lo, hi),
          test::random_floats(size_t{c.L} * c.C, seed + 1, lo, hi),
          test::random_floats(size_t{c.L} * c.C, seed + 2)};
}

void record(const model::gpu::Ops& kernels, vk::Recorder& rec, const Case& c,
            const vk::BufferSpan& out, const vk::BufferSpan& qkv, const vk::BufferSpan& k,
            const vk::BufferSpan& v, const model::gpu::AttentionOptions& options) {
  model::gpu::attention(kernels, rec,
                        {.out = out,
                         .q = qkv,
                         .k_cache = k,
                         .v_cache = v,
                         .q_stride = 3 * c.C,
                         .T = c.T,
                         .L = c.L,
                         .C = c.C,
                         .H = c.H,
                         .options = options});
}

std::vector<float> run_gpu(const model::gpu::Ops& kernels, const Case& c, const Inputs& in,
                           std::string* shader, bool scratch, std::vector<float>* probs) {
  const vk::Device& device = kernels.device();
  const bool split = scratch || c.options.kernel == model::gpu::AttentionKernel::Split;
  const uint64_t scratch_bytes =
      split ? model::gpu::attention_split_scratch_bytes(c.T, c.L, c.C, c.H) : 0;
  const size_t n_probs = probs ? size_t{c.H} * c.T * c.L : 0;
  const size_t bytes =
      (in.qkv.size() + in.k_cache.size() * 2 + size_t{c.T} * c.C + n_probs) * sizeof(float);
  vk::Arena arena(device, bytes + scratch_bytes + 8192, vk::MemoryKind::Device, "test attention");
  vk::BufferSpan qkv = test::to_gpu(device, arena, in.qkv),
                 k = test::to_gpu(device, arena, in.k_cache),
                 v = test::to_gpu(device, arena, in.v_cache);
  vk::BufferSpan out = arena.alloc(size_t{c.T} * c.C * sizeof(float));
  model::gpu::AttentionOptions options = c.options;
  vk::BufferSpan part, tap;
  if (split) {
    part = arena.alloc(scratch_bytes);
    options.scratch = &part;
  }
  if (probs) {
    tap = arena.alloc(n_probs * sizeof(float));
    options.probs = &tap;
  }
  vk::Recorder rec(device, shader != nullptr);
  rec.begin();
  record(kernels, rec, c, out, qkv, k, v, options);
  rec.run();
  if (shader) {  // the split kernel's two dispatches as "attention_split+attention_merge"
    const std::vector<vk::DispatchTime> t = rec.timings();
    REQUIRE((t.size() == 1 || t.size() == 2));
    *shader = t[0].shader + (t.size() == 2 ? "+" + t[1].shader : "");
  }
  if (probs) *probs = test::from_gpu(device, tap, n_probs);
  return test::from_gpu(device, out, size_t{c.T} * c.C);
}

std::vector<float> run_cpu(const Case& c, const Inputs& in) {
  std::vector<float> ref(size_t{c.T} * c.C);
  model::cpu::attention(ref.data(), in.qkv.data(), 3 * size_t{c.C}, in.k_cache.data(),
                        in.v_cache.data(), c.T, c.L, c.C, c.H, c.options);
  return ref;
}

std::string name(const char* what, const Case& c) {
  return std::string(what) + " T=" + std::to_string(c.T) + " L=" + std::to_string(c.L) +
         " C=" + std::to_string(c.C) + " H=" + std::to_string(c.H) +
         (c.options.causal ? " causal" : " bidirectional") +
         (c.options.kernel == model::gpu::AttentionKernel::Texel   ? " (texel)"
          : c.options.kernel == model::gpu::AttentionKernel::Split ? " (split)"
          : c.options.kernel == model::gpu::AttentionKernel::Tiled ? " (tiled)"
                                                                   : " (portable)");
}

bool split_runs(const vk::DeviceCaps& caps, const Case& c) {
  const uint32_t D = c.C / c.H;
  return D % 4 == 0 && D <= push::ATTENTION_SPLIT_MAX_D &&
         caps.max_workgroup_invocations >= push::ATTENTION_SPLIT_WG &&
         caps.max_workgroup_size[0] >= push::ATTENTION_SPLIT_WG && caps.max_shared_memory >= 9728;
}

bool tiled_runs(const vk::DeviceCaps& caps, const Case& c) {
  const uint32_t D = c.C / c.H;
  const uint32_t shared = (push::ATTENTION_TILED_TILE * 4 +
                           push::ATTENTION_TILED_QUERIES * (push::ATTENTION_TILED_KEYS + 1) +
                           push::ATTENTION_TILED_WG) *
                          4;
  return D % 4 == 0 && D <= push::ATTENTION_TILED_MAX_D &&
         caps.max_workgroup_invocations >= push::ATTENTION_TILED_WG &&
         caps.max_workgroup_size[0] >= push::ATTENTION_TILED_WG && caps.max_shared_memory >= shared;
}

bool texel_runs(const vk::DeviceCaps& caps, const Case& c) {
  const uint32_t D = c.C / c.H;
  return caps.storage_texel_buffers && D % 4 == 0 && D <= model::gpu::kAttentionTexelMaxD;
}

std::string auto_shader(const model::gpu::Ops& kernels, const Case& c, bool texel_fits) {
  using model::gpu::AttentionKernel;
  const vk::DeviceCaps& caps = kernels.device().caps();
  for (AttentionKernel k : model::gpu::attention_order(kernels.policy(), c.T)) {
    if (k == AttentionKernel::Texel && texel_fits && texel_runs(caps, c)) return "attention_texel";
    if (k == AttentionKernel::Tiled && tiled_runs(caps, c)) return "attention_tiled";
  }
  return "attention";
}

void check_case(const model::gpu::Ops& kernels, Case c, unsigned seed, const char* what, float lo,
                float hi) {
  Inputs in = make_inputs(c, seed, lo, hi);
  const std::vector<float> ref = run_cpu(c, in);
  c.options.kernel = model::gpu::AttentionKernel::Portable;
  CHECK(test::close(name(what, c), run_gpu(kernels, c, in), ref, kTol));
  if (c.T <= 64 && split_runs(kernels.device().caps(), c)) {
    c.options.kernel = model::gpu::AttentionKernel::Split;
    CHECK(test::close(name(what, c), run_gpu(kernels, c, in), ref, kTol));
  }
  if (tiled_runs(kernels.device().caps(), c)) {
    c.options.kernel = model::gpu::AttentionKernel::Tiled;
    CHECK(test::close(name(what, c), run_gpu(kernels, c, in), ref, kTol));
  }
  if (!texel_runs(kernels.device().caps(), c)) return;
  c.options.kernel = model::gpu::AttentionKernel::Texel;
  CHECK(test::close(name(what, c), run_gpu(kernels, c, in), ref, kTol));
}

}  // namespace test::attention
