#include "model/ops/gpu/attention_backward.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/ops/gpu/choose.h"
#include "shaders/attention_backward.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

std::string str(uint64_t v) { return std::to_string(v); }

}  // namespace

uint64_t attention_backward_stats_bytes(uint32_t B, uint32_t T, uint32_t H) {
  return uint64_t{B} * H * T * 4 * sizeof(float);
}

namespace {

// What attention_sequences and attention_backward check alike; returns the push constants.
push::AttentionBackwardPush sequences_push(const char* op, const vk::DeviceCaps& caps,
                                           uint32_t B, uint32_t T, uint32_t C, uint32_t H,
                                           const AttentionSpec& spec) {
  if (spec.bias_span != 0) fail(op, "relative position bias has no training kernels yet");
  if (H == 0 || C == 0 || C % H != 0)
    fail(op, "C=" + str(C) + " is not a positive multiple of H=" + str(H) + " heads");
  const uint32_t D = C / H;
  if (D > push::ATTENTION_BACKWARD_MAX_D)
    fail(op, "head dim D=" + str(D) + " exceeds " + str(push::ATTENTION_BACKWARD_MAX_D));
  const uint64_t qkv_bytes = uint64_t{B} * T * 3 * C * sizeof(float);
  if (qkv_bytes > caps.max_storage_buffer_range)
    fail(op, "qkv's " + str(qkv_bytes) + " bytes exceed what one binding may hold");
  const float scale = spec.scale != 0 ? spec.scale : 1.0f / std::sqrt(static_cast<float>(D));
  return {B, T, C, H, spec.causal ? 1u : 0u, scale};
}

// Whether training's attention runs its texel kernels: the policy asks for texel attention, the
// device has storage texel buffers, the head dim is in whole texels, every span read as texels
// starts on the texel alignment, every span written as vec4s on 16 bytes, and qkv's texels fit
// in one texel buffer.
bool sequences_texel(const Ops& ops, uint32_t B, uint32_t T, uint32_t C, uint32_t H,
                     std::initializer_list<const vk::BufferSpan*> texel_spans,
                     std::initializer_list<const vk::BufferSpan*> vec4_spans) {
  const vk::DeviceCaps& caps = ops.caps();
  return attention_sequences_texel(ops.policy()) && caps.storage_texel_buffers && (C / H) % 4 == 0 &&
         texel_aligned(caps, texel_spans, vec4_spans) &&
         uint64_t{B} * T * 3 * C / 4 <= caps.max_texel_buffer_elements;
}

}  // namespace

void attention_sequences(const Ops& ops, vk::Recorder& rec, const AttentionSequencesArgs& a) {
  const vk::BufferSpan &out = a.out, &qkv = a.qkv;
  const uint32_t B = a.B, T = a.T, C = a.C, H = a.H;
  const AttentionSpec& spec = a.spec;
  const char* op = "attention_sequences";
  const push::AttentionBackwardPush push =
      sequences_push(op, ops.device().caps(), B, T, C, H, spec);
  const uint64_t rows = uint64_t{B} * T;
  require_elements(op, "out", out, rows * C);
  require_elements(op, "qkv", qkv, rows * 3 * C);
  if (rows == 0) return;
  const bool texel = sequences_texel(ops, B, T, C, H, {&qkv}, {&out});
  const vk::Pipeline& p =
      ops.get(texel ? vk::Shader::attention_sequences_texel : vk::Shader::attention_sequences,
              {{default_workgroup(ops.device().caps()), 1, 1}, {C / H}});
  rec.dispatch(p, {out.sub(0, rows * C * 4), qkv.sub(0, rows * 3 * C * 4)}, push,
               vk::groups_for(ops.device(), p, rows * H));
}

void attention_backward(const Ops& ops, vk::Recorder& rec, const AttentionBackwardArgs& a) {
  const vk::BufferSpan &dqkv = a.dqkv, &stats = a.stats, &dout = a.dout, &qkv = a.qkv;
  const uint32_t B = a.B, T = a.T, C = a.C, H = a.H;
  const AttentionSpec& spec = a.spec;
  const char* op = "attention_backward";
  const vk::DeviceCaps& caps = ops.device().caps();
  const push::AttentionBackwardPush push = sequences_push(op, caps, B, T, C, H, spec);
  const uint64_t rows = uint64_t{B} * T, qkv_bytes = rows * 3 * C * sizeof(float);
  require_elements(op, "dqkv", dqkv, rows * 3 * C);
  require_elements(op, "dout", dout, rows * C);
  require_elements(op, "qkv", qkv, rows * 3 * C);
  const uint64_t stats_bytes = attention_backward_stats_bytes(B, T, H);
  require_elements(op, "stats", stats, stats_bytes / sizeof(float));
  if (rows == 0) return;
  const std::vector<vk::BufferSpan> bindings{dqkv.sub(0, qkv_bytes), stats.sub(0, stats_bytes),
                                             dout.sub(0, rows * C * sizeof(float)),
                                             qkv.sub(0, qkv_bytes)};
  const uint32_t wg = default_workgroup(caps);
  // The texel kernel where the policy asks for texel attention and the shape and device allow.
  const bool texel = sequences_texel(ops, B, T, C, H, {&qkv, &dout, &stats}, {&dqkv, &stats});
  for (bool keys : {false, true}) {
    if (texel) {
      const vk::Pipeline& p =
          ops.get(vk::Shader::attention_backward_texel, {{wg, 1, 1}, {C / H, keys ? 1u : 0u}});
      rec.dispatch(p, {bindings[0], bindings[1], bindings[2], bindings[3], bindings[1]}, push,
                   vk::groups_for(ops.device(), p, rows * H));
      continue;
    }
    const vk::Pipeline& p =
        ops.get(vk::Shader::attention_backward, {{wg, 1, 1}, {C / H, keys ? 1u : 0u}});
    rec.dispatch(p, bindings, push, vk::groups_for(ops.device(), p, rows * H));
  }
}

}  // namespace model::gpu
