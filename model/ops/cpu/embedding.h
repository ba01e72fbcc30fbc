// CPU reference of shaders/embedding.comp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/ops/types.h"


namespace model::cpu {

// out[t, :] = scale wte[ids[t], :] + position(pos_offset + t)    [T] ids -> [T, C]
// With types (BERT's segments), wtt[types[t], :] is added too: wtt [n_types, C], types [T].
// wpe [n_pos, C] is read only for PositionKind::Learned. The sinusoid is computed in double:
// pe[pos, 2i] = sin(pos / 10000^(2i/C)), pe[pos, 2i+1] = cos(pos / 10000^(2i/C)); SinusoidalHalves
// puts the sines in channels [0, ceil(C/2)) and the cosines after them.
// Throws std::out_of_range for an id outside [0, V), a type outside [0, n_types), a learned position at or past n_pos.
void embedding(float* out, const int32_t* ids, const float* wte, const float* wpe, size_t T,
               size_t C, size_t V, size_t n_pos, size_t pos_offset, model::PositionKind position,
               const int32_t* types = nullptr, const float* wtt = nullptr, size_t n_types = 0,
               float scale = 1.0f);

// The sinusoidal encoding of one position and channel in a layout (Sinusoidal or
// SinusoidalHalves), in double.
double sinusoid(size_t pos, size_t c, size_t C,
                model::PositionKind layout = model::PositionKind::Sinusoidal);

// The backward of cpu::embedding over B sequences of T tokens from position 0: dwte[ids[i]] +=
// scale dout[i] (the forward's scale), and for learned positions dwpe[t] += dout[b, t], in token
// order (deterministic). dwpe may be null (sinusoidal or no positions).
//   dout [B, T, C], ids [B, T] -> dwte [V, C], dwpe [n_pos, C] accumulated
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, size_t B,
                        size_t T, size_t C, float scale = 1.0f);

}  // namespace model::cpu
