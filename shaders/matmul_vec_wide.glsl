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
// With NORM (norm_linear fused: a LayerNorm of x's rows in front), every workgroup first takes
// each row's mean and spread with common/norm.glsl's two-pass formula, then normalises x as it
// reads it, so the normalised rows are never written and the LayerNorm's own dispatch is saved:
// on a GPU a decode step's small dispatches cost more than the extra reads of x, which stay in
// the caches (x is a few KiB, W megabytes).
//
// The host guarantees whole, aligned vectors: K % E == 0 (E = 8 fp16 or 4 fp32), x_off % 4 == 0,
// w_off % E == 0, k_base == 0; WG a power of two, and WG, ROWS, OUTS within the MATMUL_WIDE_MAX_*
// maxima the shared array is declared at.
#define MATMUL_WIDE
#include "matmul.glsl"
#include "common/norm.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 6) const uint ROWS = 1;  // rows of x per dispatch, at most
layout(constant_id = 7) const uint OUTS = 1;  // rows of W (outputs) per workgroup
layout(constant_id = 8) const uint NORM = 0;  // 1 + a LAYERNORM_* kind: the fused LayerNorm; 0 none

layout(binding = 1) readonly buffer X { vec4 x4[]; };   // [T, K / 4]
layout(binding = 2) readonly buffer W { uvec4 w4[]; };  // [N, K / E]
layout(binding = 5) readonly buffer Gamma { vec4 gamma4[]; };  // [K / 4], NORM only
layout(binding = 6) readonly buffer Beta { vec4 beta4[]; };    // [K / 4], NORM only (not Rms)

const uint WG = gl_WorkGroupSize.x;
const uint E = DTYPE == DTYPE_F16 ? 8 : 4;  // weights per 16-byte load

// Subgroup path: one sum per (subgroup, row of x, output). Tree path: [row * OUTS + out][lane].
shared float partial[MATMUL_WIDE_MAX_WORKGROUP * MATMUL_WIDE_MAX_ROWS * MATMUL_WIDE_MAX_OUTS];

const uint MAX_ROWS = MATMUL_WIDE_MAX_ROWS;
uint x0, x_texels;  // x's first texel and texels per row (p.x_off / 4, p.K / 4)

// Per row of x, with NORM: the provisional mean m1, its correction `shift` and the scale
// (layernorm.comp).
float m1[MAX_ROWS], shift[MAX_ROWS], scale[MAX_ROWS];

// Texel j (elements 4j .. 4j + 3) of row t of x, normalised with NORM.
vec4 x_at(uint t, uint j) {
  const vec4 v = x4[x0 + t * x_texels + j];
  if (NORM == 0) return v;
  return norm_apply(NORM - 1, v, m1[t], shift[t], scale[t], gamma4[j], beta4[j]);
}

// One texel of weights times the x values it meets in row t, starting at x texel j.
float dot_texel(uvec4 w, uint t, uint j) {
  if (DTYPE == DTYPE_F16) {
    const vec4 lo = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
    const vec4 hi = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
    return dot(lo, x_at(t, j)) + dot(hi, x_at(t, j + 1));
  }
  return dot(uintBitsToFloat(w), x_at(t, j));
}

// Replaces v[j], j < count, by its sum over the workgroup, in a fixed order (every invocation
// gets the sums). Uses partial[] and leaves it free.
void workgroup_sums(inout float v[2 * MAX_ROWS], uint count) {
  const uint lane = gl_LocalInvocationID.x;
#if SUBGROUP_REDUCE
  for (uint j = 0; j < count; j++) v[j] = subgroupAdd(v[j]);
  if (gl_SubgroupInvocationID == 0)
    for (uint j = 0; j < count; j++) partial[gl_SubgroupID * count + j] = v[j];
  barrier();
  for (uint j = 0; j < count; j++) {
    float s = 0.0;
    for (uint g = 0; g < gl_NumSubgroups; g++) s += partial[g * count + j];
    v[j] = s;
  }
#else
  for (uint j = 0; j < count; j++) partial[j * WG + lane] = v[j];
  barrier();
  for (uint s = WG / 2; s > 0; s /= 2) {
    if (lane < s)
      for (uint j = 0; j < count; j++) partial[j * WG + lane] += partial[j * WG + lane + s];
    barrier();
  }
  for (uint j = 0; j < count; j++) v[j] = partial[j * WG];
#endif
  barrier();
}

