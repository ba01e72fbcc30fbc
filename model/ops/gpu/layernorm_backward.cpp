#include "model/ops/gpu/layernorm_backward.h"

#include <algorithm>
#include <vector>

#include "model/ops/gpu/choose.h"
#include "vk/check.h"

namespace model::gpu {

void layernorm_backward(const Ops& ops, vk::Recorder& rec, const LayerNormBackwardArgs& a) {
  // Rms has no beta: dgamma fills dbeta's binding, which its shaders then do not write.
  const bool rms = a.kind == LayerNormKind::Rms;
  const vk::BufferSpan &dx = a.dx, &dgamma = a.dgamma, &dbeta = rms ? a.dgamma : a.dbeta,
                       &stats = a.stats;
  const vk::BufferSpan &dout = a.dout, &x = a.x, &gamma = a.gamma;
  const uint32_t T = a.T, C = a.C;
  const float eps = a.eps;
  const LayerNormKind kind = a.kind;
  const char* op = "layernorm_backward";
  check_layernorm_args(op, C, eps, kind);
  const uint64_t count = uint64_t{T} * C, bytes = count * sizeof(float);
  require_elements(op, "dx", dx, count);
  require_elements(op, "dgamma", dgamma, C);
  require_elements(op, "dbeta", dbeta, C);
  require_elements(op, "stats", stats, uint64_t{T} * 4);
  require_elements(op, "dout", dout, count);
  require_elements(op, "x", x, count);
  require_elements(op, "gamma", gamma, C);
  if (T == 0) return;
  const vk::DeviceCaps& caps = ops.device().caps();
  check_layernorm_range(op, caps, T, C);
  require_shared_memory(caps, op, push::LAYERNORM_MAX_WORKGROUP * 2 * uint32_t{sizeof(float)});
  const uint64_t row_bytes = uint64_t{C} * sizeof(float);
  const std::vector<vk::BufferSpan> bindings{dx.sub(0, bytes),      dgamma.sub(0, row_bytes),
                                             dbeta.sub(0, row_bytes), stats.sub(0, uint64_t{T} * 16),
                                             dout.sub(0, bytes),    x.sub(0, bytes),
                                             gamma.sub(0, row_bytes)};
  const auto kind_id = static_cast<uint32_t>(kind);
  // The texel kernel where choose.h prefers it and the call allows it: dout, x, gamma and stats
  // read as texels.
  if (layernorm_order(ops.policy()).has(LayerNormKernel::Texel) &&
      layernorm_texel_unsupported(caps, x, gamma, dout, T, C).empty() &&
      texel_aligned(caps, {&stats}, {&dx, &dgamma, &dbeta, &stats})) {
    const vk::Shader texel = vk::Shader::layernorm_backward_texel;
    std::vector<vk::BufferSpan> with_stats = bindings;
    with_stats.push_back(bindings[3]);  // stats again, read as texels by the second pass
    const uint32_t wg = std::min({8u, caps.max_workgroup_invocations, caps.max_workgroup_size[0]});
    const vk::Pipeline& rows = ops.get(texel, {{wg, 1, 1}, {kind_id, 0u}});
    rec.dispatch(rows, with_stats, push::LayerNormPush{T, C, eps},
                 vk::groups_for(ops.device(), rows, T));
    const vk::Pipeline& params = ops.get(texel, {{wg, 1, 1}, {kind_id, 1u}});
    rec.dispatch(params, with_stats, push::LayerNormPush{T, C, eps},
                 vk::groups_for(ops.device(), params, C / 4));
    return;
  }
  const uint32_t wg = std::min(row_workgroup(caps, C), push::LAYERNORM_MAX_WORKGROUP);
  rec.dispatch(ops.get(vk::Shader::layernorm_backward, {{wg, 1, 1}, {kind_id, 0u}}), bindings,
               push::LayerNormPush{T, C, eps}, vk::fold_groups(ops.device(), T, op));
  const vk::Pipeline& params =
      ops.get(vk::Shader::layernorm_backward, {{default_workgroup(caps), 1, 1}, {kind_id, 1u}});
  rec.dispatch(params, bindings, push::LayerNormPush{T, C, eps},
               vk::groups_for(ops.device(), params, C));
}

}  // namespace model::gpu
