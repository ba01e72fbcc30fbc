// Flat invocation index for 1-D ops dispatched with vk::groups_for(), which folds group counts
// beyond maxComputeWorkGroupCount[0] into y.
uint flat_index() {
  return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}

// Flat workgroup index for ops with one workgroup per row (or slice), dispatched the same way.
uint flat_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
