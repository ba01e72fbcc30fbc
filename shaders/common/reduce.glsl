// Max and sum of one value per invocation over the workgroup, as a shared-memory tree: no
// subgroup operations, and any workgroup size works, not only powers of two (each step folds
// the upper half, rounded down, onto the lower; for a power of two that is the usual halving).
// GLSL has no templates, so the includer picks the element type and owns the scratch array,
// declared before the include (it may reuse red[] between reductions), of at least
// gl_WorkGroupSize.x elements and sized by a constant, not a specialization constant (which
// Metal cannot take):
//   #define REDUCE_T vec2
//   shared REDUCE_T red[LAYERNORM_MAX_WORKGROUP];
// Every invocation of the workgroup must call (there are barriers inside) and gets the result;
// red[] is free again on return.

REDUCE_T workgroup_reduce(REDUCE_T v, bool is_max) {
  uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x; s > 1;) {
    uint h = (s + 1) / 2;
    if (tid < s - h) red[tid] = is_max ? max(red[tid], red[tid + h]) : red[tid] + red[tid + h];
    barrier();
    s = h;
  }
  REDUCE_T r = red[0];
  barrier();
  return r;
}

// is_max is a constant at every call, so the compiler folds the choice away.
REDUCE_T workgroup_max(REDUCE_T v) { return workgroup_reduce(v, true); }
REDUCE_T workgroup_sum(REDUCE_T v) { return workgroup_reduce(v, false); }
