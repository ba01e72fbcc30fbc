// Host wrappers of shaders/embedding.comp (token plus position embedding) and
// embedding_backward.comp (its gradient, for training).
#pragma once
#include <span>

#include "model/ops/gpu/common.h"
#include "shaders/embedding.h"

namespace model::gpu {

// out[t, :] = scale wte[ids[t], :] + position(pos_offset + t)    [T] ids -> [T, C]
// wpe is [n_pos, C] for PositionKind::Learned (pos_offset + T <= n_pos) and ignored otherwise
// (may be null; n_pos is then unused). Ids must already be valid (upload them with upload_ids);
// the shader clamps out-of-range ids into [0, V) only so a bad buffer cannot read out of bounds.
// An fp16 weight's span holds its elements as packed pairs, rounded up to a whole 32-bit word.
// wte may exceed maxStorageBufferRange: it is then bound as blocks of rows, one dispatch each.
// wte_interleaved: wte is in matmul's WeightLayout::Interleaved (a tied head that reads it so).
// step: the position read at run time (gpu::step_binding); it must then hold pos_offset.
// period: positions restart every `period` tokens (training: B sequences of T = period tokens in
// one call; T a multiple of it); 0: they do not.
// types and wtt (both or neither): each token's type, whose row of wtt [n_types, C] is added
// (BERT's segments). Upload the types with upload_ids(..., n_types), which checks them.
struct EmbeddingArgs {
  vk::BufferSpan out;           // [T, C]
  vk::BufferSpan ids;           // [T] int32
  Weight wte;                   // [V, C]
  const Weight* wpe = nullptr;  // [n_pos, C]
  uint32_t T = 0, C = 0, V = 0, n_pos = 0, pos_offset = 0;
  PositionKind position = PositionKind::Learned;
  bool wte_interleaved = false;
  const vk::BufferSpan* step = nullptr;  // [1] uint32: pos_offset
  uint32_t period = 0;
  const vk::BufferSpan* types = nullptr;  // [T] int32
  const Weight* wtt = nullptr;            // [n_types, C]
  uint32_t n_types = 0;
  float scale = 1.0f;  // multiplies wte's row (Marian's sqrt(C))
};
void embedding(const Ops& ops, vk::Recorder& rec, const EmbeddingArgs& a);

// A batch of T sequences' next tokens (serving several sequences at once): row t is token
// ids[t] at the position rows[2 t] (the batch table that attention_store_batch reads:
// {position, cache texel} per row), read when the kernel runs, so one recording serves every
// step. Every position must be below n_pos (for learned positions, wpe's rows; the host checks
// them before it writes the table).
//   [T] ids, rows [T, 2] uint32 -> out [T, C]
struct EmbeddingBatchArgs {
  vk::BufferSpan out;           // [T, C]
  vk::BufferSpan ids;           // [T] int32
  vk::BufferSpan rows;          // [T, 2] uint32: {position, cache texel}
  Weight wte;                   // [V, C]
  const Weight* wpe = nullptr;  // [n_pos, C]
  uint32_t T = 0, C = 0, V = 0, n_pos = 0;
  PositionKind position = PositionKind::Learned;
  bool wte_interleaved = false;
  float scale = 1.0f;
};
void embedding_batch(const Ops& ops, vk::Recorder& rec, const EmbeddingBatchArgs& a);

// Checks every id against the vocabulary [0, V) and uploads them as int32 [T] into dst. Throws
// vk::Error naming the first bad position and id, before anything is copied. With `padding`,
// ignore_target passes too (cross_entropy's targets, where it means none).
void upload_ids(const vk::Device& device, const vk::BufferSpan& dst, std::span<const int32_t> ids,
                uint32_t V, bool padding = false);

}  // namespace model::gpu
