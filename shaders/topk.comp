#version 450
// Top-k selection, one level of a tree (model/ops/gpu/topk.cpp chains levels until one workgroup
// remains). Each workgroup finds the k best elements of its slice in k rounds: round r takes the
// best element strictly after round r-1's winner in the order below, with a two-step shared-memory
// reduction (two barriers a round, no subgroup operations).
//
// Order: larger value first, ties to the lower id. Values compare as integer keys that follow
// IEEE 754 totalOrder (so +0 ranks above -0) with NaN mapped to -inf beforehand: integer
// comparisons stay exact where a driver may assume floats are never NaN or infinite. Key 0 (a
// NaN bit pattern, never produced) with id 0xffffffff is the "nothing" sentinel, below all.
#extension GL_GOOGLE_include_directive : require
#include "topk.h"
#include "common/index.glsl"

layout(constant_id = 3) const bool FIRST = true;  // input is the logits: fp32 bits, ids implicit
layout(constant_id = 4) const bool LAST = true;   // output is the answer: fp32 values, int32 ids

layout(binding = 0) writeonly buffer OutIds { uint out_ids[]; };        // [groups, k]
layout(binding = 1) writeonly buffer OutValues { uint out_values[]; };  // [groups, k] keys; fp32 if LAST
layout(binding = 2) readonly buffer InValues { uint in_values[]; };     // [n] keys; fp32 if FIRST
layout(binding = 3) readonly buffer InIds { uint in_ids[]; };           // [n]; unused if FIRST
layout(push_constant) uniform Push { TopkPush p; };

const uint NONE_KEY = 0u, NONE_ID = 0xffffffffu;
shared uint s_key[TOPK_MAX_WORKGROUP], s_id[TOPK_MAX_WORKGROUP];
shared uint s_key2[TOPK_MAX_WORKGROUP / TOPK_CHUNK], s_id2[TOPK_MAX_WORKGROUP / TOPK_CHUNK];

uint key_of(uint bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) bits = 0xff800000u;  // NaN -> -inf
  return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u;
}

uint bits_of(uint key) { return (key & 0x80000000u) != 0u ? key & 0x7fffffffu : ~key; }

bool better(uint key_a, uint id_a, uint key_b, uint id_b) {
  return key_a > key_b || (key_a == key_b && id_a < id_b);
}

void main() {
  const uint g = flat_group();
  if (g >= p.groups) return;  // the whole workgroup leaves: no barrier is left half-reached
  const uint lid = gl_LocalInvocationID.x, size = gl_WorkGroupSize.x;
  const uint parts = (size + TOPK_CHUNK - 1u) / TOPK_CHUNK;
  const uint begin = g * p.slice, end = min(begin + p.slice, p.n);
  uint prev_key = 0xffffffffu, prev_id = 0u;  // above every element
  for (uint r = 0u; r < p.k; r++) {
    // This invocation's best among its strided elements that come after the previous winner.
    uint best_key = NONE_KEY, best_id = NONE_ID;
    for (uint j = begin + lid; j < end; j += size) {
      uint key = FIRST ? key_of(in_values[j]) : in_values[j];
      uint id = FIRST ? j : in_ids[j];
      if (better(prev_key, prev_id, key, id) && better(key, id, best_key, best_id)) {
        best_key = key;
        best_id = id;
      }
    }
    s_key[lid] = best_key;
    s_id[lid] = best_id;
    barrier();
    if (lid < parts) {
      best_key = NONE_KEY;
      best_id = NONE_ID;
      for (uint m = lid * TOPK_CHUNK; m < min(lid * TOPK_CHUNK + TOPK_CHUNK, size); m++) {
        if (better(s_key[m], s_id[m], best_key, best_id)) {
          best_key = s_key[m];
          best_id = s_id[m];
        }
      }
      s_key2[lid] = best_key;
      s_id2[lid] = best_id;
    }
    barrier();
    // Every invocation reduces the partial results itself, so all know the winner without a
    // third barrier; the next round writes s_key2 only after its first barrier.
    prev_key = NONE_KEY;
    prev_id = NONE_ID;
    for (uint m = 0u; m < parts; m++) {
      if (better(s_key2[m], s_id2[m], prev_key, prev_id)) {
        prev_key = s_key2[m];
        prev_id = s_id2[m];
      }
    }
    if (lid == 0u) {
      out_ids[g * p.k + r] = prev_id;
      out_values[g * p.k + r] = LAST ? bits_of(prev_key) : prev_key;
    }
  }
}
