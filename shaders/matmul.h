// Push constants of shaders/matmul.comp (tiled) and shaders/matmul_vec.comp (matrix-vector),
// shared by GLSL and C++ (see shaders/common/types.h). Both kernels have the same interface.
#ifndef GPT2VK_MATMUL_H
#define GPT2VK_MATMUL_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// Weight layout, a specialization constant.
CONST MATMUL_KN = 0;  // W [K, N]: Hugging Face GPT-2 Conv1D, y = x W
CONST MATMUL_NK = 1;  // W [N, K]: rows are outputs, y = x W^T (the tied head reading wte)
// W [N, K] in blocks of B = MATMUL_BLOCK_ROWS rows, each block's texels of E elements (16 bytes)
// interleaved row by row: texel (n, kt) at (n / B * K / E + kt) * B + n % B
// (matmul_interleaved.glsl).
CONST MATMUL_INTERLEAVED = 2;
CONST MATMUL_BLOCK_ROWS = 64;

// Shared arrays have these sizes, in floats, whatever the specialization: spirv-cross makes an
// array sized by a specialization constant a variable-length array in MSL, which Metal rejects.
// The host keeps its choices within them; each kernel's total is within the 16 KiB of shared
// memory that every Vulkan device has.
// matmul.comp: each of the x and W tiles, BK * BM and BK * BN, up to 16 x 64 (8 KiB in all).
CONST MATMUL_TILE_MAX = 1024;
// matmul_vec.comp: ROWS * invocations partial sums, 8 rows x 256 (8 KiB).
CONST MATMUL_VEC_MAX_PARTIAL = 2048;
// matmul_vec_texel.comp: ROWS * invocations * 8 partial sums, 8 rows x 64 x 8 (16 KiB).
CONST MATMUL_TEXEL_MAX_PARTIAL = 4096;
// matmul_vec_wide.comp: workgroup size x rows of x x outputs per workgroup (8 KiB); a fused
// LayerNorm's statistics (2 sums per row) use it too, so MATMUL_WIDE_MAX_OUTS is at least 2.
CONST MATMUL_WIDE_MAX_WORKGROUP = 128;
CONST MATMUL_WIDE_MAX_ROWS = 8;
CONST MATMUL_WIDE_MAX_OUTS = 4;

// matmul_coop.glsl (matmul_coop*.comp on matrix units, matmul_coop_emulated*.comp without): a
// workgroup of MATMUL_COOP_SUBGROUPS subgroups of MATMUL_COOP_LANES computes a tile of out of
// 64 x 64 (matmul_coop.comp: 2 x 2 fragments of F x F per subgroup) or 128 x 128 (*_large: 4 x 4),
// K staged BK at a time in shared rows padded by 16 bytes.
CONST MATMUL_COOP_F = 16;
CONST MATMUL_COOP_BK = 32;
CONST MATMUL_COOP_LANES = 32;
CONST MATMUL_COOP_SUBGROUPS = 4;
CONST MATMUL_COOP_SMALL = 64;   // the tiles' sides
CONST MATMUL_COOP_LARGE = 128;

// Epilogue steps of one dispatch (bits of MatmulPush::flags). A call whose weight is split into
// chunks spreads them over its dispatches: bias on the first, accumulation on the later ones.
CONST MATMUL_BIAS = 1;        // v += bias[n]
CONST MATMUL_RESIDUAL = 2;    // v = act(v) + residual[t, n]
CONST MATMUL_ACCUMULATE = 4;  // v += out[t, n]: add to an earlier chunk's partial sums
// matmul_interleaved.glsl takes the activation (an ACT_* value) at run time, in the bits of
// flags from this one up, rather than as specialization constant 5: one pipeline then serves
// every projection of a block, and lavapipe compiles each large tile once instead of per
// activation (a few seconds each with the cache cold); the branch is in the epilogue only.
CONST MATMUL_ACT_SHIFT = 8;

// One dispatch: out[t, n_base + n] = act(sum_k x[t, k_base + k] w(k, n) + ...) + ... for
// t < rows, n < n_count, k < k_count, where w is the chunk of W the weight binding holds. x, W,
// out and residual are bound as windows that start at an aligned offset at or before their
// first element; *_off is where that element is. bias is bound whole.
struct MatmulPush {
  uint rows;     // rows of x and out this dispatch computes
  uint K;        // row stride of x
  uint N;        // row stride of out and residual
  uint k_base;   // first k summed (chunks of W [K, N] split K)
  uint k_count;  // k summed; the row length of a chunk of W [N, K]
  uint n_base;   // first output (chunks of W [N, K] split N)
  uint n_count;  // outputs; the row length of a chunk of W [K, N]
  uint x_off;    // element offsets of the windows
  uint w_off;
  uint out_off;
  uint res_off;
  uint flags;  // MATMUL_BIAS | MATMUL_RESIDUAL | MATMUL_ACCUMULATE (| act << MATMUL_ACT_SHIFT)
  float eps;   // matmul_interleaved.glsl with a fused LayerNorm: its epsilon
};

// interleave.comp: a 32-bit W [N, K] from `from` (MATMUL_KN or MATMUL_NK) into the Interleaved
// layout.
struct InterleavePush {
  uint K;
  uint N;
  uint from;  // MATMUL_KN or MATMUL_NK
};
PUSH_NAMESPACE_END

#endif
