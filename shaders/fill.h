// Push constants of shaders/fill.comp, shared by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_FILL_H
#define GPT2VK_FILL_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// out[n] = value                                              -> [n]
struct FillPush {
  uint n;
  float value;
};
PUSH_NAMESPACE_END

#endif
