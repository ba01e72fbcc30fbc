// out[t, n] = act(x[t] . W[n] + b[n]) + r[t, n] for t < p.rows <= ROWS, with W [N, K] stored
// interleaved (gpu::WeightLayout::Interleaved): rows in blocks of B = MATMUL_BLOCK_ROWS (64), and
// within a block, for each texel column kt (E = 8 fp16 or 4 fp32 weights), the B rows' texels
// side by side:  texel (n, kt) at (n / B * KT + kt) * B + n % B, KT = K / E.
// For devices where storage texel buffers are the fast path (llvmpipe: a storage-buffer load
// whose address differs per lane is a scalar loop over the lanes, an imageLoad one vector
// gather). LANES consecutive invocations share a block: invocation `lane` owns rows lane,
// lane + LANES, ... of it, so for each of those the lanes read one contiguous run. Each
// invocation sums all of K itself: no shared memory, no barriers. x is read as rgba32f texels
// too (through a storage buffer, a load that is the same for all lanes measured slower still);
// each x load serves all of the invocation's rows of W, and each weight load ROWS rows of x. On
// llvmpipe every imageLoad is a per-lane gather whatever its address, so the register tile
// ROWS x BLOCK / LANES is what counts (the host picks it: gpu::kInterleavedRows).
// The interface and epilogue are matmul.glsl's; the host guarantees K % E == 0, whole blocks
// (the weight holds N rounded up to a whole block, padded with zeros) and texel-aligned windows.
//
// MATMUL_SHUFFLE 1 (matmul_interleaved_shuffle.comp, tiles of more than one row of x, where the
// workgroup is one full subgroup): the invocations share x's loads instead of each gathering
// every row of the tile itself. In each round, invocation s of the subgroup loads (and
// normalises) row round * WG + s, and the tile takes row t from invocation t % WG with
// subgroupShuffle, far cheaper than a gather on llvmpipe (docs/benchmark.md, "x through the
// subgroup"). A tile of 8 rows gathers 2 texels of x per step along K where it gathered 16.
// The sums are the same operations on the same values, so the bits do not change: a row gives
// the same outputs in a tile of one (MATMUL_SHUFFLE 0) as in a batch.
#define MATMUL_TEXEL
// The activation comes in p.flags (MATMUL_ACT_SHIFT): one pipeline serves every activation.
#define MATMUL_ACT_IN_FLAGS
#include "matmul.glsl"
#include "common/norm.glsl"

layout(local_size_x_id = 0) in;
// Rows of x per workgroup, at most: workgroup z takes rows z * ROWS .. z * ROWS + ROWS - 1 of the
// dispatch's p.rows, so a long prompt is one dispatch whose workgroups spread over the threads.
layout(constant_id = 6) const uint ROWS = 1;
// Instead of the outputs, each invocation writes the best of its own (row 0 only) as the pair
// out[2 i] = value, out[2 i + 1] = n, i its invocation index plus 8 per block before the
// dispatch's first: greedy decoding's head, whose host finishes the argmax over these partials
// (gpu::matmul_argmax), without writing the logits or a top-k pass.
layout(constant_id = 7) const bool ARGMAX = false;

// A LayerNorm fused in front (NORM: 1 + a LAYERNORM_* kind, 0 none): x is normalised row by row
// as it is read, with common/norm.glsl's two-pass formula, so the normalised rows are never
// written. For small models, where a dispatch costs more than the extra reads.
layout(constant_id = 8) const uint NORM = 0;

layout(binding = 1, rgba32f) uniform readonly imageBuffer xt;     // [T, K / 4]
layout(binding = 2, rgba32ui) uniform readonly uimageBuffer wt;   // [N / B, K / E, B]
layout(binding = 5, rgba32f) uniform readonly imageBuffer gamma;  // [K / 4], NORM only
layout(binding = 6, rgba32f) uniform readonly imageBuffer beta;   // [K / 4], NORM only (not Rms)

