// The ops each step of model/forward/graph.h records for the GPU model (gpu_model_impl.h):
// the gpu:: kernels on the model's buffers, into its one command buffer.
#include <algorithm>

#include "model/forward/gpu_model_impl.h"
#include "model/formats/relative_bias.h"
#include "model/ops/gpu/activation.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/choose.h"
#include "model/ops/gpu/embedding.h"
#include "model/ops/gpu/gated_activation.h"
#include "model/ops/gpu/layernorm.h"
#include "model/ops/gpu/matmul_argmax.h"
#include "model/ops/gpu/matmul.h"

namespace model {
namespace {

// A norm's beta, or an empty span for RMSNorm's none.
vk::BufferSpan beta(const GpuNorm& n) {
  return n.beta ? n.beta->span : vk::BufferSpan{};
}

}  // namespace

const vk::BufferSpan& GpuBackend::buf(Buf b) const {
  switch (b) {
    case Buf::X: return s.x;
    case Buf::H: return s.h;
    case Buf::QKV: return s.qkv;
    case Buf::ATT: return s.att;
    case Buf::FC: return s.fc;
    case Buf::GATE: return s.gate;
    case Buf::LOGITS: break;
  }
  return s.logits;
}

void GpuBackend::embed(Buf out, uint32_t T, uint32_t pos) {
  const gpu::Weight& wte = *w.wte;
  if (pass.batch) {  // row b at its slot's next position, read from the batch table
    gpu::embedding_batch(k, rec,
                         {.out = buf(out),
                          .ids = s.ids,
                          .rows = s.batch_rows,
                          .wte = wte,
                          .wpe = w.wpe,
                          .T = T,
                          .C = c.n_embd,
                          .V = c.n_vocab,
                          .n_pos = c.n_ctx,
                          .position = c.positions,
                          .wte_interleaved = wte.layout == WeightLayout::Interleaved,
                          .scale = c.embed_scale});
    return;
  }
  // An encoder's batch: positions restart at each sequence's first row.
  const Segments* seg = pass.segments;
  gpu::embedding(k, rec,
                 {.out = buf(out),
                  .ids = s.ids,
                  .wte = wte,
                  .wpe = w.wpe,
                  .T = T,
                  .C = c.n_embd,
                  .V = c.n_vocab,
                  .n_pos = c.n_ctx,
                  .pos_offset = pos,
                  .position = c.positions,
                  .wte_interleaved = wte.layout == WeightLayout::Interleaved,
                  .step = seg ? nullptr : &s.step,
                  .period = seg ? seg->period : 0,
                  .types = c.n_types ? &s.types : nullptr,
                  .wtt = w.wtt,
                  .n_types = c.n_types,
                  .scale = c.embed_scale});
}

void GpuBackend::layernorm(Buf out, Buf in, const GpuNorm& n, uint32_t T) {
  gpu::layernorm(k, rec,
                 {.out = buf(out),
                  .x = buf(in),
                  .gamma = n.gamma->span,
                  .beta = beta(n),
                  .T = T,
                  .C = c.n_embd,
                  .eps = c.layer_norm_epsilon,
                  .kind = c.layer_norm});
}

void GpuBackend::gated_activation(Buf out, Buf in, uint32_t T, Activation act) {
  gpu::gated_activation(k, rec, {.out = buf(out), .in = buf(in), .T = T, .F = c.n_inner, .act = act});
}

void GpuBackend::linear(Buf out, Buf in, const GpuLinear& l, uint32_t T, const Epilogue& e,
                        uint32_t in_row, gpu::MatmulKernel kernel,
                        const gpu::MatmulNorm* norm) {
  gpu::matmul(
      k, rec,
      {.out = buf(out),
       .x = buf(in),
       .w = *l.w,
       .bias = l.b ? &l.b->span : nullptr,
       .residual = e.residual ? &buf(*e.residual) : nullptr,
       .T = T,
       .K = l.K,
       .N = l.N,
       .options = {
           .layout = l.w->layout, .act = e.act, .kernel = kernel, .x_row = in_row, .norm = norm}});
}

// Fused where choose.h's norm_linear says so: the matmul normalises each row of x as it reads
// it, and H is never written. Otherwise the LayerNorm into H, then the matmul.
void GpuBackend::norm_linear(Buf out, Buf in, const GpuNorm& n, const GpuLinear& l, uint32_t T,
                             const Epilogue& e, uint32_t in_row) {
  const uint64_t w_bytes = uint64_t{l.K} * l.N * dtype_bytes(l.w->dtype);
  const bool wide_fits =
      gpu::matmul_wide_supported(l.w->dtype, l.w->layout, l.K, buf(in).offset, l.w->span.offset);
  const gpu::NormLinear fused =
      gpu::norm_linear(k.policy(), l.w->layout, w_bytes, T, in_row, wide_fits);
  if (fused != gpu::NormLinear::Apart) {
    const bool wide = fused == gpu::NormLinear::Wide;
    const gpu::MatmulNorm norm{n.gamma->span, beta(n), c.layer_norm, c.layer_norm_epsilon};
    linear(out, in, l, T, e, in_row,
           wide ? gpu::MatmulKernel::VectorWide : gpu::MatmulKernel::Auto, &norm);
    return;
  }
  layernorm(Buf::H, in, n, in_row + T);
  linear(out, Buf::H, l, T, e, in_row);
}

void GpuBackend::argmax_head(Buf in, const GpuLinear& l, uint32_t row) {
  gpu::matmul_argmax(
      k, rec, {.partials = s.partials, .x = buf(in), .w = *l.w, .K = l.K, .N = l.N, .x_row = row});
}

// The attention's width A (Config::attn_width()) is the ops' C: H heads of A / H.
void GpuBackend::attention_store(uint32_t layer, uint32_t T, uint32_t pos) {
  const uint32_t A = c.attn_width();
  gpu::AttentionOptions o;
  o.causal = c.causal;
  o.scale = c.attention_scale;
  if (w.rel_bias) {
    o.bias_span = relative_bias_span(c);
    o.bias = &w.rel_bias->span;
  }
  o.cache = s.kv_cache;
  if (s.split) o.scratch = &*s.split;
  if (s.split_counts) o.counts = &*s.split_counts;
  if (pass.batch && s.batch_attention) {  // every row at once, each as its decode step alone
    const uint32_t longest = *std::max_element(pass.batch->pos.begin(), pass.batch->pos.end()) + 1;
    gpu::attention_store_batch(k, rec,
                               {.out = buf(Buf::ATT),
                                .k_caches = s.k_cache[layer],
                                .v_caches = s.v_cache[layer],
                                .qkv = buf(Buf::QKV),
                                .rows = s.batch_rows,
                                .T = T,
                                .max_len = longest,
                                .C = A,
                                .H = c.n_head,
                                .options = o});
    return;
  }
  if (pass.batch) {  // each row alone, in its slot's cache: the same work as a decode step alone
    const uint64_t row = uint64_t{A} * 4;
    for (uint32_t b = 0; b < T; b++) {
      const uint32_t slot = pass.batch->rows[b].slot;
      gpu::attention_store(k, rec,
                           {.out = buf(Buf::ATT).sub(b * row, row),
                            .k_cache = s.k(layer, slot),
                            .v_cache = s.v(layer, slot),
                            .qkv = buf(Buf::QKV).sub(b * 3 * row, 3 * row),
                            .T = 1,
                            .pos = pass.batch->pos[b],
                            .C = A,
                            .H = c.n_head,
                            .options = o});
    }
    return;
  }
  o.step = &s.step;  // holds pos (GpuModel::run_pass); an encoder's batch: 0
  if (const Segments* seg = pass.segments) {  // each sequence over its own rows and keys
    const uint64_t row = uint64_t{A} * 4, cached = uint64_t{A} * dtype_bytes(s.kv_cache);
    for (size_t b = 0; b < seg->lens.size(); b++) {
      const uint64_t first = b * seg->period, n = seg->lens[b];
      gpu::attention_store(k, rec,
                           {.out = buf(Buf::ATT).sub(first * row, n * row),
                            .k_cache = s.k_cache[layer].sub(first * cached, n * cached),
                            .v_cache = s.v_cache[layer].sub(first * cached, n * cached),
                            .qkv = buf(Buf::QKV).sub(first * 3 * row, n * 3 * row),
                            .T = seg->lens[b],
                            .pos = 0,
                            .C = A,
                            .H = c.n_head,
                            .options = o});
    }
    return;
  }
  if (pass.attention_taps && layer < s.probs.size() && s.probs[layer].size > 0)
    o.probs = &s.probs[layer];
  gpu::attention_store(k, rec,
                       {.out = buf(Buf::ATT),
                        .k_cache = s.k(layer, pass.slot),
                        .v_cache = s.v(layer, pass.slot),
                        .qkv = buf(Buf::QKV),
                        .T = T,
                        .pos = pos,
                        .C = A,
                        .H = c.n_head,
                        .options = o});
}

void GpuBackend::source_store(uint32_t layer, const GpuLinear& kw, const GpuLinear& vw,
                              uint32_t S) {
  const vk::BufferSpan k_out = s.sk(layer, pass.source), v_out = s.sv(layer, pass.source);
  for (auto [out, l] : {std::pair{&k_out, &kw}, std::pair{&v_out, &vw}})
    gpu::matmul(k, rec,
                {.out = *out,
                 .x = buf(Buf::X),
                 .w = *l->w,
                 .bias = l->b ? &l->b->span : nullptr,
                 .T = S,
                 .K = l->K,
                 .N = l->N,
                 .options = {.layout = l->w->layout}});
}

// Every query sees every source row (no mask): T queries, [T, A] in QKV, over their source's
// keys, whatever their positions. A batch's rows go in runs of the same source (beams of one
// source: one run; slots with sources of their own: a run each), each run's rows independent
// queries of that source.
void GpuBackend::cross_attention(uint32_t layer, uint32_t T) {
  const uint32_t A = c.attn_width();
  gpu::AttentionOptions o;
  o.causal = false;
  o.scale = c.attention_scale;
  if (s.split) o.scratch = &*s.split;
  if (s.split_counts) o.counts = &*s.split_counts;
  const auto attend = [&](uint32_t first, uint32_t n, uint32_t source) {
    const uint64_t row = uint64_t{A} * 4;
    gpu::attention(k, rec,
                   {.out = buf(Buf::ATT).sub(first * row, n * row),
                    .q = buf(Buf::QKV).sub(first * row, n * row),
                    .k_cache = s.sk(layer, source),
                    .v_cache = s.sv(layer, source),
                    .q_stride = A,
                    .T = n,
                    .L = s.source_lens[source],
                    .C = A,
                    .H = c.n_head,
                    .options = o});
  };
  if (!pass.batch) {
    if (pass.attention_taps && layer < s.cross_probs.size() && s.cross_probs[layer].size > 0)
      o.probs = &s.cross_probs[layer];
    return attend(0, T, s.source_of[pass.slot]);
  }
  const auto source = [&](uint32_t b) { return s.source_of[pass.batch->rows[b].slot]; };
  for (uint32_t b = 0, end = 0; b < T; b = end) {
    for (end = b + 1; end < T && source(end) == source(b);) end++;
    attend(b, end - b, source(b));
  }
}

void GpuBackend::tap(uint32_t layer, uint32_t T) {
  if (pass.taps && layer < s.taps.size())
    gpu::activation(
        k, rec,
        {.out = s.taps[layer], .x = buf(Buf::X), .n = T * c.n_embd, .kind = Activation::None});
  // The end of a block: with a split, the end of a submission too (after the last block only
  // where the head runs apart).
  const uint32_t n = pass.split;
  if (layer + 1 == c.n_layer ? pass.head_apart : n && (layer + 1) % n == 0) rec.flush();
}

}  // namespace model
