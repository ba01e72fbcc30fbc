// Push constants of shaders/embedding.comp, shared by GLSL and C++ (see shaders/common/types.h).
#ifndef GPT2VK_EMBEDDING_H
#define GPT2VK_EMBEDDING_H
#include "common/types.h"

PUSH_NAMESPACE_BEGIN
// Where the position term comes from (specialization constant 5 of embedding.comp).
CONST POS_LEARNED = 0;     // a table row wpe[pos_offset + t] (GPT-2)
CONST POS_SINUSOIDAL = 1;  // sin/cos of the position, computed in the shader
CONST POS_NONE = 2;        // token embedding only
// sin of every frequency in the first half of the channels, their cos in the second (Marian's
// and fairseq's layout of the same table)
CONST POS_SINUSOIDAL_HALVES = 3;

// out[t, c] = scale wte[ids[t], c] + position(pos_offset + t % period, c)   [T] ids -> [T, C]
// One dispatch covers the rows of wte whose id lies in [v_begin, v_end): a vocabulary larger
// than maxStorageBufferRange is bound block by block.
struct EmbeddingPush {
  uint T;           // tokens
  uint C;           // channels
  uint V;           // vocabulary size; the shader clamps ids into [0, V)
  uint pos_offset;  // position of token 0 (the cache length when decoding)
  uint v_begin;     // first vocabulary row of this dispatch's wte binding
  uint v_end;       // one past its last row
  uint wte_skip;    // elements from the start of the wte binding to row v_begin
  uint wpe_skip;    // elements from the start of the wpe binding to row pos_offset
  // 1: the positions start at pos_offset + the Step binding's position, read when the kernel
  // runs (the host binds wpe from row 0 and pushes pos_offset 0), so one recording serves
  // every decode step; 2: each token is a sequence of its own, at the position the Step
  // binding's batch table gives it ({position, cache texel} per token, as kv_store reads it),
  // so one recording serves every step of a batch; 0: the Step binding is not read.
  uint dynamic_pos;
  // Positions restart every `period` tokens: training's B sequences of T in one dispatch (the
  // host pushes T itself otherwise).
  uint period;
  uint n_types;  // rows of the token-type table (TYPES); the shader clamps types into [0, n_types)
  float scale;   // multiplies the token's row (Marian's sqrt(C)); 1 otherwise, which is exact
};

// embedding_backward.comp (training): dwte[ids[i], c] += dout[i, c] for the tokens whose id lies
// in [v_begin, v_end) (this dispatch's rows of dwte), and with `learned` dwpe[i % T, c] +=
// dout[i, c], each channel's sums in token order.     dout [n, C], ids [n] -> dwte, dwpe
struct EmbeddingBackwardPush {
  uint n;         // tokens: B sequences of T
  uint T;         // tokens per sequence, from position 0
  uint C;         // channels
  uint v_begin;   // first vocabulary row of this dispatch's dwte binding
  uint v_end;     // one past its last row
  uint wte_skip;  // elements from the start of the dwte binding to row v_begin
  uint learned;   // 1: dwpe too (one dispatch only)
  float scale;    // what the forward multiplied wte's rows by: dwte gets scale * dout
};
PUSH_NAMESPACE_END

#endif
