// Host wrappers of shaders/embedding.comp (token plus position embedding) and
// embedding_backward.comp (its gradient, for training).
#pragma once
#include <span>

#include "model/ops/gpu/common.h"
#include "shaders/embedding.h"

namespace model::gpu {

// out[t, :] = wte[ids[t], :] + position(pos_offset + t)          [T] ids -> [T, C]
// wpe is [n_pos, C] for PositionKind::Learned (pos_offset + T <= n_pos) and ignored otherwise
// (may be null; n_pos is then unused). Ids must already be valid (upload them with upload_ids);
// the shader clamps out-of-range ids into [0, V) only so a bad buffer cannot read out of bounds.
// An fp16 weight's span holds its elements as packed pairs, rounded up to a whole 32-bit word.
// wte may exceed maxStorageBufferRange: it is then bound as blocks of rows, one dispatch each.
// wte_interleaved: wte is in matmul's WeightLayout::Interleaved (a tied head that reads it so).
// step: the position read at run time (gpu::step_binding); it must then hold pos_offset.
// period: positions restart every `period` tokens (training: B sequences of T = period tokens in
// one call; T a multiple of it); 0: they do not.
void embedding(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& out,
               const vk::BufferSpan& ids, const Weight& wte, const Weight* wpe, uint32_t T,
               uint32_t C, uint32_t V, uint32_t n_pos, uint32_t pos_offset, PositionKind position,
               bool wte_interleaved = false, const vk::BufferSpan* step = nullptr,
               uint32_t period = 0);

// A batch of T sequences' next tokens (serving several sequences at once): row t is token
// ids[t] at the position rows[2 t] (the batch table that attention_store_batch reads:
// {position, cache texel} per row), read when the kernel runs, so one recording serves every
// step. Every position must be below n_pos (for learned positions, wpe's rows; the host checks
// them before it writes the table).
//   [T] ids, rows [T, 2] uint32 -> out [T, C]
void embedding_batch(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& out,
                     const vk::BufferSpan& ids, const Weight& wte, const Weight* wpe, uint32_t T,
                     uint32_t C, uint32_t V, uint32_t n_pos, PositionKind position,
                     bool wte_interleaved, const vk::BufferSpan& rows);

// Checks every id against the vocabulary [0, V) and uploads them as int32 [T] into dst. Throws
// vk::Error naming the first bad position and id, before anything is copied.
void upload_ids(const vk::Device& device, const vk::BufferSpan& dst, std::span<const int32_t> ids,
                uint32_t V);

}  // namespace model::gpu
