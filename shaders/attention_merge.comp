#version 450
// Split-K decode attention, step 2 of 2, where it is not fused into step 1 (AttentionPush.merge
// 0, and the tiled kernel's key ranges): out[t, head h] from the key blocks' partial results
// (attention_split.comp), as attention_merge.glsl says. One workgroup per (head, query).
#extension GL_GOOGLE_include_directive : require
#include "attention.h"

layout(local_size_x = ATTENTION_SPLIT_WG) in;
layout(constant_id = 3) const uint D = 64;

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [T, C], head h in cols h*D ..
layout(binding = 1) readonly buffer Part { float part[]; };  // [T, H, splits, D + 2]
layout(push_constant) uniform Push { AttentionPush p; };

#include "attention_merge.glsl"

void main() {
  merge_blocks(gl_WorkGroupID.y, gl_WorkGroupID.x, gl_NumWorkGroups.x, gl_LocalInvocationID.x);
}
