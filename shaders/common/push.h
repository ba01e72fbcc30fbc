// Push-constant structs, one per op, defined once for both GLSL and C++. Members are 4-byte
// scalars only, so the C++ layout and the shader's push_constant layout agree by construction;
// the runtime still checks each struct's size against the shader's reflected block.
#ifndef GPT2VK_PUSH_H
#define GPT2VK_PUSH_H

#ifdef __cplusplus
#include <cstdint>
namespace push {
using uint = uint32_t;
#endif

// add: out[n] = a[n] + b[n]
struct AddPush {
  uint n;
};

#ifdef __cplusplus
static_assert(sizeof(AddPush) == 4);
}  // namespace push
#endif

#endif
