// The tiled matrix product on cooperative matrices (16 x 16 x 16 fragments, fp16 in, fp32
// accumulate): out[t, n] = act(x[t] . w(:, n) + b[n]) + r[t, n]. Four modules include this body:
// matmul_coop.comp and matmul_coop_large.comp run the fragment operations on the device's matrix
// units (VK_NV_cooperative_matrix, MATMUL_COOP_HARDWARE 1); matmul_coop_emulated*.comp emulate
// them with scalar arithmetic (MATMUL_COOP_HARDWARE 0), so that everything else here (staging,
// prefetch, ragged edges, the epilogue) runs and is tested on a device without matrix units
// (lavapipe). Only the three fragment operations differ.
//
// A workgroup of 4 subgroups of 32 lanes computes a BM x BN tile of out, BM = BN = 32 * FRAGS
// (MATMUL_COOP_FRAGS: 2 gives 64 x 64, 4 gives 128 x 128, for large grids); subgroup s owns the
// (BM / 2) x (BN / 2) block (s / 2, s % 2) of it, FRAGS x FRAGS fragments, so each barrier pair
// carries FRAGS^2 * BK / 16 fragment products per subgroup (32 with the large tile).
//
// Staging, per step of BK = 32 along K: A = x[m0 .., k0 ..] as [BM][BK] and B = W[k0 .., n0 ..]
// as [BN][BK] (B is column-major K x N: W [N, K] rows are contiguous along K), rounded to fp16
// as the matrix units' inputs are, in units of 8 halves (one uvec4): each invocation loads its
// units with 16-byte loads (two vec4 of x, one uvec4 of fp16 W), packs them, and stores one
// 16-byte word per unit. Rows are padded by one unit (AB4 = 5 uvec4, 80 bytes), so consecutive
// rows start on different banks; the matrix units load their fragments from the packed words
// (the element offset and stride in uvec4 units, the bytes reinterpreted as fp16). The next
// step's units are in registers while the fragments multiply. Where a dispatch's x or W is not in
// whole aligned vectors (a chunk of W [K, N], K not a multiple of 8, an odd offset), the same
// units are gathered element by element.
//
// Every loop but the walk along K is unrolled ([[unroll]]): the fragments and the units in
// flight are arrays, which a compiler that keeps a loop indexes in memory rather than registers.
// (Not the emulation's step: unrolled, it compiles for minutes on lavapipe.)
//
// The epilogue reuses A's staging memory: fragment by fragment, each subgroup stores its
// accumulator to a 16 x 20 float region of its own, and its lanes apply bias, activation and
// residual along n (coalesced stores).
#define MATMUL_WIDE  // x and W bound as 16-byte vectors, declared here
#include "matmul.glsl"

#if !MATMUL_COOP_HARDWARE
#include "common/half.glsl"
#endif

layout(local_size_x = MATMUL_COOP_LANES * MATMUL_COOP_SUBGROUPS) in;

layout(binding = 1) readonly buffer X { vec4 x4[]; };   // [T, K / 4], or gathered by element
layout(binding = 2) readonly buffer W { uvec4 w4[]; };  // fp16 [N, K / 8] or fp32 [N, K / 4]

const uint F = MATMUL_COOP_F, FR = MATMUL_COOP_FRAGS, FC = MATMUL_COOP_FRAGS;
const uint BM = 2 * FR * F, BN = 2 * FC * F, BK = MATMUL_COOP_BK;
const uint LANES = MATMUL_COOP_LANES, WG = MATMUL_COOP_LANES * MATMUL_COOP_SUBGROUPS;
const uint SM = BM / 2, SN = BN / 2;  // a subgroup's block
const uint UK = BK / 8;               // 16-byte units per staged row
const uint AB4 = UK + 1;              // a staged row's stride in uvec4, padded by one unit
const uint CS4 = F / 4 + 1;           // the epilogue's row stride in uvec4 (20 floats)
const uint A_UNITS = BM * UK / WG, B_UNITS = BN * UK / WG;  // units per invocation per step

shared uvec4 a_sh[BM * AB4];  // [BM][BK] halves; the epilogue's [4][F][CS4 * 4] floats
shared uvec4 b_sh[BN * AB4];  // [BN][BK] halves

