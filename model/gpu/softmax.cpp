#include "model/gpu/softmax.h"

#include <algorithm>
#include <cmath>

#include "shaders/softmax.h"
#include "vk/check.h"

namespace gpu {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw vkr::Error("softmax: " + what);
}

// Rows [r0, r0 + rows) of a row-major [R, N] float tensor as a binding. Bindings must start at
// a multiple of minStorageBufferOffsetAlignment and rows of odd N do not, so the binding starts
// at the aligned offset at or below row r0 and `first` is row r0's element index within it.
struct RowWindow {
  vkr::BufferSpan span;
  uint32_t first;
};

RowWindow row_window(const vkr::BufferSpan& s, uint64_t r0, uint64_t rows, uint64_t N,
                     uint64_t align) {
  const uint64_t begin = r0 * N * sizeof(float), lo = begin - begin % align;
  return {s.sub(lo, begin + rows * N * sizeof(float) - lo),
          static_cast<uint32_t>((begin - lo) / sizeof(float))};
}

}  // namespace

void softmax(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
             const vkr::BufferSpan& x, uint32_t R, uint32_t N, float inv_temperature) {
  if (N == 0) fail("N must be at least 1");
  // A positive factor keeps max(x * t) = max(x) * t, which the shader's stable form relies on.
  if (!(inv_temperature > 0.0f) || !std::isfinite(inv_temperature))
    fail("inv_temperature must be positive and finite, got " + std::to_string(inv_temperature));
  require_elements("softmax", "out", out, uint64_t{R} * N);
  require_elements("softmax", "x", x, uint64_t{R} * N);
  if (R == 0) return;

  const vkr::DeviceCaps& caps = k.device().caps();
  const uint64_t align = std::max<uint64_t>(caps.storage_buffer_alignment, 1);
  const uint64_t row_bytes = uint64_t{N} * sizeof(float),
                 slack = align - std::min<uint64_t>(align, 4);
  if (row_bytes + slack > caps.max_storage_buffer_range)
    fail("a row of " + std::to_string(N) +
         " floats does not fit this device's maxStorageBufferRange " +
         std::to_string(caps.max_storage_buffer_range));
  const uint64_t per_chunk =
      std::min<uint64_t>(R, (caps.max_storage_buffer_range - slack) / row_bytes);

  // Narrow rows (attention scores at small T) get a smaller workgroup. Each invocation holds
  // one float of shared memory.
  const uint32_t wg = row_workgroup(caps, N, sizeof(float));
  const vkr::Pipeline& p = k.get("softmax", {{wg, 1, 1}, {}});
  for (uint64_t r0 = 0; r0 < R; r0 += per_chunk) {
    const uint64_t rows = std::min<uint64_t>(per_chunk, R - r0);
    const RowWindow o = row_window(out, r0, rows, N, align), i = row_window(x, r0, rows, N, align);
    rec.dispatch(
        p, {o.span, i.span},
        push::SoftmaxPush{static_cast<uint32_t>(rows), N, inv_temperature, o.first, i.first},
        vkr::groups_for(k.device(), p, rows * wg));
  }
}

}  // namespace gpu
