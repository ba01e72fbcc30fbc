#include "model/ops/gpu/interleave.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "model/ops/types.h"  // push:: constants (shaders/matmul.h)
#include "vk/check.h"

namespace model::gpu {

using vk::ceil_div;

uint64_t interleaved_bytes(DType dtype, uint32_t K, uint32_t N) {
  return ceil_div(N, push::MATMUL_BLOCK_ROWS) * push::MATMUL_BLOCK_ROWS * K * dtype_bytes(dtype);
}

namespace {

// interleave() for elements of type E (uint16_t or uint32_t bits). Both loops write the output
// in order; [K, N] sources are read a row of k at a time, across the block's n.
template <class E>
void interleave_as(E* out, const E* in, WeightLayout from, size_t K, size_t N) {
  constexpr size_t e = 16 / sizeof(E), B = push::MATMUL_BLOCK_ROWS;
  const size_t kts = K / e;
  for (size_t n0 = 0; n0 < N; n0 += B) {
    const size_t rows = std::min(B, N - n0);
    for (size_t kt = 0; kt < kts; kt++, out += B * e)
      for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < e; i++)
          out[r * e + i] = from == WeightLayout::NK ? in[(n0 + r) * K + kt * e + i]
                                                    : in[(kt * e + i) * N + n0 + r];
  }
}

}  // namespace

void interleave(void* dst, const void* src, WeightLayout from, DType dtype, uint32_t K,
                uint32_t N) {
  const size_t size = dtype_bytes(dtype);
  if (K % (16 / size) != 0 || from == WeightLayout::Interleaved)
    fail("matmul", "interleave: K = " + std::to_string(K) + " is not in whole texels");
  std::memset(dst, 0, interleaved_bytes(dtype, K, N));  // the last block's padding rows
  if (size == 2)
    interleave_as(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), from, K, N);
  else
    interleave_as(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), from, K, N);
}

void interleave(const Ops& ops, vk::Recorder& rec, const InterleaveArgs& a) {
  const vk::BufferSpan &dst = a.dst, &src = a.src;
  const WeightLayout from = a.from;
  const uint32_t K = a.K, N = a.N;
  const char* op = "interleave";
  if (from == WeightLayout::Interleaved) fail(op, "the source must be [K, N] or [N, K]");
  if (K % 4 != 0) fail(op, "K = " + std::to_string(K) + " is not in whole texels of 4 floats");
  const uint64_t out_bytes = interleaved_bytes(DType::F32, K, N), in_bytes = uint64_t{K} * N * 4;
  require_elements(op, "dst", dst, out_bytes / 4);
  require_elements(op, "src", src, in_bytes / 4);
  if (N == 0 || K == 0) return;
  const vk::DeviceCaps& caps = ops.device().caps();
  if (std::max(out_bytes, in_bytes) > caps.max_storage_buffer_range)
    fail(op, "W of " + std::to_string(out_bytes) + " bytes exceeds maxStorageBufferRange");
  const vk::Pipeline& p = ops.get(vk::Shader::interleave, {{default_workgroup(caps), 1, 1}, {}});
  const uint32_t layout = from == WeightLayout::NK ? push::MATMUL_NK : push::MATMUL_KN;
  rec.dispatch(p, {dst.sub(0, out_bytes), src.sub(0, in_bytes)}, push::InterleavePush{K, N, layout},
               vk::groups_for(ops.device(), p, out_bytes / 16));
}

namespace {

// transpose_kn() for elements of type E: 32 x 32 blocks, so both sides stay in cache.
template <class E>
void transpose_as(E* out, const E* in, size_t K, size_t N) {
  constexpr size_t B = 32;
  for (size_t k0 = 0; k0 < K; k0 += B)
    for (size_t n0 = 0; n0 < N; n0 += B)
      for (size_t n = n0; n < std::min(N, n0 + B); n++)
        for (size_t k = k0; k < std::min(K, k0 + B); k++) out[n * K + k] = in[k * N + n];
}

}  // namespace

void transpose_kn(void* dst, const void* src, DType dtype, uint32_t K, uint32_t N) {
  if (dtype_bytes(dtype) == 2)
    transpose_as(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), K, N);
  else
    transpose_as(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), K, N);
}

}  // namespace model::gpu
