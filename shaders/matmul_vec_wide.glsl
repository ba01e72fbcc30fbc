// The wide matrix-vector kernel's body (matmul_vec_wide.comp reduces with subgroup operations,
// matmul_vec_wide_shared.comp with a shared-memory tree where the device has none): decode's
// out[t, n] = act(x[t] . W[n] + b[n]) + r[t, n] for t < p.rows <= ROWS, W [N, K] only.
//
// The GPU kernel set's decode GEMV, in the shape that reaches DRAM bandwidth on GPUs: a
// workgroup owns OUTS rows of W, and its WG invocations walk along K, each loading 16 bytes
// (8 fp16 or 4 fp32 weights) at a time, so a subgroup's loads of a row are one contiguous block.
// Each lane keeps two texels of every row in flight per step (the loop bound is a push constant,
// so the unrolling is written out), and each weight is used for all ROWS rows of x. The
// partial sums meet once, after the loop: subgroupAdd, then one value per subgroup through
// shared memory; or a shared-memory tree. Rows past n_count read the last row and store nothing.
//
// The host guarantees whole, aligned vectors: K % E == 0 (E = 8 fp16 or 4 fp32), x_off % 4 == 0,
// w_off % E == 0, k_base == 0; WG a power of two, and WG, ROWS, OUTS within the MATMUL_WIDE_MAX_*
// maxima the shared array is declared at.
#define MATMUL_WIDE
#include "matmul.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 6) const uint ROWS = 1;  // rows of x per dispatch, at most
layout(constant_id = 7) const uint OUTS = 1;  // rows of W (outputs) per workgroup

layout(binding = 1) readonly buffer X { vec4 x4[]; };   // [T, K / 4]
layout(binding = 2) readonly buffer W { uvec4 w4[]; };  // [N, K / E]

const uint WG = gl_WorkGroupSize.x;
const uint E = DTYPE == DTYPE_F16 ? 8 : 4;  // weights per 16-byte load

// Subgroup path: one sum per (subgroup, row of x, output). Tree path: [row * OUTS + out][lane].
shared float partial[MATMUL_WIDE_MAX_WORKGROUP * MATMUL_WIDE_MAX_ROWS * MATMUL_WIDE_MAX_OUTS];

// One texel of weights times the x values it meets, starting at x texel xi.
float dot_texel(uvec4 w, uint xi) {
  if (DTYPE == DTYPE_F16) {
    const vec4 lo = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
    const vec4 hi = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
    return dot(lo, x4[xi]) + dot(hi, x4[xi + 1]);
  }
  return dot(uintBitsToFloat(w), x4[xi]);
}

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // host-folded
  const uint n0 = group * OUTS;
  const uint texels = p.k_count / E;       // per row of W
  const uint x_texels = p.K / 4;           // per row of x
  const uint x0 = p.x_off / 4, xs = E / 4;  // x texels per weight texel
  // Private arrays at the maxima too (Metal sizes no array by a function constant); the loops
  // run to the specialised bounds, which the compiler unrolls.
  uint row[MATMUL_WIDE_MAX_OUTS];
  for (uint o = 0; o < OUTS; o++) row[o] = p.w_off / E + min(n0 + o, p.n_count - 1) * texels;

  float acc[MATMUL_WIDE_MAX_ROWS * MATMUL_WIDE_MAX_OUTS];
  for (uint j = 0; j < ROWS * OUTS; j++) acc[j] = 0.0;
  uint i = lane;
  for (; i + WG < texels; i += 2 * WG) {
    uvec4 a[MATMUL_WIDE_MAX_OUTS], b[MATMUL_WIDE_MAX_OUTS];
    for (uint o = 0; o < OUTS; o++) {
      a[o] = w4[row[o] + i];
      b[o] = w4[row[o] + i + WG];
    }
    for (uint t = 0; t < ROWS; t++) {
      if (t >= p.rows) break;
      const uint xa = x0 + t * x_texels + i * xs, xb = xa + WG * xs;
      for (uint o = 0; o < OUTS; o++)
        acc[t * OUTS + o] += dot_texel(a[o], xa) + dot_texel(b[o], xb);
    }
  }
  if (i < texels) {
    uvec4 a[MATMUL_WIDE_MAX_OUTS];
    for (uint o = 0; o < OUTS; o++) a[o] = w4[row[o] + i];
    for (uint t = 0; t < ROWS; t++) {
      if (t >= p.rows) break;
      const uint xa = x0 + t * x_texels + i * xs;
      for (uint o = 0; o < OUTS; o++) acc[t * OUTS + o] += dot_texel(a[o], xa);
    }
  }

  const uint sums = ROWS * OUTS;
#if SUBGROUP_REDUCE
  for (uint j = 0; j < sums; j++) acc[j] = subgroupAdd(acc[j]);
  if (gl_SubgroupInvocationID == 0)
    for (uint j = 0; j < sums; j++) partial[gl_SubgroupID * sums + j] = acc[j];
  barrier();
  if (lane < sums) {
    float s = 0.0;
    for (uint g = 0; g < gl_NumSubgroups; g++) s += partial[g * sums + lane];
    const uint t = lane / OUTS, n = n0 + lane % OUTS;
    if (t < p.rows && n < p.n_count) store(t, n, s);
  }
#else
  for (uint j = 0; j < sums; j++) partial[j * WG + lane] = acc[j];
  barrier();
  for (uint s = WG / 2; s > 0; s /= 2) {
    if (lane < s)
      for (uint j = 0; j < sums; j++) partial[j * WG + lane] += partial[j * WG + lane + s];
    barrier();
  }
  if (lane < sums) {
    const uint t = lane / OUTS, n = n0 + lane % OUTS;
    if (t < p.rows && n < p.n_count) store(t, n, partial[lane * WG]);
  }
#endif
}
