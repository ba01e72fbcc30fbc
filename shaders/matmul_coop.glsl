// The tiled matrix product on cooperative matrices (16 x 16 x 16 fragments, fp16 in, fp32
// accumulate): out[t, n] = act(x[t] . w(:, n) + b[n]) + r[t, n]. Two modules include this body:
// matmul_coop.comp runs the fragment operations on the device's matrix units
// (VK_NV_cooperative_matrix, MATMUL_COOP_HARDWARE 1); matmul_coop_emulated.comp emulates them
// with shared memory and scalar arithmetic (MATMUL_COOP_HARDWARE 0), so that everything else
// here (staging, prefetch, padding, ragged edges, the epilogue) runs and is tested on a device
// without matrix units (lavapipe). Only the three fragment operations differ.
//
// A workgroup of 4 subgroups of 32 lanes computes a BM x BN = 64 x 64 tile of out; subgroup s
// owns the 32 x 32 block (s / 2, s % 2) of it, 2 x 2 fragments. Per step of BK along K the
// workgroup stages A = x[m0 .., k0 ..] as [BM][BK] and B = W[k0 .., n0 ..] as [BN][BK] (so B is
// column-major K x N: W [N, K] rows are contiguous along K) in shared memory, rounded to fp16 as
// the matrix units' inputs are; the next step's elements are already on their way into
// registers while the fragments multiply (two steps in flight ran no faster on an H100:
// docs/benchmark.md, "The cooperative-matrix path"). At the end each subgroup stores its
// fragments to its own region of shared memory, and its lanes apply the epilogue along n
// (coalesced stores).
#include "matmul.glsl"

#if MATMUL_COOP_HARDWARE
#define HALF float16_t
#else
#define HALF float
#endif

layout(local_size_x = MATMUL_COOP_LANES * MATMUL_COOP_SUBGROUPS) in;

const uint F = MATMUL_COOP_F, BM = MATMUL_COOP_BM, BN = MATMUL_COOP_BN, BK = MATMUL_COOP_BK;
const uint AB = BK + 8;
const uint LANES = MATMUL_COOP_LANES, WG = MATMUL_COOP_LANES * MATMUL_COOP_SUBGROUPS;
const uint SM = BM / 2, SN = BN / 2;  // a subgroup's block: FR x FC fragments
const uint FR = SM / F, FC = SN / F;
const uint CS = MATMUL_COOP_C_STRIDE;
const uint A_PER = BM * BK / WG, B_PER = BN * BK / WG;  // staged elements per invocation

shared HALF a_sh[BM * AB];           // [BM][BK], rows padded to AB
shared HALF b_sh[BN * AB];           // [BN][BK]
shared float c_sh[4 * SM * CS];      // per subgroup [SM][SN], rows padded to CS

#if MATMUL_COOP_HARDWARE
HALF to_half(float v) { return HALF(v); }
#else
// fp16 rounding (to nearest even) in integer arithmetic (half_bits, as the KV cache rounds): a
// driver may fold unpackHalf2x16(packHalf2x16(v)) into v (NVIDIA's 580 driver does), which
// would leave the inputs unrounded. Past 65504 is infinity, as a conversion gives.
#include "common/half.glsl"
float to_half(float v) { return unpackHalf2x16(half_bits(v)).x; }
#endif

