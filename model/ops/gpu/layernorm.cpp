#include "model/ops/gpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/ops/gpu/choose.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

std::string str(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string layernorm_texel_unsupported(const vk::DeviceCaps& caps, const vk::BufferSpan& x,
                                        const vk::BufferSpan& gamma, const vk::BufferSpan& beta,
                                        uint32_t T, uint32_t C) {
  if (!caps.storage_texel_buffers) return "no rgba32f storage texel buffers";
  if (C % 4 != 0) return "C=" + str(C) + " is not a multiple of 4";
  const uint64_t align = texel_binding_alignment(caps);
  if (x.offset % align != 0 || gamma.offset % align != 0 || beta.offset % align != 0)
    return "x, gamma or beta is not aligned to minTexelBufferOffsetAlignment " + str(align);
  if (uint64_t{T} * C / 4 > caps.max_texel_buffer_elements)
    return "x spans " + str(uint64_t{T} * C / 4) + " texels, over maxTexelBufferElements " +
           str(caps.max_texel_buffer_elements);
  return {};
}

namespace {

bool use_texel(const Ops& ops, const vk::BufferSpan& x, const vk::BufferSpan& gamma,
               const vk::BufferSpan& beta, uint32_t T, uint32_t C, LayerNormKernel asked) {
  if (asked == LayerNormKernel::Portable) return false;
  const vk::DeviceCaps& caps = ops.caps();
  const std::string why_not = layernorm_texel_unsupported(caps, x, gamma, beta, T, C);
  if (asked == LayerNormKernel::Texel && !why_not.empty())
    fail("layernorm", "the texel kernel cannot run on device '" + caps.name + "': " + why_not);
  if (asked == LayerNormKernel::Texel) return true;
  return why_not.empty() && layernorm_order(ops.policy()).has(LayerNormKernel::Texel);
}

}  // namespace

void check_layernorm_args(const char* op, uint32_t C, float eps, LayerNormKind kind) {
  if (kind != LayerNormKind::Standard && kind != LayerNormKind::StdPlusEps &&
      kind != LayerNormKind::Rms)
    fail(op, "unknown kind");
  if (C == 0) fail(op, "C must be at least 1");
  if (kind == LayerNormKind::StdPlusEps && C < 2)
    fail(op, "StdPlusEps needs C >= 2 (the unbiased std divides by C - 1)");
  if (!(eps >= 0.0f) || !std::isfinite(eps)) fail(op, "eps must be finite and >= 0");
}

void check_layernorm_range(const char* op, const vk::DeviceCaps& caps, uint32_t T, uint32_t C) {
  const uint64_t bytes = uint64_t{T} * C * sizeof(float);
  if (bytes > caps.max_storage_buffer_range)
    fail(op, "[T, C] = [" + std::to_string(T) + ", " + std::to_string(C) + "] is " +
                 std::to_string(bytes) + " bytes, over this device's maxStorageBufferRange " +
                 std::to_string(caps.max_storage_buffer_range));
}

void layernorm(const Ops& ops, vk::Recorder& rec, const LayerNormArgs& a) {
  // Rms reads no beta: gamma fills its binding.
  const bool rms = a.kind == LayerNormKind::Rms;
  const vk::BufferSpan &out = a.out, &x = a.x, &gamma = a.gamma, &beta = rms ? a.gamma : a.beta;
  const uint32_t T = a.T, C = a.C;
  const float eps = a.eps;
  const LayerNormKind kind = a.kind;
  const LayerNormKernel kernel = a.kernel;
  check_layernorm_args("layernorm", C, eps, kind);
  const uint64_t count = uint64_t{T} * C, bytes = count * sizeof(float);
  require_elements("layernorm", "out", out, count);
  require_elements("layernorm", "x", x, count);
  require_elements("layernorm", "gamma", gamma, C);
  require_elements("layernorm", "beta", beta, C);
  if (T == 0) return;
  const vk::DeviceCaps& caps = ops.device().caps();
  check_layernorm_range("layernorm", caps, T, C);

  // Exact ranges, so the recorder's barriers see only what this dispatch touches.
  const uint64_t row_bytes = uint64_t{C} * sizeof(float);
  if (use_texel(ops, x, gamma, beta, T, C, kernel)) {
    // Eight rows per workgroup, llvmpipe's SIMD width: a prompt's rows spread over its threads.
    const uint32_t wg = std::min({8u, caps.max_workgroup_invocations, caps.max_workgroup_size[0]});
    const vk::Pipeline& p =
        ops.get(vk::Shader::layernorm_texel, {{wg, 1, 1}, {static_cast<uint32_t>(kind)}});
    rec.dispatch(
        p, {out.sub(0, bytes), x.sub(0, bytes), gamma.sub(0, row_bytes), beta.sub(0, row_bytes)},
        push::LayerNormPush{T, C, eps}, vk::groups_for(ops.device(), p, T));
    return;
  }
  // The shader's reduction array holds a vec2 for each of up to LAYERNORM_MAX_WORKGROUP.
  require_shared_memory(caps, "layernorm",
                        push::LAYERNORM_MAX_WORKGROUP * 2 * uint32_t{sizeof(float)});
  const uint32_t wg = std::min(row_workgroup(caps, C), push::LAYERNORM_MAX_WORKGROUP);
  const vk::Pipeline& p =
      ops.get(vk::Shader::layernorm, {{wg, 1, 1}, {static_cast<uint32_t>(kind)}});
  rec.dispatch(
      p, {out.sub(0, bytes), x.sub(0, bytes), gamma.sub(0, row_bytes), beta.sub(0, row_bytes)},
      push::LayerNormPush{T, C, eps}, vk::fold_groups(ops.device(), T, "layernorm"));
}

}  // namespace model::gpu
