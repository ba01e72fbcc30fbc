// Host wrapper of shaders/matmul.comp (tiled, for prefill), the matrix-vector kernels for decode
// (matmul_vec.comp; matmul_vec_wide*.comp, the GPU set's, for W [N, K]; matmul_vec_texel.comp)
// and matmul_interleaved.glsl (the CPU set's): the linear layer y = act(x W + b) + residual.
#pragma once
#include "model/ops/gpu/common.h"
#include "model/ops/gpu/kernels.h"
#include "model/ops/gpu/layernorm.h"
#include "shaders/matmul.h"

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

// out[t, n] = act(sum_k x[t, k] W(k, n) + bias[n]) + residual[t, n], accumulated in fp32.
//   [T, K] x [K, N] (or [N, K]) + [N] + [T, N] -> [T, N]
// bias and residual may be null. residual may be out itself (the in-place residual stream) but
// must not overlap it otherwise; x, W and bias must not overlap out.
// Tensors larger than the device's maxStorageBufferRange (or, for VectorTexel, whose texels
// exceed maxTexelBufferElements) are split into several dispatches:
// W into blocks of whole rows (of N for [N, K], of K for [K, N], whose partial sums accumulate in
// out), x and out into blocks of rows. One row of x, out and W must each fit in the range. A
// split over K cannot keep an in-place residual alive under an activation; that case throws.
struct MatmulArgs {
  vk::BufferSpan out;                        // [T, N]
  vk::BufferSpan x;                          // [options.x_row + T, K]
  Weight w;                                  // [K, N] or [N, K], as options.layout says
  const vk::BufferSpan* bias = nullptr;      // [N]
  const vk::BufferSpan* residual = nullptr;  // [T, N]; may be out itself
  uint32_t T = 0, K = 0, N = 0;
  MatmulOptions options;
};
void matmul(const Ops& ops, vk::Recorder& rec, const MatmulArgs& a);

}  // namespace model::gpu
