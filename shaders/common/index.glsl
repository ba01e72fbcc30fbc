// Flat invocation index for 1-D ops dispatched with vkr::groups_for(), which folds group counts
// beyond maxComputeWorkGroupCount[0] into y.
uint flat_index() {
  return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}
