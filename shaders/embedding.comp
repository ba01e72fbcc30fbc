#version 450
// Token plus position embedding: out[t, c] = scale wte[ids[t], c] + position(pos_offset + t, c), and
// with TYPES a token-type (segment) row too, added before the position as BERT adds it:
// (wte[ids[t], c] + wtt[types[t], c]) + position.
// One invocation per output element. Each dispatch binds one block of vocabulary rows and writes
// only the tokens whose id falls in it, so every element is written by exactly one dispatch.
#extension GL_GOOGLE_include_directive : require
#include "embedding.h"
#include "matmul.h"
#include "common/index.glsl"

layout(constant_id = 3) const uint WTE_DTYPE = DTYPE_F32;
layout(constant_id = 4) const uint WPE_DTYPE = DTYPE_F32;
layout(constant_id = 5) const uint POSITION = POS_LEARNED;
// wte in the matmul's Interleaved layout (a tied head on a device that reads it so): texel
// (row, c / E) at (row / B * C / E + c / E) * B + row % B, B = MATMUL_BLOCK_ROWS, E = 16 bytes
// of elements.
layout(constant_id = 6) const bool WTE_INTERLEAVED = false;
layout(constant_id = 7) const bool TYPES = false;
layout(constant_id = 8) const uint WTT_DTYPE = DTYPE_F32;

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [T, C]
layout(binding = 1) readonly buffer Ids { int ids[]; };      // [T]
// Weights as 32-bit words: fp32 bits, or fp16 pairs (element i is half i & 1 of word i >> 1).
layout(binding = 2) readonly buffer Wte { uint wte[]; };  // rows [v_begin, v_end) of [V, C]
// Rows [pos_offset, +T) of [n_pos, C]; the whole table when the position is read at run time.
layout(binding = 3) readonly buffer Wpe { uint wpe[]; };
// EmbeddingPush.dynamic_pos: 1, the position of token 0 at step[0]; 2, a batch's table of
// {position, cache texel} per token, token t's position at step[2 t].
layout(binding = 4) readonly buffer Step { uint step[]; };
// With TYPES: each token's type, and the table [n_types, C] (else any buffer, not read).
layout(binding = 5) readonly buffer Types { int types[]; };  // [T]
layout(binding = 6) readonly buffer Wtt { uint wtt[]; };
layout(push_constant) uniform Push { EmbeddingPush p; };

float load_wte(uint i) {
  if (WTE_DTYPE == DTYPE_F16) return unpackHalf2x16(wte[i >> 1])[i & 1u];
  return uintBitsToFloat(wte[i]);
}

float load_wtt(uint i) {
  if (WTT_DTYPE == DTYPE_F16) return unpackHalf2x16(wtt[i >> 1])[i & 1u];
  return uintBitsToFloat(wtt[i]);
}

float load_wpe(uint i) {
  if (WPE_DTYPE == DTYPE_F16) return unpackHalf2x16(wpe[i >> 1])[i & 1u];
  return uintBitsToFloat(wpe[i]);
}

// 2^x to about 1 ulp on any device (Vulkan lets exp2 be off by 3 + 2|x| ulp, 29 ulp at x = -13):
// 2^n times a degree-7 Taylor polynomial of 2^f for f = x - n in [-0.5, 0.5] (truncation < 6e-9),
// in fp32 adds and multiplies, which Vulkan requires to be correctly rounded.
float exp2_accurate(float x) {
  float n = round(x);
  precise float f = x - n;
  precise float q = 1.0 + f * (0.6931471805599453 + f * (0.2402265069591007 +
                    f * (0.0555041086648216 + f * (0.0096181291076285 + f * (0.0013333558146428 +
                    f * (0.0001540353039338 + f * 0.0000152527338040))))));
  return ldexp(q, int(n));
}

// "Attention Is All You Need": pe[pos, 2i] = sin(pos / 10000^(2i/C)), pe[pos, 2i+1] = cos(same);
// POS_SINUSOIDAL_HALVES lays the same table out as pe[pos, i] = sin(...2i/C) for i < ceil(C/2)
// and pe[pos, ceil(C/2) + i] = cos(...2i/C).
// The angle pos * freq is never rounded as a whole: freq splits into a 10-bit head (pos * head is
// exact for pos < 2^14) and a tail, and the head's product is reduced by k * 2pi (Cody-Waite, 2pi
// as an 8-bit head plus a tail, so k * TWO_PI_HI is exact) before the tail's product is added.
// sin and cos then see an argument in [-pi, pi], the only range where Vulkan bounds their error.
// What remains is freq's own fp32 rounding, a few 2^-24 relative, times pos.
float sinusoid(uint pos, uint c) {
  const float LOG2_10000 = 13.287712379549449;
  const float TWO_PI_HI = 6.28125;
  const float TWO_PI_LO = 0.0019353071795864769;  // 2pi - 6.28125
  const float INV_TWO_PI = 0.15915494309189535;
  const uint half_c = (p.C + 1) / 2;
  const bool halves = POSITION == POS_SINUSOIDAL_HALVES;
  const bool is_sin = halves ? c < half_c : (c & 1u) == 0u;
  const uint even = halves ? 2 * (is_sin ? c : c - half_c) : c & ~1u;  // 2i
  float freq = exp2_accurate(-float(even) * (LOG2_10000 / float(p.C)));
  float head = uintBitsToFloat(floatBitsToUint(freq) & 0xffffc000u);
  precise float tail = float(pos) * (freq - head);
  precise float angle = float(pos) * head;
  precise float k = round((angle + tail) * INV_TWO_PI);
  precise float r = ((angle - k * TWO_PI_HI) - k * TWO_PI_LO) + tail;
  return is_sin ? sin(r) : cos(r);
}

void main() {
  uint i = flat_index();
  if (i >= p.T * p.C) return;
  uint t = i / p.C, c = i % p.C;
  // Ids are validated on the host (gpu::upload_ids); the clamp only keeps a bad buffer in bounds.
  uint id = uint(clamp(ids[t], 0, int(p.V) - 1));
  if (id < p.v_begin || id >= p.v_end) return;
  const uint row = id - p.v_begin;
  uint e = WTE_DTYPE == DTYPE_F16 ? 8 : 4;
  uint at = row * p.C + c;
  const uint B = MATMUL_BLOCK_ROWS;
  if (WTE_INTERLEAVED) at = ((row / B * (p.C / e) + c / e) * B + row % B) * e + c % e;
  float x = load_wte(p.wte_skip + at) * p.scale;
  // Types are validated on the host too; the clamp only keeps a bad buffer in bounds.
  if (TYPES) x += load_wtt(uint(clamp(types[t], 0, int(p.n_types) - 1)) * p.C + c);
  // Rows past pos_offset, and the token's place in its sequence.
  const uint dpos = p.dynamic_pos == 2 ? step[2 * t] : p.dynamic_pos == 1 ? step[0] : 0;
  const uint tp = p.dynamic_pos == 2 ? 0 : t % p.period;
  if (POSITION == POS_LEARNED) x += load_wpe(p.wpe_skip + (dpos + tp) * p.C + c);
  if (POSITION == POS_SINUSOIDAL || POSITION == POS_SINUSOIDAL_HALVES)
    x += sinusoid(p.pos_offset + dpos + tp, c);
  out_[i] = x;
}
