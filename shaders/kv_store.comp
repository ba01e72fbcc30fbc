#version 450
// Appends this step's keys and values to one layer's cache: row t of the fused QKV projection
// (Q | K | V, as GPT-2's c_attn lays it out) goes to cache row pos + t. One invocation per
// element of K (it copies the matching element of V too); with an fp16 cache, per pair of
// elements, so that each 32-bit word has one writer (C is even then).
#extension GL_GOOGLE_include_directive : require
#include "kv_store.h"
#include "common/half.glsl"
#include "common/index.glsl"

layout(constant_id = 3) const uint CACHE_DTYPE = DTYPE_F32;  // of the caches' elements

// Words of the caches: fp32 bits, or two fp16 values (pack_halves, the lower first).
layout(binding = 0) writeonly buffer KCache { uint k_cache[]; };  // [>= pos + T, C]
layout(binding = 1) writeonly buffer VCache { uint v_cache[]; };  // [>= pos + T, C]
layout(binding = 2) readonly buffer Qkv { float qkv[]; };         // [T, 3C]
layout(binding = 3) readonly buffer Step { uint step[]; };        // KvStorePush.dynamic_pos
layout(push_constant) uniform Push { KvStorePush p; };

void main() {
  const uint per = CACHE_DTYPE == DTYPE_F16 ? 2 : 1;  // elements per invocation (and word)
  const uint i = flat_index() * per;
  if (i >= p.T * p.C) return;
  const uint t = i / p.C, c = i % p.C;
  const uint src = t * 3 * p.C + c;
  const uint dst = (p.pos + (p.dynamic_pos != 0 ? step[0] : 0) + t) * p.C + c;
  if (CACHE_DTYPE == DTYPE_F16) {
    k_cache[dst / 2] = pack_halves(vec2(qkv[src + p.C], qkv[src + p.C + 1]));
    v_cache[dst / 2] = pack_halves(vec2(qkv[src + 2 * p.C], qkv[src + 2 * p.C + 1]));
  } else {
    k_cache[dst] = floatBitsToUint(qkv[src + p.C]);
    v_cache[dst] = floatBitsToUint(qkv[src + 2 * p.C]);
  }
}
