#version 450
// Token plus position embedding: out[t, c] = wte[ids[t], c] + position(pos_offset + t, c).
// One invocation per output element. Each dispatch binds one block of vocabulary rows and writes
// only the tokens whose id falls in it, so every element is written by exactly one dispatch.
#extension GL_GOOGLE_include_directive : require
#include "embedding.h"
#include "common/index.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint WTE_DTYPE = DTYPE_F32;
layout(constant_id = 4) const uint WPE_DTYPE = DTYPE_F32;
layout(constant_id = 5) const uint POSITION = POS_LEARNED;

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [T, C]
layout(binding = 1) readonly buffer Ids { int ids[]; };      // [T]
// Weights as 32-bit words: fp32 bits, or fp16 pairs (element i is half i & 1 of word i >> 1).
layout(binding = 2) readonly buffer Wte { uint wte[]; };  // rows [v_begin, v_end) of [V, C]
layout(binding = 3) readonly buffer Wpe { uint wpe[]; };  // rows [pos_offset, +T) of [n_pos, C]
layout(push_constant) uniform Push { EmbeddingPush p; };

float load_wte(uint i) {
  if (WTE_DTYPE == DTYPE_F16) return unpackHalf2x16(wte[i >> 1])[i & 1u];
  return uintBitsToFloat(wte[i]);
}

float load_wpe(uint i) {
  if (WPE_DTYPE == DTYPE_F16) return unpackHalf2x16(wpe[i >> 1])[i & 1u];
  return uintBitsToFloat(wpe[i]);
}

// "Attention Is All You Need": pe[pos, 2i] = sin(pos / 10000^(2i/C)), pe[pos, 2i+1] = cos(same).
// The angle is reduced to [-pi, pi] here (Cody-Waite, 2pi split into an 8-bit head and a tail,
// so k * TWO_PI_HI is exact for k < 2^16) because Vulkan bounds sin/cos error only inside
// [-pi, pi]. What remains is the fp32 rounding of the frequency, about pos * 2^-23 radians.
float sinusoid(uint pos, uint c) {
  const float LOG2_10000 = 13.287712379549449;
  const float TWO_PI_HI = 6.28125;
  const float TWO_PI_LO = 0.0019353071795864769;  // 2pi - 6.28125
  const float INV_TWO_PI = 0.15915494309189535;
  float freq = exp2(-float(c & ~1u) * (LOG2_10000 / float(p.C)));
  precise float angle = float(pos) * freq;
  precise float residual = fma(float(pos), freq, -angle);  // exact rounding error of the product
  precise float k = round(angle * INV_TWO_PI);
  precise float r = ((angle - k * TWO_PI_HI) - k * TWO_PI_LO) + residual;
  return (c & 1u) == 0u ? sin(r) : cos(r);
}

void main() {
  uint i = flat_index();
  if (i >= p.T * p.C) return;
  uint t = i / p.C, c = i % p.C;
  // Ids are validated on the host (gpu::upload_ids); the clamp only keeps a bad buffer in bounds.
  uint id = uint(clamp(ids[t], 0, int(p.V) - 1));
  if (id < p.v_begin || id >= p.v_end) return;
  float x = load_wte(p.wte_skip + (id - p.v_begin) * p.C + c);
  if (POSITION == POS_LEARNED) x += load_wpe(p.wpe_skip + t * p.C + c);
  if (POSITION == POS_SINUSOIDAL) x += sinusoid(p.pos_offset + t, c);
  out_[i] = x;
}
