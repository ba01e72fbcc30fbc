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
  const uint64_t align = binding_alignment(caps);
  // A chunk's binding may start up to align - 4 bytes before its first row (see gpu::window).
  const uint64_t row_bytes = uint64_t{N} * sizeof(float), slack = align - sizeof(float);
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
    // A row need not start aligned: each binding starts at or below row r0 and skips to it.
    const Window o = window(out, r0 * N, rows * N, sizeof(float), align),
                 i = window(x, r0 * N, rows * N, sizeof(float), align);
    rec.dispatch(p, {o.span, i.span},
                 push::SoftmaxPush{static_cast<uint32_t>(rows), N, inv_temperature, o.skip, i.skip},
                 vkr::fold_groups(k.device(), rows, "softmax"));
  }
}

}  // namespace gpu