// Two fp32 values as a word of two fp16 (x in the low half). On the matrix units the driver's
// conversion, as a fragment conversion would be; emulated, rounded to nearest even in integer
// arithmetic, so that a driver folding the round trip cannot leave the inputs unrounded.
uint pack2(float a, float b) {
#if MATMUL_COOP_HARDWARE
  return packHalf2x16(vec2(a, b));
#else
  return pack_halves(vec2(a, b));
#endif
}
uvec4 pack8(vec4 lo, vec4 hi) {
  return uvec4(pack2(lo.x, lo.y), pack2(lo.z, lo.w), pack2(hi.x, hi.y), pack2(hi.z, hi.w));
}

// Whether this dispatch's x and W can be read as whole 16-byte vectors along K; every unit of a
// staged row then is one (k0 and each unit start on 8 elements, and k_count % 8 == 0 makes a
// unit either wholly inside K or wholly past it).
bool x_vectors() { return p.K % 4 == 0 && (p.x_off + p.k_base) % 4 == 0 && p.k_count % 8 == 0; }
bool w_vectors() {
  const uint e = DTYPE == DTYPE_F16 ? 8 : 4;
  return LAYOUT == MATMUL_NK && p.w_off % e == 0 && p.k_count % 8 == 0;
}

// x[t, k_base + k] and W's element (k, n), one at a time, for the gathered units.
float x_elem(uint t, uint k) {
  const uint i = p.x_off + t * p.K + p.k_base + k;
  return x4[i >> 2][i & 3];
}
float w_elem(uint k, uint n) {
  const uint i = p.w_off + (LAYOUT == MATMUL_NK ? n * p.k_count + k : k * p.n_count + n);
  if (DTYPE == DTYPE_F16) return unpackHalf2x16(w4[i >> 3][(i >> 1) & 3])[i & 1];
  return uintBitsToFloat(w4[i >> 2][i & 3]);
}

// Unit e of a step's tile: row e / UK of the tile, elements k0 + 8 (e % UK) ... + 7; zeros past
// the ends.
uvec4 a_unit(bool vec, uint m0, uint k0, uint e) {
  const uint m = m0 + e / UK, k = k0 + e % UK * 8;
  if (m >= p.rows) return uvec4(0);
  if (vec) {
    if (k >= p.k_count) return uvec4(0);
    const uint i = (p.x_off + m * p.K + p.k_base + k) >> 2;
    return pack8(x4[i], x4[i + 1]);
  }
  float v[8];
  [[unroll]] for (uint j = 0; j < 8; j++) v[j] = k + j < p.k_count ? x_elem(m, k + j) : 0.0;
  return pack8(vec4(v[0], v[1], v[2], v[3]), vec4(v[4], v[5], v[6], v[7]));
}
uvec4 b_unit(bool vec, uint n0, uint k0, uint e) {
  const uint n = n0 + e / UK, k = k0 + e % UK * 8;
  if (n >= p.n_count) return uvec4(0);
  if (vec) {
    if (k >= p.k_count) return uvec4(0);
    if (DTYPE == DTYPE_F16) return w4[(p.w_off + n * p.k_count + k) >> 3];
    const uint i = (p.w_off + n * p.k_count + k) >> 2;
    return pack8(uintBitsToFloat(w4[i]), uintBitsToFloat(w4[i + 1]));
  }
  float v[8];
  [[unroll]] for (uint j = 0; j < 8; j++) v[j] = k + j < p.k_count ? w_elem(k + j, n) : 0.0;
  return pack8(vec4(v[0], v[1], v[2], v[3]), vec4(v[4], v[5], v[6], v[7]));
}

