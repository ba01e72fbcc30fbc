#include "model/ops/gpu/activation.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "shaders/activation.h"
#include "vk/check.h"

namespace model::gpu {

namespace {

// activation() and activation_backward(): one dispatch per chunk of whole aligned blocks, so
// every chunk's bindings start aligned too. The first span is written, the others read.
using Named = std::pair<const char*, const vk::BufferSpan*>;
// `op` names the op in errors; `shader` and `texel_shader` are its kernels.
void elementwise(const Ops& k, vk::Recorder& rec, const char* op, vk::Shader shader,
                 vk::Shader texel_shader, std::initializer_list<Named> spans, uint32_t n,
                 Activation kind) {
  const auto kind_id = static_cast<uint32_t>(kind);
  if (kind_id > push::ACT_SILU)
    throw vk::Error(std::string(op) + ": unknown kind " + std::to_string(kind_id));
  for (const auto& [name, span] : spans) require_elements(op, name, *span, n);
  if (n == 0) return;
  const vk::DeviceCaps& caps = k.device().caps();
  bool texel = texel_elementwise(k, n, {}, {spans.begin()->second});
  for (auto it = spans.begin() + 1; it != spans.end(); ++it)
    texel = texel && texel_elementwise(k, n, {it->second}, {});
  if (texel) {
    // The texel kernel: four elements per invocation, in one dispatch.
    const vk::Pipeline& p = k.get(texel_shader, {{default_workgroup(caps), 1, 1}, {kind_id}});
    std::vector<vk::BufferSpan> bindings;
    for (const auto& named : spans) bindings.push_back(named.second->sub(0, uint64_t{n} * sizeof(float)));
    rec.dispatch(p, bindings, push::ActivationPush{n}, vk::groups_for(k.device(), p, n / 4));
    return;
  }
  const uint64_t block = binding_alignment(caps);
  const uint64_t chunk = caps.max_storage_buffer_range / block * block / sizeof(float);
  const vk::Pipeline& p = k.get(shader, {{default_workgroup(caps), 1, 1}, {kind_id}});
  for (uint64_t i = 0; i < n; i += chunk) {
    const uint64_t m = std::min<uint64_t>(chunk, n - i), off = i * sizeof(float),
                   bytes = m * sizeof(float);
    std::vector<vk::BufferSpan> bindings;
    for (const auto& named : spans) bindings.push_back(named.second->sub(off, bytes));
    rec.dispatch(p, bindings, push::ActivationPush{static_cast<uint32_t>(m)},
                 vk::groups_for(k.device(), p, m));
  }
}

}  // namespace

void activation(const Ops& ops, vk::Recorder& rec, const ActivationArgs& a) {
  elementwise(ops, rec, "activation", vk::Shader::activation, vk::Shader::activation_texel,
              {{"out", &a.out}, {"x", &a.x}}, a.n, a.kind);
}

void activation_backward(const Ops& ops, vk::Recorder& rec, const ActivationBackwardArgs& a) {
  elementwise(ops, rec, "activation_backward", vk::Shader::activation_backward,
              vk::Shader::activation_backward_texel,
              {{"dx", &a.dx}, {"dout", &a.dout}, {"x", &a.x}}, a.n, a.kind);
}

}  // namespace model::gpu
