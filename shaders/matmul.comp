#version 450
// Tiled matrix product for many rows (prefill): out[t, n] = act(x[t] . w(:, n) + b[n]) + r[t, n].
// A workgroup computes a BM x BN tile of out. It walks K in steps of BK, staging a BM x BK tile
// of x and a BK x BN tile of W in shared memory, where each value is reused BN (resp. BM) times;
// each invocation accumulates a TM x TN block of the tile in registers. Invocation (tx, ty) owns
// rows ty + i * NTY and columns tx + j * NTX, so neighbouring invocations read neighbouring
// shared-memory words.
#extension GL_GOOGLE_include_directive : require
#include "matmul.glsl"

// The host sets the workgroup to (BN / TN, BM / TM) and the tile from the device's limits.
layout(local_size_x_id = 0, local_size_y_id = 1) in;
layout(constant_id = 6) const uint BM = 64;  // tile rows (of x and out)
layout(constant_id = 7) const uint BN = 64;  // tile columns (outputs)
layout(constant_id = 8) const uint BK = 16;  // depth of one shared-memory step
layout(constant_id = 9) const uint TM = 4;   // rows per invocation
layout(constant_id = 10) const uint TN = 4;  // columns per invocation

// At a fixed size, BK * BM and BK * BN of them used: Metal cannot size a shared array by
// specialization constants. The host's tiles all fit.
shared float xs[MATMUL_TILE_MAX];  // [BK][BM], transposed so a k step reads along m
shared float ws[MATMUL_TILE_MAX];  // [BK][BN]

void main() {
  const uint NTX = gl_WorkGroupSize.x, NTY = gl_WorkGroupSize.y, threads = NTX * NTY;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * NTX + tx;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  // Invocations whose rows all lie past the end (a short prompt in a tall tile) help load the
  // tiles but skip the arithmetic; the k step stops at the end of K.
  const bool busy = m0 + ty < p.rows;

  float acc[TM][TN];
  for (uint i = 0; i < TM; i++)
    for (uint j = 0; j < TN; j++) acc[i][j] = 0.0;

  for (uint k0 = 0; k0 < p.k_count; k0 += BK) {
    // Loads run along the contiguous axis of each tensor; out-of-range elements are zeros.
    for (uint e = tid; e < BM * BK; e += threads) {
      uint mm = e / BK, kk = e % BK, m = m0 + mm, k = k0 + kk;
      xs[kk * BM + mm] = m < p.rows && k < p.k_count ? x_at(m, k) : 0.0;
    }
    for (uint e = tid; e < BK * BN; e += threads) {
      uint kk = LAYOUT == MATMUL_NK ? e % BK : e / BN;
      uint nn = LAYOUT == MATMUL_NK ? e / BK : e % BN;
      uint k = k0 + kk, n = n0 + nn;
      ws[kk * BN + nn] = n < p.n_count && k < p.k_count ? weight(k, n) : 0.0;
    }
    barrier();
    if (busy) {
      for (uint kk = 0; kk < min(BK, p.k_count - k0); kk++) {
        float a[TM], b[TN];
        for (uint i = 0; i < TM; i++) a[i] = xs[kk * BM + ty + i * NTY];
        for (uint j = 0; j < TN; j++) b[j] = ws[kk * BN + tx + j * NTX];
        for (uint i = 0; i < TM; i++)
          for (uint j = 0; j < TN; j++) acc[i][j] += a[i] * b[j];
      }
    }
    barrier();
  }

  for (uint i = 0; i < TM; i++) {
    uint m = m0 + ty + i * NTY;
    for (uint j = 0; j < TN; j++) {
      uint n = n0 + tx + j * NTX;
      if (m < p.rows && n < p.n_count) store(m, n, acc[i][j]);
    }
  }
}