// m1, shift and scale of each row t < p.rows, over its k_count elements: the two passes of
// common/norm.glsl, each row's sums reduced together.
void norm_stats() {
  const float n = float(p.k_count);
  const uint lane = gl_LocalInvocationID.x, texels = p.k_count / 4;
  float v[2 * MAX_ROWS];
  for (uint t = 0; t < ROWS; t++) {
    vec4 s = vec4(0.0);
    if (t < p.rows)
      for (uint j = lane; j < texels; j += WG) s += x4[x0 + t * x_texels + j];
    v[t] = s.x + s.y + s.z + s.w;
  }
  workgroup_sums(v, ROWS);
  for (uint t = 0; t < ROWS; t++) m1[t] = norm_provisional_mean(NORM - 1, v[t], n);
  for (uint t = 0; t < ROWS; t++) {
    vec4 d = vec4(0.0), d2 = vec4(0.0);
    if (t < p.rows)
      for (uint j = lane; j < texels; j += WG) {
        const vec4 e = x4[x0 + t * x_texels + j] - m1[t];
        d += e;
        d2 += e * e;
      }
    v[2 * t] = d.x + d.y + d.z + d.w;
    v[2 * t + 1] = d2.x + d2.y + d2.z + d2.w;
  }
  workgroup_sums(v, 2 * ROWS);
  for (uint t = 0; t < ROWS; t++) {
    const NormStats st = norm_row_stats(NORM - 1, v[2 * t], v[2 * t + 1], n, p.eps);
    shift[t] = st.shift;
    scale[t] = st.scale;
  }
}

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // host-folded
  const uint n0 = group * OUTS;
  const uint texels = p.k_count / E;  // per row of W
  const uint xs = E / 4;              // x texels per weight texel
  x_texels = p.K / 4;
  x0 = p.x_off / 4;
  if (NORM != 0) norm_stats();
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
      const uint ja = i * xs, jb = ja + WG * xs;
      for (uint o = 0; o < OUTS; o++)
        acc[t * OUTS + o] += dot_texel(a[o], t, ja) + dot_texel(b[o], t, jb);
    }
  }
  if (i < texels) {
    uvec4 a[MATMUL_WIDE_MAX_OUTS];
    for (uint o = 0; o < OUTS; o++) a[o] = w4[row[o] + i];
    for (uint t = 0; t < ROWS; t++) {
      if (t >= p.rows) break;
      for (uint o = 0; o < OUTS; o++) acc[t * OUTS + o] += dot_texel(a[o], t, i * xs);
    }
  }

  const uint sums = ROWS * OUTS;
#if SUBGROUP_REDUCE
  for (uint j = 0; j < sums; j++) acc[j] = subgroupAdd(acc[j]);
  if (gl_SubgroupInvocationID == 0)
    for (uint j = 0; j < sums; j++) partial[gl_SubgroupID * sums + j] = acc[j];
  barrier();
  // One invocation per sum; a workgroup narrower than ROWS x OUTS takes several each.
  for (uint j = lane; j < sums; j += WG) {
    float s = 0.0;
    for (uint g = 0; g < gl_NumSubgroups; g++) s += partial[g * sums + j];
    const uint t = j / OUTS, n = n0 + j % OUTS;
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
  for (uint j = lane; j < sums; j += WG) {
    const uint t = j / OUTS, n = n0 + j % OUTS;
    if (t < p.rows && n < p.n_count) store(t, n, partial[j * WG]);
  }
#endif
}
