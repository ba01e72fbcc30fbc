#include "model/gpu/layernorm.h"

#include <cmath>

#include "vk/check.h"

namespace gpu {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw vkr::Error("layernorm: " + what);
}

}  // namespace

void layernorm(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
               const vkr::BufferSpan& x, const vkr::BufferSpan& gamma, const vkr::BufferSpan& beta,
               uint32_t T, uint32_t C, float eps, LayerNormKind kind) {
  if (kind != LayerNormKind::Standard && kind != LayerNormKind::StdPlusEps) fail("unknown kind");
  if (C == 0) fail("C must be at least 1");
  if (kind == LayerNormKind::StdPlusEps && C < 2)
    fail("StdPlusEps needs C >= 2 (the unbiased std divides by C - 1)");
  if (!(eps >= 0.0f) || !std::isfinite(eps)) fail("eps must be finite and >= 0");
  const uint64_t count = uint64_t{T} * C, bytes = count * sizeof(float);
  require_elements("layernorm", "out", out, count);
  require_elements("layernorm", "x", x, count);
  require_elements("layernorm", "gamma", gamma, C);
  require_elements("layernorm", "beta", beta, C);
  if (T == 0) return;
  const vkr::DeviceCaps& caps = k.device().caps();
  if (bytes > caps.max_storage_buffer_range)
    fail("[T, C] = [" + std::to_string(T) + ", " + std::to_string(C) + "] is " +
         std::to_string(bytes) + " bytes, over this device's maxStorageBufferRange " +
         std::to_string(caps.max_storage_buffer_range));

  const uint32_t wg = row_workgroup(caps, C, 2 * sizeof(float));  // a vec2 of shared memory each
  const vkr::Pipeline& p = k.get("layernorm", {{wg, 1, 1}, {static_cast<uint32_t>(kind)}});
  // Exact ranges, so the recorder's barriers see only what this dispatch touches.
  const uint64_t row_bytes = uint64_t{C} * sizeof(float);
  rec.dispatch(
      p, {out.sub(0, bytes), x.sub(0, bytes), gamma.sub(0, row_bytes), beta.sub(0, row_bytes)},
      push::LayerNormPush{T, C, eps}, vkr::fold_groups(k.device(), T, "layernorm"));
}

}  // namespace gpu
