#include "model/ops/gpu/attention_backward.h"

#include <algorithm>
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
push::AttentionBackwardPush sequences_push(const char* op, const SequenceRows& r,
                                           const AttentionSpec& spec,
                                           const vk::BufferSpan* key_lens) {
  if (spec.bias_span != 0) fail(op, "relative position bias has no training kernels yet");
  if (r.H == 0 || r.C == 0 || r.C % r.H != 0)
    fail(op, "C=" + str(r.C) + " is not a positive multiple of H=" + str(r.H) + " heads");
  const uint32_t D = r.C / r.H;
  if (D > push::ATTENTION_BACKWARD_MAX_D)
    fail(op, "head dim D=" + str(D) + " exceeds " + str(push::ATTENTION_BACKWARD_MAX_D));
  if (spec.causal && r.S != r.T)
    fail(op,
         "causal attention needs as many keys as queries, got S=" + str(r.S) + ", T=" + str(r.T));
  if (r.S == 0 && r.T != 0) fail(op, "queries with no keys to attend to (S=0)");
  if (uint64_t{r.q_col} + r.C > r.q_stride || uint64_t{r.k_col} + r.C > r.kv_stride ||
      uint64_t{r.v_col} + r.C > r.kv_stride)
    fail(op, "q, k or v's C=" + str(r.C) + " columns run past their rows' strides");
  if (key_lens) {
    if (spec.causal)
      fail(op,
           "key lengths are for bidirectional and cross-attention: a causal query's keys "
           "are the ones before it");
    require_elements(op, "key_lens", *key_lens, r.B, sizeof(uint32_t));
  }
  const float scale = spec.scale != 0 ? spec.scale : 1.0f / std::sqrt(static_cast<float>(D));
  return {r.B,        r.T,         r.S,     r.C,     r.H,     spec.causal ? 1u : 0u, scale,
          r.q_stride, r.kv_stride, r.q_col, r.k_col, r.v_col, key_lens ? 1u : 0u};
}

// The KeyLens binding: the lengths, or (not read: key_lens 0) 4 bytes of q, bound anyway.
vk::BufferSpan key_lens_binding(const vk::BufferSpan* key_lens, uint32_t B,
                                const vk::BufferSpan& q) {
  return key_lens ? key_lens->sub(0, uint64_t{B} * sizeof(uint32_t)) : q.sub(0, 4);
}

// The bytes of q's and of k's (and v's) rows; throws unless the spans hold them and each fits
// one binding.
struct Extents {
  uint64_t q = 0, kv = 0, out = 0;  // out: dout's or out's [B, T, C]
};
Extents sequences_extents(const char* op, const vk::DeviceCaps& caps, const SequenceRows& r,
                          const vk::BufferSpan& q, const vk::BufferSpan& k,
                          const vk::BufferSpan& v) {
  const Extents e{uint64_t{r.B} * r.T * r.q_stride * sizeof(float),
                  uint64_t{r.B} * r.S * r.kv_stride * sizeof(float),
                  uint64_t{r.B} * r.T * r.C * sizeof(float)};
  require_elements(op, "q", q, e.q / sizeof(float));
  require_elements(op, "k", k, e.kv / sizeof(float));
  require_elements(op, "v", v, e.kv / sizeof(float));
  if (std::max(e.q, e.kv) > caps.max_storage_buffer_range)
    fail(op, "q's " + str(e.q) + " or k's and v's " + str(e.kv) +
                 " bytes exceed what one binding may hold");
  return e;
}

// Whether training's attention runs its texel kernels: the policy asks for texel attention, the
// device has storage texel buffers, the head dim, strides and columns are in whole texels, every
// span read as texels starts on the texel alignment, every span written as vec4s on 16 bytes, and
// q's and k's texels each fit in one texel buffer.
bool sequences_texel(const Ops& ops, const SequenceRows& r, const Extents& e,
                     std::initializer_list<const vk::BufferSpan*> texel_spans,
                     std::initializer_list<const vk::BufferSpan*> vec4_spans) {
  const vk::DeviceCaps& caps = ops.caps();
  const bool whole_texels = (r.C / r.H) % 4 == 0 && r.q_stride % 4 == 0 && r.kv_stride % 4 == 0 &&
                            r.q_col % 4 == 0 && r.k_col % 4 == 0 && r.v_col % 4 == 0;
  return attention_sequences_texel(ops.policy()) && caps.storage_texel_buffers && whole_texels &&
         texel_aligned(caps, texel_spans, vec4_spans) &&
         std::max(e.q, e.kv) / 16 <= caps.max_texel_buffer_elements;
}

}  // namespace

