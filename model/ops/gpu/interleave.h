// The weight layouts matmul reads, and the repacking between them: the Interleaved layout of
// matmul_interleaved.glsl (the CPU set's), made on the host at upload or on the device
// (shaders/interleave.comp) as training's weights change, and the [K, N] -> [N, K] transpose
// the GPU set's weights get at upload.
#pragma once
#include <cstdint>

#include "model/ops/gpu/common.h"

namespace model::gpu {

// Bytes of W [N, K] in the Interleaved layout: N rounded up to whole blocks of
// push::MATMUL_BLOCK_ROWS rows.
uint64_t interleaved_bytes(DType dtype, uint32_t K, uint32_t N);
// Repacks W, given as elements of dtype's size in `from` layout (KN or NK), into the Interleaved
// layout at dst (interleaved_bytes() of them; padding rows are zero). K % (16 / size) == 0.
void interleave(void* dst, const void* src, WeightLayout from, DType dtype, uint32_t K, uint32_t N);
// The same repacking on the device (shaders/interleave.comp), for fp32 W [N, K] given as `src` in
// `from` layout (KN or NK) into dst (interleaved_bytes(F32, K, N)): training's weights change every
// step. Needs K % 4 == 0; src and dst within maxStorageBufferRange.
struct InterleaveArgs {
  vk::BufferSpan dst;  // interleaved_bytes(F32, K, N)
  vk::BufferSpan src;  // [K, N] or [N, K] fp32, as `from` says
  uint32_t K = 0, N = 0;
  WeightLayout from = WeightLayout::KN;
};
void interleave(const Ops& ops, vk::Recorder& rec, const InterleaveArgs& a);
// Transposes W [K, N] into [N, K] (elements of dtype's size) at dst, in cache-sized blocks.
void transpose_kn(void* dst, const void* src, DType dtype, uint32_t K, uint32_t N);

}  // namespace model::gpu
