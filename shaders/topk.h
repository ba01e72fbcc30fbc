// Push constants of shaders/topk.comp, shared by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_TOPK_H
#define GPT2VK_TOPK_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// Largest workgroup topk.comp is built for (its shared arrays), and the chunk each of the first
// invocations scans in the second step of a round.
CONST TOPK_MAX_WORKGROUP = 256;
CONST TOPK_CHUNK = 16;

// One level of the top-k tree: workgroup g reduces input [g * slice, min((g + 1) * slice, n))
// to its k best, written best first at [g * k, g * k + k).          [n] -> [groups, k]
struct TopkPush {
  uint n;       // input elements
  uint k;       // how many to keep
  uint slice;   // input elements per workgroup
  uint groups;  // workgroups with a slice (the dispatch may hold more after folding into y)
};
PUSH_NAMESPACE_END

#endif