// The fragment operations: zero the accumulators, multiply-add one BK step from the staged
// tiles, store fragment f's accumulator to rows of CS4 uvec4 of a_sh from uvec4 c4.
#if MATMUL_COOP_HARDWARE
fcoopmatNV<32, gl_ScopeSubgroup, F, F> acc[FR * FC];
void frag_zero() {
  [[unroll]] for (uint i = 0; i < FR * FC; i++) acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, F, F>(0.0);
}
void frag_step(uint sm, uint sn, uint lane) {
  [[unroll]] for (uint kk = 0; kk < BK; kk += F) {
    fcoopmatNV<16, gl_ScopeSubgroup, F, F> fa[FR], fb[FC];
    [[unroll]] for (uint i = 0; i < FR; i++) coopMatLoadNV(fa[i], a_sh, (sm + i * F) * AB4 + kk / 8, AB4, false);
    [[unroll]] for (uint j = 0; j < FC; j++) coopMatLoadNV(fb[j], b_sh, (sn + j * F) * AB4 + kk / 8, AB4, true);
    [[unroll]] for (uint i = 0; i < FR; i++)
      [[unroll]] for (uint j = 0; j < FC; j++)
        acc[i * FC + j] = coopMatMulAddNV(fa[i], fb[j], acc[i * FC + j]);
  }
}
void frag_store(uint f, uint c4, uint lane) { coopMatStoreNV(acc[f], a_sh, c4, CS4, false); }
#else
// Lane l holds column l % F and rows l / F + 2 i (i < 8) of each F x F fragment, as a matrix
// unit's opaque fragment is spread over the subgroup.
const uint PER_LANE = F * F / LANES, ROW_STEP = LANES / F;
float acc[FR * FC * PER_LANE];
void frag_zero() {
  [[unroll]] for (uint i = 0; i < FR * FC * PER_LANE; i++) acc[i] = 0.0;
}
float staged(uint r, uint k, bool b) {  // element k of staged row r of A (or B)
  const uvec4 u = b ? b_sh[r * AB4 + k / 8] : a_sh[r * AB4 + k / 8];
  return unpackHalf2x16(u[(k >> 1) & 3])[k & 1];
}
void frag_step(uint sm, uint sn, uint lane) {
  const uint r0 = lane / F, c = lane % F;
  for (uint kk = 0; kk < BK; kk++) {
    float a[FR * PER_LANE], b[FC];
    [[unroll]] for (uint i = 0; i < FR; i++)
      [[unroll]] for (uint e = 0; e < PER_LANE; e++) a[i * PER_LANE + e] = staged(sm + i * F + r0 + e * ROW_STEP, kk, false);
    [[unroll]] for (uint j = 0; j < FC; j++) b[j] = staged(sn + j * F + c, kk, true);
    [[unroll]] for (uint i = 0; i < FR; i++)
      [[unroll]] for (uint j = 0; j < FC; j++)
        [[unroll]] for (uint e = 0; e < PER_LANE; e++)
          acc[(i * FC + j) * PER_LANE + e] += a[i * PER_LANE + e] * b[j];
  }
}
void frag_store(uint f, uint c4, uint lane) {
  const uint r0 = lane / F, c = lane % F;
  [[unroll]] for (uint e = 0; e < PER_LANE; e++) {
    const uint r = r0 + e * ROW_STEP;
    a_sh[c4 + r * CS4 + c / 4][c % 4] = floatBitsToUint(acc[f * PER_LANE + e]);
  }
}
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = tid / LANES, lane = tid % LANES;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  const uint sm = sg / 2 * SM, sn = sg % 2 * SN;  // the subgroup's block in the tile
  const bool xv = x_vectors(), wv = w_vectors();

  frag_zero();
  uvec4 a_next[A_UNITS], b_next[B_UNITS];
  [[unroll]] for (uint i = 0; i < A_UNITS; i++) a_next[i] = a_unit(xv, m0, 0, tid + i * WG);
  [[unroll]] for (uint i = 0; i < B_UNITS; i++) b_next[i] = b_unit(wv, n0, 0, tid + i * WG);
  for (uint k0 = 0; k0 < p.k_count; k0 += BK) {
    [[unroll]] for (uint i = 0; i < A_UNITS; i++) {
      const uint e = tid + i * WG;
      a_sh[e / UK * AB4 + e % UK] = a_next[i];
    }
    [[unroll]] for (uint i = 0; i < B_UNITS; i++) {
      const uint e = tid + i * WG;
      b_sh[e / UK * AB4 + e % UK] = b_next[i];
    }
    barrier();
    if (k0 + BK < p.k_count) {  // the next step's units, in flight during the products
      [[unroll]] for (uint i = 0; i < A_UNITS; i++) a_next[i] = a_unit(xv, m0, k0 + BK, tid + i * WG);
      [[unroll]] for (uint i = 0; i < B_UNITS; i++) b_next[i] = b_unit(wv, n0, k0 + BK, tid + i * WG);
    }
    frag_step(sm, sn, lane);
    barrier();
  }

  // Fragment by fragment through the subgroup's region of a_sh; the barriers keep a region's
  // reads of one fragment before its writes of the next (every subgroup takes the same turns).
  const uint c4 = sg * F * CS4;
  [[unroll]] for (uint f = 0; f < FR * FC; f++) {
    frag_store(f, c4, lane);
    barrier();
    const uint fm = sm + f / FC * F, fn = sn + f % FC * F;
    for (uint e = lane; e < F * F; e += LANES) {
      const uint r = e / F, c = e % F, m = m0 + fm + r, n = n0 + fn + c;
      if (m < p.rows && n < p.n_count) store(m, n, uintBitsToFloat(a_sh[c4 + r * CS4 + c / 4][c % 4]));
    }
    barrier();
  }
}
