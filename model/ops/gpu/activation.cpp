#include "model/ops/gpu/activation.h"

#include <algorithm>

#include "shaders/activation.h"
#include "vk/check.h"

namespace model::gpu {

void activation(vk::Kernels& k, vk::Recorder& rec, const vk::BufferSpan& out,
                const vk::BufferSpan& x, uint32_t n, Activation kind) {
  const auto kind_id = static_cast<uint32_t>(kind);
  if (kind_id > push::ACT_RELU)
    throw vk::Error("activation: unknown kind " + std::to_string(kind_id));
  require_elements("activation", "out", out, n);
  require_elements("activation", "x", x, n);
  if (n == 0) return;

  // Chunks of whole aligned blocks, so every chunk's binding starts aligned too.
  const vk::DeviceCaps& caps = k.device().caps();
  const uint64_t block = binding_alignment(caps);
  const uint64_t chunk = caps.max_storage_buffer_range / block * block / sizeof(float);
  const vk::Pipeline& p = k.get("activation", {{default_workgroup(caps), 1, 1}, {kind_id}});
  for (uint64_t i = 0; i < n; i += chunk) {
    const uint64_t m = std::min<uint64_t>(chunk, n - i), off = i * sizeof(float),
                   bytes = m * sizeof(float);
    rec.dispatch(p, {out.sub(off, bytes), x.sub(off, bytes)},
                 push::ActivationPush{static_cast<uint32_t>(m)}, vk::groups_for(k.device(), p, m));
  }
}

}  // namespace model::gpu
