#version 450
// The tiled matrix product in the shape of cooperative-matrix hardware (VK_KHR_cooperative_matrix:
// 16 x 16 x 16 fragments, fp16 in, fp32 accumulate), its fragment operations emulated with
// shared memory and scalar arithmetic, so that the tiling, staging, padding and epilogue run and
// are tested on a device without matrix units (lavapipe). out[t, n] = act(x[t] . w(:, n) + b[n])
// + r[t, n].
//
// A workgroup computes a BM x BN = 32 x 32 tile of out with 4 subgroups of 32 lanes, subgroup s
// owning the 16 x 16 fragment (s / 2, s % 2). Per step of BK = 16 along K, the workgroup stages
// A = x[m0 .., k0 ..] as [BM][BK] and B = W[k0 .., n0 ..] as [BN][BK] (column-major K x N: W
// [N, K] rows are contiguous along K) in shared memory, rounded to fp16 as the hardware's inputs
// are; then each subgroup does coopMatLoad(A frag), coopMatLoad(B frag), coopMatMulAdd. The
// emulated subgroup keeps the accumulator as the hardware's opaque fragment would be spread:
// lane l holds elements l, l + 32, ... of the row-major 16 x 16 block. At the end each fragment
// goes to shared memory (coopMatStore) and the workgroup applies the epilogue element by
// element. The products of fp16 values are exact in fp32, so only the order of the fp32 sums
// differs from a matrix unit.
#extension GL_GOOGLE_include_directive : require
#include "matmul.glsl"

layout(local_size_x = MATMUL_COOP_LANES * MATMUL_COOP_SUBGROUPS) in;

const uint F = MATMUL_COOP_F, BM = MATMUL_COOP_BM, BN = MATMUL_COOP_BN, BK = MATMUL_COOP_BK;
const uint LANES = MATMUL_COOP_LANES, WG = MATMUL_COOP_LANES * MATMUL_COOP_SUBGROUPS;
const uint AB = MATMUL_COOP_AB_STRIDE, CS = MATMUL_COOP_C_STRIDE;

shared float a_sh[BM * AB];  // [BM][BK], rows padded to AB
shared float b_sh[BN * AB];  // [BN][BK]
shared float c_sh[BM * CS];  // [BM][BN], rows padded to CS

float to_f16(float v) {
  return unpackHalf2x16(packHalf2x16(vec2(v, 0.0))).x;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = tid / LANES, lane = tid % LANES;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  const uint fm = sg / (BN / F) * F, fn = sg % (BN / F) * F;  // this subgroup's fragment

  float acc[F * F / LANES];
  for (uint i = 0; i < F * F / LANES; i++) acc[i] = 0.0;

  for (uint k0 = 0; k0 < p.k_count; k0 += BK) {
    // Loads run along K, the contiguous axis of x and of W [N, K]; out-of-range elements are 0.
    for (uint e = tid; e < BM * BK; e += WG) {
      const uint mm = e / BK, kk = e % BK, m = m0 + mm, k = k0 + kk;
      a_sh[mm * AB + kk] = m < p.rows && k < p.k_count ? to_f16(x_at(m, k)) : 0.0;
    }
    for (uint e = tid; e < BN * BK; e += WG) {
      const uint nn = e / BK, kk = e % BK, n = n0 + nn, k = k0 + kk;
      b_sh[nn * AB + kk] = n < p.n_count && k < p.k_count ? to_f16(weight(k, n)) : 0.0;
    }
    barrier();
    // coopMatMulAdd(acc, A[fm .. fm + F][0 .. BK], B[0 .. BK][fn .. fn + F]), emulated.
    for (uint i = 0; i < F * F / LANES; i++) {
      const uint e = lane + i * LANES, r = e / F, c = e % F;
      float s = 0.0;
      for (uint kk = 0; kk < BK; kk++) s += a_sh[(fm + r) * AB + kk] * b_sh[(fn + c) * AB + kk];
      acc[i] += s;
    }
    barrier();
  }

  // coopMatStore(acc, c_sh, row-major, stride CS), emulated; then the epilogue.
  for (uint i = 0; i < F * F / LANES; i++) {
    const uint e = lane + i * LANES;
    c_sh[(fm + e / F) * CS + fn + e % F] = acc[i];
  }
  barrier();
  for (uint e = tid; e < BM * BN; e += WG) {
    const uint mm = e / BN, nn = e % BN, m = m0 + mm, n = n0 + nn;
    if (m < p.rows && n < p.n_count) store(m, n, c_sh[mm * CS + nn]);
  }
}
