// Push constants of shaders/add.comp, shared by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_ADD_H
#define GPT2VK_ADD_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// out[n] = a[n] + b[n]
struct AddPush {
  uint n;
};
PUSH_NAMESPACE_END

#endif
