// One attention case (queries, keys and values of a shape, random in a range) run on the GPU and
// on the CPU reference, and which kernels take it: what tests/test_attention.cpp and
// tests/test_attention_choice.cpp share.
//
// Tolerance: atol 1e-6 + rtol 1e-5. Every output is a convex combination of V values in [-1, 1]
// that often nearly cancel, so the error is absolute on that scale and a pure relative bound would
// fail near zero. The GPU sums the D-term dot products and the L-term weighted sums in fp32, in
// another order (parts, chunks, key blocks, split keys), the texel kernel scales q before the dot
// product rather than after, and exp may be off by (3 + 2|x|) ulp (Vulkan's bound): a score's
// absolute error becomes the same relative error of its weight. Lavapipe stays within 1.5e-7
// absolute on every case here; the bound leaves room for a GPU's coarser exp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/ops/gpu/attention.h"
#include "tests/compare.h"

namespace test::attention {

constexpr test::Tolerance kTol{1e-6, 1e-5};

struct Case {
  uint32_t T, L, C, H;
  model::gpu::AttentionOptions options = {};
};

// The queries in the fused layout the model passes: qkv [T, 3C], q in columns [0, C). The caches
// hold L rows ([n_ctx = L, C]); the values are uniform in [lo, hi), V in [-1, 1).
struct Inputs {
  std::vector<float> qkv, k_cache, v_cache;
};

Inputs make_inputs(const Case& c, unsigned seed, float lo = -1, float hi = 1);

// Records model::gpu::attention of case c (the shape; q in the fused [T, 3C] layout of qkv) over
// these spans, with `options` (the case's own, or more).
void record(const model::gpu::Ops& kernels, vk::Recorder& rec, const Case& c,
            const vk::BufferSpan& out, const vk::BufferSpan& qkv, const vk::BufferSpan& k,
            const vk::BufferSpan& v, const model::gpu::AttentionOptions& options);

// Runs model::gpu::attention on the kernels' device (the shared one or a LoweredGpu) and reads out
// back; with `shader`, also the name of the shader it dispatched (the device must have timestamps).
// Split's scratch is allocated when the case asks for that kernel, or for Auto with `scratch`.
// With `probs`, the attention tap too: the softmax weights [H, T, L] read back into it.
std::vector<float> run_gpu(const model::gpu::Ops& kernels, const Case& c, const Inputs& in,
                           std::string* shader = nullptr, bool scratch = false,
                           std::vector<float>* probs = nullptr);
std::vector<float> run_cpu(const Case& c, const Inputs& in);

// The case's shape, mask and kernel, for messages.
std::string name(const char* what, const Case& c);

// Whether the split kernel takes this shape on this device (given scratch; the arenas here
// align every span to 16 bytes).
bool split_runs(const vk::DeviceCaps& caps, const Case& c);
// Whether the tiled kernel takes this shape on this device (the arenas align every span):
// 128-invocation workgroups and its shared arrays (11 KiB).
bool tiled_runs(const vk::DeviceCaps& caps, const Case& c);
// Whether the texel kernel takes this shape on this device: the arenas here align every span.
bool texel_runs(const vk::DeviceCaps& caps, const Case& c);

// The shader Auto runs c with on `kernels`, given no scratch: the first of its policy's kernels
// that takes c (the texel kernel only where `texel_fits`; the split one needs scratch). On a
// CPU device the texel kernel or the portable one; on a GPU the tiled one for prompts.
std::string auto_shader(const model::gpu::Ops& kernels, const Case& c, bool texel_fits = true);

// The case on the portable kernel, on the split one where it runs (up to 64 queries: it is
// decode's, and each query re-reads the keys), on the tiled one and on the texel kernel where
// they run.
void check_case(const model::gpu::Ops& kernels, Case c, unsigned seed, const char* what,
                float lo = -1, float hi = 1);

}  // namespace test::attention
