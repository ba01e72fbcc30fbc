// Lets one header define a push-constant struct for both GLSL and C++. Push structs hold 4-byte
// scalars only (uint, int, float), so the C++ layout and the shader's push_constant layout agree
// by construction; the runtime also checks each struct's size against the reflected block.
// Enumerations both sides share are plain constants here.
#ifndef GPT2VK_TYPES_H
#define GPT2VK_TYPES_H

#ifdef __cplusplus
#include <cstdint>
#define PUSH_NAMESPACE_BEGIN \
  namespace push {           \
  using uint = uint32_t;
#define PUSH_NAMESPACE_END }
#define CONST constexpr uint32_t
#else
#define PUSH_NAMESPACE_BEGIN
#define PUSH_NAMESPACE_END
#define CONST const uint
#endif

PUSH_NAMESPACE_BEGIN
// Weight storage, a specialization constant of every op that reads weights. fp16 weights are
// read as packed pairs from a uint buffer (unpackHalf2x16), so they need no 16-bit storage.
CONST DTYPE_F32 = 0;
CONST DTYPE_F16 = 1;

// Activation functions, for the activation op and the matmul epilogue.
CONST ACT_NONE = 0;
CONST ACT_GELU_TANH = 1;  // GPT-2's gelu_new
CONST ACT_GELU_ERF = 2;   // exact GELU
CONST ACT_RELU = 3;
CONST ACT_TANH = 4;        // BERT's pooler
CONST ACT_SILU = 5;        // x sigmoid(x): Marian's "swish"
PUSH_NAMESPACE_END

#endif
