// The 1-D ops' workgroup, its width from specialization constant 0, and their flat indices.
// Declared here, before any use of gl_WorkGroupSize: glslang fixes gl_WorkGroupSize where it is
// first used, so a function compiled above the shader's own local_size declaration reads
// (1, 1, 1), and past maxComputeWorkGroupCount[0] workgroups (65,535 on llvmpipe and many
// GPUs) every folded row of the grid would overwrite the first instead of going on from it.
layout(local_size_x_id = 0) in;

// Flat invocation index for 1-D ops dispatched with vk::groups_for(), which folds group counts
// beyond maxComputeWorkGroupCount[0] into y.
uint flat_index() {
  return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}

// Flat workgroup index for ops with one workgroup per row (or slice), dispatched the same way.
uint flat_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
