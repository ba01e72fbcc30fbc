#version 450
// Matrix-vector product for a few rows (decode), reading x and W through storage texel buffers:
// out[t, n] = act(x[t] . w(:, n) + b[n]) + r[t, n] for t < p.rows <= ROWS. For devices where a
// texel load is the fast path: llvmpipe turns a storage-buffer load whose address differs per
// lane into a scalar loop over the lanes, but an imageLoad into one vector gather. The interface
// and epilogue are matmul_vec.comp's (matmul.glsl) except bindings 1 and 2: x [T, K] as rgba32f
// (4 floats a texel) and W as rgba32ui (E = 8 fp16 or 4 fp32 weights a texel). The host
// guarantees whole, aligned texels: K % 4 == 0, the weight's contiguous axis (N of [K, N], K of
// [N, K]) a multiple of E, and x_off, k_base % 4 == 0, w_off % E == 0.
//
// W [K, N]: an invocation owns one texel of outputs (E consecutive n) and a slice of K. The x
// lanes of a workgroup read consecutive texels of a row of W, one contiguous block; its y slices
// split K and meet in shared memory once, after the loop. x is the same for all lanes of a slice.
// W [N, K]: an invocation owns NK_OUTS consecutive rows of W and every gl_WorkGroupSize.x-th texel
// of them: the x lanes read consecutive texels of each row, one contiguous block, and meet in
// shared memory after the loop.
#extension GL_GOOGLE_include_directive : require
#define MATMUL_TEXEL
#include "matmul.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1) in;
layout(constant_id = 6) const uint ROWS = 1;  // rows of x per dispatch, at most

layout(binding = 1, rgba32f) uniform readonly imageBuffer xt;    // [T, K / 4]
layout(binding = 2, rgba32ui) uniform readonly uimageBuffer wt;  // [K, N / E] or [N, K / E]

const uint NK_OUTS = 8;  // outputs per invocation, W [N, K]

// Partial sums: W [K, N] partial[t][slice][lane * 8 + j], W [N, K] partial[t][row][lane]; the
// first ROWS * gl_WorkGroupSize.y * gl_WorkGroupSize.x * 8 used, at a fixed size (Metal cannot
// size a shared array by specialization constants) that the host keeps within.
shared float partial[MATMUL_TEXEL_MAX_PARTIAL];

uint texel_elems() { return DTYPE == DTYPE_F16 ? 8 : 4; }

// The weights of one texel as floats: 8 fp16, or 4 fp32 and zeros.
void unpack(uvec4 v, out float wv[8]) {
  for (uint c = 0; c < 4; c++) {
    if (DTYPE == DTYPE_F16) {
      vec2 h = unpackHalf2x16(v[c]);
      wv[2 * c] = h.x;
      wv[2 * c + 1] = h.y;
    } else {
      wv[c] = uintBitsToFloat(v[c]);
      wv[c + 4] = 0.0;
    }
  }
}

// x[t, k_base + k .. + 3], k % 4 == 0
vec4 x_texel(uint t, uint k) { return imageLoad(xt, int((p.x_off + t * p.K + p.k_base + k) / 4)); }

void main_kn() {
  const uint e = texel_elems(), lanes = gl_WorkGroupSize.x, slices = gl_WorkGroupSize.y;
  const uint lane = gl_LocalInvocationID.x, slice = gl_LocalInvocationID.y;
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // host-folded
  const uint row_texels = p.n_count / e;
  const uint nt = group * lanes + lane;              // this invocation's texel of outputs
  const uint w_nt = min(nt, row_texels - 1);         // past the end: read a valid texel, store none
  const uint per = (p.k_count / 4 + slices - 1) / slices * 4;  // k per slice, whole x texels
  const uint k0 = min(p.k_count, slice * per), k1 = min(p.k_count, k0 + per);

  float acc[ROWS][8];
  for (uint t = 0; t < ROWS; t++)
    for (uint j = 0; j < 8; j++) acc[t][j] = 0.0;
  for (uint k = k0; k < k1; k += 4) {
    vec4 xv[ROWS];
    for (uint t = 0; t < ROWS; t++) xv[t] = t < p.rows ? x_texel(t, k) : vec4(0.0);
    for (uint kk = 0; kk < 4; kk++) {
      float wv[8];
      unpack(imageLoad(wt, int(p.w_off / e + (k + kk) * row_texels + w_nt)), wv);
      for (uint t = 0; t < ROWS; t++)
        for (uint j = 0; j < 8; j++) acc[t][j] += xv[t][kk] * wv[j];
    }
  }

  const uint outs = lanes * 8;
  for (uint t = 0; t < ROWS; t++)
    for (uint j = 0; j < 8; j++) partial[(t * slices + slice) * outs + lane * 8 + j] = acc[t][j];
  barrier();
  // The group's lanes * e outputs, finished by all its invocations in turn.
  for (uint o = slice * lanes + lane; o < lanes * e; o += lanes * slices) {
    const uint n = group * lanes * e + o, l = o / e, j = o % e;
    if (n < p.n_count)
      for (uint t = 0; t < p.rows; t++) {
        float s = 0.0;
        for (uint y = 0; y < slices; y++) s += partial[(t * slices + y) * outs + l * 8 + j];
        store(t, n, s);
      }
  }
}

void main_nk() {
  const uint e = texel_elems(), lanes = gl_WorkGroupSize.x, ys = gl_WorkGroupSize.y;
  const uint lane = gl_LocalInvocationID.x, y = gl_LocalInvocationID.y;
  const uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // host-folded
  const uint outs = ys * NK_OUTS;                 // rows of W per workgroup
  const uint n0 = group * outs + y * NK_OUTS;     // this invocation's rows n0, n0 + 1, ...
  const uint row_texels = p.k_count / e;

  float acc[ROWS][NK_OUTS];
  for (uint t = 0; t < ROWS; t++)
    for (uint i = 0; i < NK_OUTS; i++) acc[t][i] = 0.0;
  for (uint kt = lane; kt < row_texels; kt += lanes) {
    float wv[NK_OUTS][8];
    for (uint i = 0; i < NK_OUTS; i++) {
      const uint n = min(n0 + i, p.n_count - 1);  // past the end: read, store none
      unpack(imageLoad(wt, int(p.w_off / e + n * row_texels + kt)), wv[i]);
    }
    for (uint t = 0; t < ROWS; t++) {
      if (t >= p.rows) break;
      for (uint q = 0; q < e; q += 4) {
        const vec4 xv = x_texel(t, kt * e + q);
        for (uint i = 0; i < NK_OUTS; i++)
          acc[t][i] += dot(xv, vec4(wv[i][q], wv[i][q + 1], wv[i][q + 2], wv[i][q + 3]));
      }
    }
  }

  // partial[t][row of the group][lane]
  for (uint t = 0; t < ROWS; t++)
    for (uint i = 0; i < NK_OUTS; i++)
      partial[(t * outs + y * NK_OUTS + i) * lanes + lane] = acc[t][i];
  barrier();
  for (uint o = y * lanes + lane; o < outs; o += lanes * ys) {
    const uint n = group * outs + o;
    if (n < p.n_count)
      for (uint t = 0; t < p.rows; t++) {
        float s = 0.0;
        for (uint l = 0; l < lanes; l++) s += partial[(t * outs + o) * lanes + l];
        store(t, n, s);
      }
  }
}

void main() {
  if (LAYOUT == MATMUL_NK)
    main_nk();
  else
    main_kn();
}
