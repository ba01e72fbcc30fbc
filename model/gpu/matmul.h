// Host wrapper of shaders/matmul.comp (tiled, for prefill) and shaders/matmul_vec.comp
// (matrix-vector, for decode): the linear layer y = act(x W + b) + residual.
#pragma once
#include "model/gpu/common.h"
#include "shaders/matmul.h"

namespace gpu {

enum class WeightLayout : uint32_t {
  KN = push::MATMUL_KN,  // W [K, N], y = x W: Hugging Face GPT-2 Conv1D (c_attn, c_proj, c_fc)
  NK = push::MATMUL_NK,  // W [N, K], y = x W^T: rows are outputs (the tied head reading wte)
};

enum class MatmulKernel : uint32_t {
  Auto,    // Vector for T <= kMatmulVecRows, else Tiled
  Vector,  // matmul_vec: each weight read once per kMatmulVecRows rows
  Tiled,   // matmul: shared-memory tiles
};

// Rows of x the matrix-vector kernel handles in one pass (larger T loops over passes).
constexpr uint32_t kMatmulVecRows = 8;

struct MatmulOptions {
  WeightLayout layout = WeightLayout::KN;
  Activation act = Activation::None;  // applied after the bias, before the residual add
  MatmulKernel kernel = MatmulKernel::Auto;
  // The first row of x read: x rows [x_row, x_row + T) feed out rows [0, T). The head reads
  // only the last position's row this way, wherever its offset falls against the alignment.
  uint32_t x_row = 0;
};

// out[t, n] = act(sum_k x[t, k] W(k, n) + bias[n]) + residual[t, n], accumulated in fp32.
//   [T, K] x [K, N] (or [N, K]) + [N] + [T, N] -> [T, N]
// bias and residual may be null. residual may be out itself (the in-place residual stream) but
// must not overlap it otherwise; x, W and bias must not overlap out.
// Tensors larger than the device's maxStorageBufferRange are split into several dispatches:
// W into blocks of whole rows (of N for [N, K], of K for [K, N], whose partial sums accumulate in
// out), x and out into blocks of rows. One row of x, out and W must each fit in the range. A
// split over K cannot keep an in-place residual alive under an activation; that case throws.
void matmul(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
            const vkr::BufferSpan& x, const Weight& w, const vkr::BufferSpan* bias,
            const vkr::BufferSpan* residual, uint32_t T, uint32_t K, uint32_t N,
            const MatmulOptions& options = {});

}  // namespace gpu