// The fragment operations: zero the accumulators, multiply-add one BK step from the staged
// tiles, store the accumulators to the subgroup's region of c_sh (row-major, stride CS).
#if MATMUL_COOP_HARDWARE
fcoopmatNV<32, gl_ScopeSubgroup, F, F> acc[FR * FC];
void frag_zero() {
  for (uint i = 0; i < FR * FC; i++) acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, F, F>(0.0);
}
void frag_step(uint sm, uint sn, uint lane) {
  for (uint kk = 0; kk < BK; kk += F) {
    fcoopmatNV<16, gl_ScopeSubgroup, F, F> fa[FR], fb[FC];
    for (uint i = 0; i < FR; i++) coopMatLoadNV(fa[i], a_sh, (sm + i * F) * AB + kk, AB, false);
    for (uint j = 0; j < FC; j++) coopMatLoadNV(fb[j], b_sh, (sn + j * F) * AB + kk, AB, true);
    for (uint i = 0; i < FR; i++)
      for (uint j = 0; j < FC; j++)
        acc[i * FC + j] = coopMatMulAddNV(fa[i], fb[j], acc[i * FC + j]);
  }
}
void frag_store(uint c0, uint lane) {
  for (uint i = 0; i < FR; i++)
    for (uint j = 0; j < FC; j++)
      coopMatStoreNV(acc[i * FC + j], c_sh, c0 + i * F * CS + j * F, CS, false);
}
#else
// Lane l holds elements l, l + LANES, ... of each row-major F x F fragment, as a matrix unit's
// opaque fragment is spread over the subgroup.
const uint PER_LANE = F * F / LANES;
float acc[FR * FC * PER_LANE];
void frag_zero() {
  for (uint i = 0; i < FR * FC * PER_LANE; i++) acc[i] = 0.0;
}
void frag_step(uint sm, uint sn, uint lane) {
  for (uint f = 0; f < FR * FC; f++)
    for (uint i = 0; i < PER_LANE; i++) {
      const uint e = lane + i * LANES, r = sm + f / FC * F + e / F, c = sn + f % FC * F + e % F;
      float s = 0.0;
      for (uint kk = 0; kk < BK; kk++) s += a_sh[r * AB + kk] * b_sh[c * AB + kk];
      acc[f * PER_LANE + i] += s;
    }
}
void frag_store(uint c0, uint lane) {
  for (uint f = 0; f < FR * FC; f++)
    for (uint i = 0; i < PER_LANE; i++) {
      const uint e = lane + i * LANES;
      c_sh[c0 + (f / FC * F + e / F) * CS + f % FC * F + e % F] = acc[f * PER_LANE + i];
    }
}
#endif

// Element e of the invocation's share of a staged tile: row e / BK, column e % BK, so that
// consecutive invocations read consecutive k (x and W [N, K] are contiguous along K).
float a_elem(uint m0, uint k0, uint e) {
  const uint m = m0 + e / BK, k = k0 + e % BK;
  return m < p.rows && k < p.k_count ? x_at(m, k) : 0.0;
}
float b_elem(uint n0, uint k0, uint e) {
  const uint n = n0 + e / BK, k = k0 + e % BK;
  return n < p.n_count && k < p.k_count ? weight(k, n) : 0.0;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = tid / LANES, lane = tid % LANES;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  const uint sm = sg / 2 * SM, sn = sg % 2 * SN;  // the subgroup's block in the tile

  frag_zero();
  float a_next[A_PER], b_next[B_PER];
  for (uint i = 0; i < A_PER; i++) a_next[i] = a_elem(m0, 0, tid + i * WG);
  for (uint i = 0; i < B_PER; i++) b_next[i] = b_elem(n0, 0, tid + i * WG);
  for (uint k0 = 0; k0 < p.k_count; k0 += BK) {
    for (uint i = 0; i < A_PER; i++) {
      const uint e = tid + i * WG;
      a_sh[e / BK * AB + e % BK] = to_half(a_next[i]);
    }
    for (uint i = 0; i < B_PER; i++) {
      const uint e = tid + i * WG;
      b_sh[e / BK * AB + e % BK] = to_half(b_next[i]);
    }
    barrier();
    if (k0 + BK < p.k_count) {  // the next step's loads, in flight during the products
      for (uint i = 0; i < A_PER; i++) a_next[i] = a_elem(m0, k0 + BK, tid + i * WG);
      for (uint i = 0; i < B_PER; i++) b_next[i] = b_elem(n0, k0 + BK, tid + i * WG);
    }
    frag_step(sm, sn, lane);
    barrier();
  }

  const uint c0 = sg * SM * CS;
  frag_store(c0, lane);
  barrier();
  for (uint e = lane; e < SM * SN; e += LANES) {
    const uint mm = e / SN, nn = e % SN, m = m0 + sm + mm, n = n0 + sn + nn;
    if (m < p.rows && n < p.n_count) store(m, n, c_sh[c0 + mm * CS + nn]);
  }
}
