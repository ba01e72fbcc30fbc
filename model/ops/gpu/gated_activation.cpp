#include "model/ops/gpu/gated_activation.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "shaders/gated_activation.h"
#include "vk/check.h"

namespace model::gpu {

void gated_activation(const Ops& ops, vk::Recorder& rec, const GatedActivationArgs& a) {
  const char* op = "gated_activation";
  const auto kind_id = static_cast<uint32_t>(a.act);
  if (kind_id > push::ACT_SILU) fail(op, "unknown activation " + std::to_string(kind_id));
  const uint64_t out_count = uint64_t{a.T} * a.F, in_count = 2 * out_count;
  require_elements(op, "out", a.out, out_count);
  require_elements(op, "in", a.in, in_count);
  const uint64_t out_bytes = out_count * sizeof(float), in_bytes = in_count * sizeof(float);
  if (a.out.buffer == a.in.buffer && a.out.offset < a.in.offset + in_bytes &&
      a.in.offset < a.out.offset + out_bytes)
    fail(op, "out overlaps in");
  if (out_count == 0) return;
  const vk::DeviceCaps& caps = ops.caps();
  const uint32_t wg = default_workgroup(caps);

  if (a.F % 4 == 0 && texel_elementwise(ops, in_count, {&a.in}, {&a.out})) {
    // The texel kernel: four outputs per invocation, in one dispatch.
    const vk::Pipeline& p = ops.get(vk::Shader::gated_activation_texel, {{wg, 1, 1}, {kind_id}});
    rec.dispatch(p, {a.out.sub(0, out_bytes), a.in.sub(0, in_bytes)},
                 push::GatedActivationPush{a.T, a.F}, vk::groups_for(ops.device(), p, out_count / 4));
    return;
  }
  // Blocks of whole rows within one binding, each block's bindings starting aligned: a block is a
  // multiple of `step` rows, whose out rows (F floats; in's are twice that) fill whole alignments.
  const uint64_t out_row = uint64_t{a.F} * sizeof(float), in_row = 2 * out_row;
  const uint64_t align = binding_alignment(caps);
  const uint64_t step = align / std::gcd(align, out_row);
  const uint64_t rows = std::min<uint64_t>(caps.max_storage_buffer_range / in_row / step * step, a.T);
  if (rows == 0)
    fail(op, std::to_string(step) + " rows of in [T, 2F] with F = " + std::to_string(a.F) +
                 " are over this device's maxStorageBufferRange " +
                 std::to_string(caps.max_storage_buffer_range));
  const vk::Pipeline& p = ops.get(vk::Shader::gated_activation, {{wg, 1, 1}, {kind_id}});
  for (uint64_t t0 = 0; t0 < a.T; t0 += rows) {
    const auto m = static_cast<uint32_t>(std::min<uint64_t>(rows, a.T - t0));
    rec.dispatch(p, {a.out.sub(t0 * out_row, m * out_row), a.in.sub(t0 * in_row, m * in_row)},
                 push::GatedActivationPush{m, a.F},
                 vk::groups_for(ops.device(), p, uint64_t{m} * a.F));
  }
}

}  // namespace model::gpu
