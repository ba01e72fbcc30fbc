// How matmul carries out one call: the options a call gives, what each kernel can run, the
// kernel (choose.h's choice, or the one asked for), its pipelines and workgroup shape, and the
// blocks x, out and W split into to fit the device's binding limits. matmul() and
// matmul_argmax() record what the plan says.
#pragma once
#include <cstdint>

#include "model/ops/gpu/common.h"
#include "model/ops/gpu/kernels.h"

namespace model::gpu {

// The register tile of matmul_interleaved.glsl for more than one row of x: each workgroup takes
// kInterleavedRows rows of x (a dispatch takes all the rows, in workgroups along z), and
// kInterleavedLanes invocations share a block of 64 rows of W, 16 rows each. Every imageLoad is
// a per-lane gather on llvmpipe, so the larger the tile the fewer loads per product, until the
// accumulators spill (the tile sizes measured: docs/benchmark.md, "Tuning decisions"). One row
// (decoding) keeps 8 lanes.
constexpr uint32_t kInterleavedRows = 32;
constexpr uint32_t kInterleavedLanes = 4;

struct MatmulNorm {
  vk::BufferSpan gamma, beta;  // [K]; Rms has no beta (empty, not read)
  LayerNormKind kind = LayerNormKind::Standard;
  float eps = 1e-5f;
};

struct MatmulOptions {
  WeightLayout layout = WeightLayout::KN;
  Activation act = Activation::None;  // applied after the bias, before the residual add
  MatmulKernel kernel = MatmulKernel::Auto;
  // The first row of x read: x rows [x_row, x_row + T) feed out rows [0, T). The head reads
  // only the last position's row this way, wherever its offset falls against the alignment.
  uint32_t x_row = 0;
  // A LayerNorm of x's rows fused in front: out = act(layernorm(x) W + b) + r. Interleaved
  // weights, or the wide kernel (VectorWide: W [N, K], T <= kMatmulVecRows); gamma and beta [K]
  // fp32, spans on the kernel's binding alignment (texel or storage).
  const MatmulNorm* norm = nullptr;
};

// Whether VectorTexel can run this shape on this device: rgba32 storage texel buffers, K % 4 == 0
// and the weight's contiguous axis (N of [K, N], K of [N, K]) in whole texels (8 fp16, 4 fp32).
bool matmul_texel_supported(const vk::DeviceCaps& caps, DType dtype, WeightLayout layout,
                            uint32_t K, uint32_t N);
// Whether VectorWide can run this call: W [N, K], K in whole 16-byte vectors (8 fp16 or 4 fp32),
// and x's and W's spans starting on 16 bytes.
bool matmul_wide_supported(DType dtype, WeightLayout layout, uint32_t K, uint64_t x_offset,
                           uint64_t w_offset);
// Whether an Interleaved weight of this shape can run here: rgba32 storage texel buffers and
// K in whole texels (8 fp16 or 4 fp32 elements).
bool matmul_interleaved_supported(const vk::DeviceCaps& caps, DType dtype, uint32_t K);
// Whether a tile of `rows` rows of x runs matmul_interleaved_shuffle (x's loads shared through
// the subgroup) rather than matmul_interleaved: several rows, a CPU device with subgroup
// shuffles, and a workgroup of exactly one subgroup. Both give the same bits.
bool matmul_interleaved_shuffles(const vk::DeviceCaps& caps, uint32_t rows);


// How one call is carried out: the pipeline(s), and the blocks x, out and W are split into.
struct MatmulPlan {
  const vk::Pipeline* last = nullptr;   // with the activation
  const vk::Pipeline* plain = nullptr;  // without: K-chunks before the last
  uint32_t rows = 0;                     // rows of x and out per pass
  uint32_t chunk = 0;                    // rows of W per chunk (of N for [N, K], of K for [K, N])
  uint32_t out_per_group = 0;            // outputs one workgroup covers (vector kernel)
  uint32_t tile_bn = 0, tile_bm = 0;     // (tiled kernel)
  uint32_t tile_rows = 0;                // rows per workgroup along z (interleaved kernel)
  bool split_k = false;                  // W [K, N] in several chunks: plain is needed
  bool norm_bindings = false;            // gamma and beta at bindings 5 and 6 (a fused LayerNorm)
  uint64_t align = 0;                    // of every binding's offset
};

// The plan for out [T, N] = x [T, K] W: for matmul_argmax (`argmax`), the interleaved kernel's
// argmax variant.
MatmulPlan plan_matmul(const Ops& k, const MatmulOptions& o, const vk::BufferSpan& x,
                       const Weight& w, uint32_t T, uint32_t K, uint32_t N, bool argmax = false);
// Workgroups for one dispatch of n_count outputs over `rows` rows.
vk::Groups matmul_groups(const vk::Device& device, const MatmulPlan& plan, uint32_t n_count,
                         uint32_t rows);
// matmul_interleaved's workgroup on this device.
uint32_t interleaved_workgroup(const vk::DeviceCaps& caps);

}  // namespace model::gpu
