#include "model/ops/gpu/cross_entropy.h"

#include <algorithm>
#include <string>

#include "shaders/cross_entropy.h"
#include "vk/check.h"

namespace model::gpu {

void cross_entropy(const Ops& ops, vk::Recorder& rec, const CrossEntropyArgs& a) {
  const vk::BufferSpan &losses = a.losses, &logits = a.logits, &targets = a.targets;
  const uint32_t N = a.N, V = a.V, mean_over = a.mean_over;
  if (V == 0 || mean_over == 0)
    fail("cross_entropy", "V=" + std::to_string(V) + " and mean_over=" +
                              std::to_string(mean_over) + " must be positive");
  require_elements("cross_entropy", "logits", logits, uint64_t{N} * V);
  require_elements("cross_entropy", "targets", targets, N);
  require_elements("cross_entropy", "losses", losses, N);
  if (N == 0) return;
  const vk::DeviceCaps& caps = ops.device().caps();
  const float scale = 1.0f / static_cast<float>(mean_over);
  if (V % 4 == 0 && texel_elementwise(ops, uint64_t{N} * V, {&logits}, {&logits})) {
    // The texel kernel: an invocation per row, all rows in one dispatch (no windows).
    const vk::Pipeline& p =
        ops.get(vk::Shader::cross_entropy_texel, {{default_workgroup(caps), 1, 1}, {}});
    const vk::BufferSpan l = logits.sub(0, uint64_t{N} * V * sizeof(float));
    rec.dispatch(p, {l, targets.sub(0, uint64_t{N} * 4), losses.sub(0, uint64_t{N} * 4), l},
                 push::CrossEntropyPush{N, V, scale, 0, 0, 0}, vk::groups_for(ops.device(), p, N));
    return;
  }
  const uint64_t align = binding_alignment(caps);
  // Rows per dispatch: as many as one binding holds, less the window's alignment slack.
  const uint64_t row_bytes = uint64_t{V} * sizeof(float);
  if (row_bytes + align > caps.max_storage_buffer_range)
    fail("cross_entropy", "a row of V=" + std::to_string(V) +
                              " logits exceeds what one binding may hold");
  const auto rows = static_cast<uint32_t>(
      std::min<uint64_t>(N, (caps.max_storage_buffer_range - align) / row_bytes));
  const uint32_t wg = std::min(default_workgroup(caps), push::CROSS_ENTROPY_MAX_WORKGROUP);
  require_shared_memory(caps, "cross_entropy", push::CROSS_ENTROPY_MAX_WORKGROUP * 4);
  const vk::Pipeline& p = ops.get(vk::Shader::cross_entropy, {{wg, 1, 1}, {}});
  for (uint32_t r0 = 0; r0 < N; r0 += rows) {
    const uint32_t n = std::min(rows, N - r0);
    const Window l = window(logits, uint64_t{r0} * V, uint64_t{n} * V, sizeof(float), align);
    const Window t = window(targets, r0, n, sizeof(int32_t), align);
    const Window out = window(losses, r0, n, sizeof(float), align);
    rec.dispatch(p, {l.span, t.span, out.span},
                 push::CrossEntropyPush{n, V, scale, l.skip, t.skip, out.skip},
                 vk::fold_groups(ops.device(), n, "cross_entropy"));
  }
}

}  // namespace model::gpu