// Invocations per block of W's rows: each owns BLOCK / LANES of them. ARGMAX needs 8.
layout(constant_id = 9) const uint LANES = 8;
const uint BLOCK = MATMUL_BLOCK_ROWS, PER_LANE = BLOCK / LANES;

#if MATMUL_SHUFFLE
// Rows of x per round: one per invocation of the workgroup (one subgroup).
const uint SHARE = gl_WorkGroupSize.x, ROUNDS = (ROWS + SHARE - 1) / SHARE;
#else
const uint ROUNDS = ROWS;
#endif

uint t0;  // this workgroup's first row of x: gl_WorkGroupID.z * ROWS

// x[t0 + t, k .. k + 3]
vec4 x_raw(uint t, uint k) { return imageLoad(xt, int((p.x_off + (t0 + t) * p.K + k) / 4)); }

// Per slot (own_row): the provisional mean m1, the correction `shift` and the scale
// (layernorm.comp).
float m1[ROUNDS], shift[ROUNDS], scale[ROUNDS];

// The row of x that slot i of m1, shift and scale (and of the x loads) is for: row i, or with
// MATMUL_SHUFFLE this invocation's row in round i. Rows past the last read the last.
uint own_row(uint i, uint last) {
#if MATMUL_SHUFFLE
  return min(i * SHARE + gl_SubgroupInvocationID, last);
#else
  return min(i, last);
#endif
}

void norm_stats(uint rows) {
  const float n = float(p.k_count);
  for (uint t = 0; t < ROUNDS; t++) {
    const uint r = own_row(t, rows - 1);
    vec4 s = vec4(0.0);
    for (uint k = 0; k < p.k_count; k += 4) s += x_raw(r, k);
    m1[t] = norm_provisional_mean(NORM - 1, s.x + s.y + s.z + s.w, n);
    vec4 d = vec4(0.0), d2 = vec4(0.0);
    for (uint k = 0; k < p.k_count; k += 4) {
      const vec4 v = x_raw(r, k) - m1[t];
      d += v;
      d2 += v * v;
    }
    const float sd = d.x + d.y + d.z + d.w, sd2 = d2.x + d2.y + d2.z + d2.w;
    const NormStats st = norm_row_stats(NORM - 1, sd, sd2, n, p.eps);
    shift[t] = st.shift;
    scale[t] = st.scale;
  }
}

// x[own_row(i), k .. k + 3], normalised when a LayerNorm is fused (g, b: gamma and beta at
// k .. k + 3).
vec4 x_texel(uint i, uint last, uint k, vec4 g, vec4 b) {
  const vec4 v = x_raw(own_row(i, last), k);
  if (NORM == 0) return v;
  return norm_apply(NORM - 1, v, m1[i], shift[i], scale[i], g, b);
}

void main() {
  const uint e = DTYPE == DTYPE_F16 ? 8 : 4;
  const uint kt_count = p.k_count / e;
  // Invocations fold into y past the x group limit, as the host's fold_groups() sets them.
  const uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x *
                  gl_WorkGroupSize.x;
  const uint block = id / LANES, lane = id % LANES;
  t0 = gl_WorkGroupID.z * ROWS;
  // With MATMUL_SHUFFLE an invocation past the last block still loads its rows of x for the
  // others: it reads the last block's weights and stores nothing.
  const bool live = block * BLOCK < p.n_count;
  if (t0 >= p.rows || (MATMUL_SHUFFLE == 0 && !live)) return;
  const uint base = p.w_off / e + min(block, (p.n_count - 1) / BLOCK) * kt_count * BLOCK + lane;
  const uint rows = min(ROWS, p.rows - t0);
  const uint last = rows - 1;  // rows past it read the last one and store nothing
  if (NORM != 0) norm_stats(rows);

  float acc[ROWS][PER_LANE];
  for (uint t = 0; t < ROWS; t++)
    for (uint r = 0; r < PER_LANE; r++) acc[t][r] = 0.0;
  for (uint kt = 0; kt < kt_count; kt++) {
    vec4 lo[PER_LANE], hi[PER_LANE];
    for (uint r = 0; r < PER_LANE; r++) {
      const uvec4 v = imageLoad(wt, int(base + kt * BLOCK + r * LANES));
      if (DTYPE == DTYPE_F16) {
        lo[r] = vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y));
        hi[r] = vec4(unpackHalf2x16(v.z), unpackHalf2x16(v.w));
      } else {
        lo[r] = uintBitsToFloat(v);
      }
    }
    // gamma and beta at these k, read once for all the rows.
    vec4 ga = vec4(1.0), ba = vec4(0.0), gb = vec4(1.0), bb = vec4(0.0);
    if (NORM != 0) {
      ga = imageLoad(gamma, int(kt * e / 4));
      ba = imageLoad(beta, int(kt * e / 4));
      if (DTYPE == DTYPE_F16) {
        gb = imageLoad(gamma, int(kt * e / 4 + 1));
        bb = imageLoad(beta, int(kt * e / 4 + 1));
      }
    }
