// The interface and epilogue shared by matmul.comp (tiled) and matmul_vec.comp (matrix-vector):
// the same bindings, push constants and specialization constants 3-5, so the host drives both
// the same way.
#include "matmul.h"
#include "common/activation.glsl"

layout(constant_id = 3) const uint LAYOUT = MATMUL_KN;  // MATMUL_KN or MATMUL_NK
layout(constant_id = 4) const uint DTYPE = DTYPE_F32;   // of the weight
layout(constant_id = 5) const uint ACT = ACT_NONE;      // applied before the residual add

// The texel-buffer kernels (MATMUL_TEXEL defined) declare bindings 1 and 2 as storage texel
// buffers instead and read them themselves; matmul_vec_wide.comp (MATMUL_WIDE) as 16-byte
// vectors.
// out is read as well as written: a later chunk adds to an earlier one's partial sums, and the
// residual may be out itself (the in-place residual stream).
layout(binding = 0) buffer Out { float out_[]; };             // [T, N]
#if !defined(MATMUL_TEXEL) && !defined(MATMUL_WIDE)
layout(binding = 1) readonly buffer X { float x[]; };         // [T, K]
layout(binding = 2) readonly buffer W { uint w[]; };          // [K, N] or [N, K]: fp32 bits or fp16 pairs
#endif
layout(binding = 3) readonly buffer Bias { float bias[]; };   // [N]
layout(binding = 4) readonly buffer Res { float residual[]; };  // [T, N]
layout(push_constant) uniform Push { MatmulPush p; };

#if !defined(MATMUL_TEXEL) && !defined(MATMUL_WIDE)
// Element (k, n) of the weight chunk, k < p.k_count, n < p.n_count.
float weight(uint k, uint n) {
  uint i = p.w_off + (LAYOUT == MATMUL_NK ? n * p.k_count + k : k * p.n_count + n);
  if (DTYPE == DTYPE_F16) return unpackHalf2x16(w[i >> 1])[i & 1];
  return uintBitsToFloat(w[i]);
}

// x[t, k_base + k]
float x_at(uint t, uint k) { return x[p.x_off + t * p.K + p.k_base + k]; }
#endif

// Writes out[t, n_base + n] from the sum over this dispatch's k.
void store(uint t, uint n, float v) {
  uint o = p.out_off + t * p.N + p.n_base + n;
  if ((p.flags & MATMUL_ACCUMULATE) != 0) v += out_[o];
  if ((p.flags & MATMUL_BIAS) != 0) v += bias[p.n_base + n];
#ifdef MATMUL_ACT_IN_FLAGS
  v = activate(v, p.flags >> MATMUL_ACT_SHIFT);
#else
  v = activate(v, ACT);
#endif
  if ((p.flags & MATMUL_RESIDUAL) != 0) v += residual[p.res_off + t * p.N + p.n_base + n];
  out_[o] = v;
}