void attention_sequences(const Ops& ops, vk::Recorder& rec, const AttentionSequencesArgs& a) {
  const SequenceRows& r = a.rows;
  const char* op = "attention_sequences";
  const push::AttentionBackwardPush push = sequences_push(op, r, a.spec, a.key_lens);
  const Extents e = sequences_extents(op, ops.device().caps(), r, a.q, a.k, a.v);
  require_elements(op, "out", a.out, e.out / sizeof(float));
  const uint64_t queries = uint64_t{r.B} * r.T;
  if (queries == 0) return;
  const bool texel = sequences_texel(ops, r, e, {&a.q, &a.k, &a.v}, {&a.out});
  const vk::Pipeline& p =
      ops.get(texel ? vk::Shader::attention_sequences_texel : vk::Shader::attention_sequences,
              {{default_workgroup(ops.device().caps()), 1, 1}, {r.C / r.H}});
  rec.dispatch(p,
               {a.out.sub(0, e.out), a.q.sub(0, e.q), a.k.sub(0, e.kv), a.v.sub(0, e.kv),
                key_lens_binding(a.key_lens, r.B, a.q)},
               push, vk::groups_for(ops.device(), p, queries * r.H));
}

void attention_backward(const Ops& ops, vk::Recorder& rec, const AttentionBackwardArgs& a) {
  const SequenceRows& r = a.rows;
  const char* op = "attention_backward";
  const vk::DeviceCaps& caps = ops.device().caps();
  const push::AttentionBackwardPush push = sequences_push(op, r, a.spec, a.key_lens);
  const Extents e = sequences_extents(op, caps, r, a.q, a.k, a.v);
  require_elements(op, "dq", a.dq, e.q / sizeof(float));
  require_elements(op, "dk", a.dk, e.kv / sizeof(float));
  require_elements(op, "dv", a.dv, e.kv / sizeof(float));
  require_elements(op, "dout", a.dout, e.out / sizeof(float));
  const uint64_t stats_bytes = attention_backward_stats_bytes(r.B, r.T, r.H);
  require_elements(op, "stats", a.stats, stats_bytes / sizeof(float));
  if (uint64_t{r.B} * r.T == 0) return;
  const vk::BufferSpan dq = a.dq.sub(0, e.q), dk = a.dk.sub(0, e.kv), dv = a.dv.sub(0, e.kv),
                       stats = a.stats.sub(0, stats_bytes), dout = a.dout.sub(0, e.out),
                       q = a.q.sub(0, e.q), k = a.k.sub(0, e.kv), v = a.v.sub(0, e.kv),
                       lens = key_lens_binding(a.key_lens, r.B, a.q);
  const uint32_t wg = default_workgroup(caps);
  // The texel kernel where the policy asks for texel attention and the shape and device allow.
  const bool texel = sequences_texel(ops, r, e, {&a.q, &a.k, &a.v, &a.dout, &a.stats},
                                     {&a.dq, &a.dk, &a.dv, &a.stats});
  for (bool keys : {false, true}) {
    // The query pass runs an invocation per query, the key pass one per key.
    const uint64_t rows = uint64_t{r.B} * (keys ? r.S : r.T) * r.H;
    const vk::Pipeline& p =
        ops.get(texel ? vk::Shader::attention_backward_texel : vk::Shader::attention_backward,
                {{wg, 1, 1}, {r.C / r.H, keys ? 1u : 0u}});
    if (texel) {
      rec.dispatch(p, {dq, dk, dv, stats, dout, q, k, v, stats, lens}, push,
                   vk::groups_for(ops.device(), p, rows));
    } else {
      rec.dispatch(p, {dq, dk, dv, stats, dout, q, k, v, lens}, push,
                   vk::groups_for(ops.device(), p, rows));
    }
  }
}

}  // namespace model::gpu
