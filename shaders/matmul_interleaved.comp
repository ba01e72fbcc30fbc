#version 450
// out[t, n] = act(x[t] . W[n] + b[n]) + r[t, n] for t < p.rows <= ROWS, with W [N, K] stored
// interleaved (gpu::WeightLayout::Interleaved): rows in blocks of B = MATMUL_BLOCK_ROWS (64), and
// within a block, for each texel column kt (E = 8 fp16 or 4 fp32 weights), the B rows' texels
// side by side:  texel (n, kt) at (n / B * KT + kt) * B + n % B, KT = K / E.
// For devices where storage texel buffers are the fast path (llvmpipe: a storage-buffer load
// whose address differs per lane is a scalar loop over the lanes, an imageLoad one vector
// gather). Eight consecutive invocations share a block: invocation `lane` owns rows lane,
// lane + 8, ..., lane + 56 of it, so for each of those the eight lanes read one contiguous
// 128-byte run. Each invocation sums all of K itself: no shared memory, no barriers. x is read as
// rgba32f texels too (through a storage buffer, a load that is the same for all lanes measured
// slower still); it is the same for the eight lanes of a block, so eight rows per lane share
// each x load (measured on llvmpipe: 8 rows per lane about twice as fast as 4; 16 no faster).
// The interface and epilogue are matmul.glsl's; the host guarantees K % E == 0, whole blocks
// (the weight holds N rounded up to a whole block, padded with zeros) and texel-aligned windows.
#extension GL_GOOGLE_include_directive : require
#define MATMUL_TEXEL
#include "matmul.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 6) const uint ROWS = 1;  // rows of x per dispatch, at most
// Instead of the outputs, each invocation writes the best of its own (row 0 only) as the pair
// out[2 i] = value, out[2 i + 1] = n, i its invocation index plus 8 per block before the
// dispatch's first: greedy decoding's head, whose host finishes the argmax over these partials
// (gpu::matmul_argmax), without writing the logits or a top-k pass.
layout(constant_id = 7) const bool ARGMAX = false;

layout(binding = 1, rgba32f) uniform readonly imageBuffer xt;    // [T, K / 4]
layout(binding = 2, rgba32ui) uniform readonly uimageBuffer wt;  // [N / B, K / E, B]

const uint BLOCK = MATMUL_BLOCK_ROWS, LANES = 8, PER_LANE = BLOCK / LANES;

vec4 x_texel(uint t, uint k) { return imageLoad(xt, int((p.x_off + t * p.K + k) / 4)); }

void main() {
  const uint e = DTYPE == DTYPE_F16 ? 8 : 4;
  const uint kt_count = p.k_count / e;
  // Invocations fold into y past the x group limit, as the host's fold_groups() sets them.
  const uint id = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x *
                  gl_WorkGroupSize.x;
  const uint block = id / LANES, lane = id % LANES;
  if (block * BLOCK >= p.n_count) return;
  const uint base = p.w_off / e + block * kt_count * BLOCK + lane;
  const uint last = p.rows - 1;  // rows past it read the last one and store nothing

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
    for (uint t = 0; t < ROWS; t++) {
      const vec4 xa = x_texel(min(t, last), kt * e);
      if (DTYPE == DTYPE_F16) {
        const vec4 xb = x_texel(min(t, last), kt * e + 4);
        for (uint r = 0; r < PER_LANE; r++) acc[t][r] += dot(xa, lo[r]) + dot(xb, hi[r]);
      } else {
        for (uint r = 0; r < PER_LANE; r++) acc[t][r] += dot(xa, lo[r]);
      }
    }
  }

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
  for (uint r = 0; r < PER_LANE; r++) {
    const uint n = block * BLOCK + r * LANES + lane;
    if (n < p.n_count)
      for (uint t = 0; t < p.rows; t++) store(t, n, acc[t][r]);
  }
}