#if MATMUL_SHUFFLE
    // This invocation's rows of x at these k; row t comes from invocation t % SHARE.
    vec4 own_a[ROUNDS], own_b[ROUNDS];
    for (uint i = 0; i < ROUNDS; i++) {
      own_a[i] = x_texel(i, last, kt * e, ga, ba);
      if (DTYPE == DTYPE_F16) own_b[i] = x_texel(i, last, kt * e + 4, gb, bb);
    }
#define X_AT(t, own, k, g, b) subgroupShuffle(own[(t) / SHARE], (t) % SHARE)
#else
#define X_AT(t, own, k, g, b) x_texel(t, last, k, g, b)
#endif
    for (uint t = 0; t < ROWS; t++) {
      const vec4 xa = X_AT(t, own_a, kt * e, ga, ba);
      if (DTYPE == DTYPE_F16) {
        const vec4 xb = X_AT(t, own_b, kt * e + 4, gb, bb);
        for (uint r = 0; r < PER_LANE; r++) acc[t][r] += dot(xa, lo[r]) + dot(xb, hi[r]);
      } else {
        for (uint r = 0; r < PER_LANE; r++) acc[t][r] += dot(xa, lo[r]);
      }
    }
  }

  if (!live) return;
  if (ARGMAX) {
    // The first best row wins ties, so the host's "lowest n" rule holds across partials.
    // NaN counts as -inf, by its bits: a driver may assume floats are never NaN.
    float best = uintBitsToFloat(0xff800000u);  // -inf
    int best_n = -1;
    for (uint r = 0; r < PER_LANE; r++) {
      const uint n = block * BLOCK + r * LANES + lane;
      const bool nan = (floatBitsToUint(acc[0][r]) & 0x7fffffffu) > 0x7f800000u;
      if (n < p.n_count && !nan && (best_n < 0 || acc[0][r] > best)) {
        best = acc[0][r];
        best_n = int(p.n_base + n);
      }
    }
    const uint i = p.out_off + 2 * (p.n_base / BLOCK * LANES + id);
    out_[i] = best;
    out_[i + 1] = float(best_n);
    return;
  }
  // A loop over the rows, not unrolled, with row t's sums picked out of the tile by selects:
  // unrolling store() for every element of the tile (ROWS * PER_LANE copies of its branches and
  // per-lane loads) made lavapipe compile a 16 x 16 tile for 18 s, this form 2 s. Indexing acc
  // by t instead would keep the whole tile in memory (a masked per-lane store for every update
  // in the main loop, twice as slow).
  for (uint t = 0; t < rows; t++) {
    float v[PER_LANE];
    for (uint r = 0; r < PER_LANE; r++) {
      v[r] = acc[0][r];
      for (uint u = 1; u < ROWS; u++) v[r] = t == u ? acc[u][r] : v[r];
    }
    for (uint r = 0; r < PER_LANE; r++) {
      const uint n = block * BLOCK + r * LANES + lane;
      if (n < p.n_count) store(t0 + t, n, v[r]);
    }
  }
}
