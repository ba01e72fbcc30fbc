#version 450
// The backward of embedding.comp (training): each invocation owns one channel c and walks the
// tokens in order, adding scale dout[i, c] to dwte[ids[i], c] (the forward's scale: Marian's
// sqrt(C)) and dout[i, c] to dwpe[i % T, c] for learned positions. No float atomics: the sums happen in token order, the same bits every run, and
// repeated ids need no care. Consecutive invocations touch consecutive channels of a row, so a
// subgroup's accesses coalesce. dwte and dwpe accumulate (+=): a tied head's gradient may already
// be there. Only C invocations run, each over every token: fine for the tokens of a training step
// (thousands), where it is a small part of the step.
#extension GL_GOOGLE_include_directive : require
#include "embedding.h"
#include "common/index.glsl"

layout(binding = 0) buffer Dwte { float dwte[]; };            // rows [v_begin, v_end) of [V, C]
layout(binding = 1) buffer Dwpe { float dwpe[]; };            // [T, C], with learned
layout(binding = 2) readonly buffer Dout { float dout[]; };   // [n, C]
layout(binding = 3) readonly buffer Ids { int ids[]; };       // [n]
layout(push_constant) uniform Push { EmbeddingBackwardPush p; };

void main() {
  const uint c = flat_index();
  if (c >= p.C) return;
  for (uint i = 0; i < p.n; i++) {
    const float g = dout[i * p.C + c];
    const uint id = uint(ids[i]);
    if (id >= p.v_begin && id < p.v_end) {
      const uint at = p.wte_skip + (id - p.v_begin) * p.C + c;
      dwte[at] += p.scale * g;
    }
    if (p.learned != 0) dwpe[(i % p.T) * p.C + c] += g;
  }
}
