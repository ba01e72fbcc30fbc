#version 450
// Appends this step's keys and values to one layer's cache: row t of the fused QKV projection
// (Q | K | V, as GPT-2's c_attn lays it out) goes to cache row pos + t. One invocation per
// element of K (it copies the matching element of V too).
#extension GL_GOOGLE_include_directive : require
#include "kv_store.h"
#include "common/index.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) writeonly buffer KCache { float k_cache[]; };  // [>= pos + T, C]
layout(binding = 1) writeonly buffer VCache { float v_cache[]; };  // [>= pos + T, C]
layout(binding = 2) readonly buffer Qkv { float qkv[]; };          // [T, 3C]
layout(binding = 3) readonly buffer Step { uint step[]; };         // KvStorePush.dynamic_pos
layout(push_constant) uniform Push { KvStorePush p; };

void main() {
  uint i = flat_index();
  if (i >= p.T * p.C) return;
  uint t = i / p.C, c = i % p.C;
  const uint src = t * 3 * p.C + c;
  const uint dst = (p.pos + (p.dynamic_pos != 0 ? step[0] : 0) + t) * p.C + c;
  k_cache[dst] = qkv[src + p.C];
  v_cache[dst] = qkv[src + 2 * p.C];
}
