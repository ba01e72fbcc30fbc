// The ops each step of model/forward/graph.h records for the GPU model (gpu_model_impl.h):
// the gpu:: kernels on the model's buffers, into its one command buffer.
#include <algorithm>

#include "model/forward/gpu_model_impl.h"
#include "model/ops/gpu/activation.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/embedding.h"
#include "model/ops/gpu/layernorm.h"
#include "model/ops/gpu/matmul.h"

namespace model {

const vk::BufferSpan& GpuBackend::buf(Buf b) const {
  switch (b) {
    case Buf::X: return m.state_.span(m.x_);
    case Buf::H: return m.state_.span(m.h_);
    case Buf::QKV: return m.state_.span(m.qkv_);
    case Buf::ATT: return m.state_.span(m.att_);
    case Buf::FC: return m.state_.span(m.fc_);
    case Buf::LOGITS: break;
  }
  return m.logits_;
}

void GpuBackend::embed(uint32_t T, uint32_t pos) {
  const Config& c = m.config_;
  const gpu::Weight& wte = *m.w_.wte;
  if (m.batch_) {  // row b at its slot's next position, read from the batch table
    gpu::embedding_batch(m.kernels_, m.rec_, buf(Buf::X), m.params_.span(m.ids_), wte, m.w_.wpe,
                         T, c.n_embd, c.n_vocab, c.n_ctx, c.positions,
                         wte.layout == WeightLayout::Interleaved, m.params_.span(m.batch_rows_));
    return;
  }
  gpu::embedding(m.kernels_, m.rec_, buf(Buf::X), m.params_.span(m.ids_), wte, m.w_.wpe, T,
                 c.n_embd, c.n_vocab, c.n_ctx, pos, c.positions,
                 wte.layout == WeightLayout::Interleaved, &m.params_.span(m.step_));
}

void GpuBackend::layernorm(Buf out, Buf in, const GpuNorm& n, uint32_t T) {
  const Config& c = m.config_;
  gpu::layernorm(m.kernels_, m.rec_, buf(out), buf(in), n.gamma->span, n.beta->span, T, c.n_embd,
                 c.layer_norm_epsilon, c.layer_norm);
}

void GpuBackend::linear(Buf out, Buf in, const GpuLinear& l, uint32_t T, const Epilogue& e,
                        uint32_t in_row, gpu::MatmulKernel kernel,
                        const gpu::MatmulNorm* norm) {
  gpu::matmul(m.kernels_, m.rec_, buf(out), buf(in), *l.w, l.b ? &l.b->span : nullptr,
              e.residual ? &buf(*e.residual) : nullptr, T, l.K, l.N,
              {l.w->layout, e.act, kernel, in_row, norm});
}

// Fused where the policy says the dispatch it saves costs more than the reads it adds
// (norm_linear_max_bytes): matmul_interleaved (the CPU set's interleaved weights, rows from the
// first only) or matmul_vec_wide (the GPU set's [N, K] weights, at most kMatmulVecRows rows:
// decode steps, batches, short prompts, the head's last row) normalises each row of x as it
// reads it, and H is never written. Otherwise the LayerNorm into H, then the matmul.
void GpuBackend::norm_linear(Buf out, Buf in, const GpuNorm& n, const GpuLinear& l, uint32_t T,
                             const Epilogue& e, uint32_t in_row) {
  const uint64_t w_bytes = uint64_t{l.K} * l.N * dtype_bytes(l.w->dtype);
  const bool interleaved = l.w->layout == WeightLayout::Interleaved && in_row == 0;
  const bool wide = m.policy_.nk_weights && l.w->layout == WeightLayout::NK &&
                    T <= gpu::kMatmulVecRows &&
                    gpu::matmul_wide_supported(l.w->dtype, l.w->layout, l.K, buf(in).offset,
                                               l.w->span.offset);
  if ((interleaved || wide) && w_bytes <= m.policy_.norm_linear_max_bytes) {
    const Config& c = m.config_;
    const gpu::MatmulNorm norm{n.gamma->span, n.beta->span, c.layer_norm, c.layer_norm_epsilon};
    linear(out, in, l, T, e, in_row,
           wide ? gpu::MatmulKernel::VectorWide : gpu::MatmulKernel::Auto, &norm);
    return;
  }
  layernorm(Buf::H, in, n, in_row + T);
  linear(out, Buf::H, l, T, e, in_row);
}

void GpuBackend::argmax_head(Buf in, const GpuLinear& l, uint32_t row) {
  gpu::matmul_argmax(m.kernels_, m.rec_, m.io_.span(m.partials_), buf(in), *l.w, l.K, l.N, row);
}

void GpuBackend::attention_store(uint32_t layer, uint32_t T, uint32_t pos) {
  const Config& c = m.config_;
  gpu::AttentionOptions o;
  o.causal = c.causal;
  o.scale = c.attention_scale;
  o.cache = m.kv_cache_;
  if (m.split_) o.scratch = &m.state_.span(*m.split_);
  if (m.batch_ && m.batch_attention_) {  // every row at once, each as its decode step alone
    const uint32_t longest = *std::max_element(m.batch_->pos.begin(), m.batch_->pos.end()) + 1;
    gpu::attention_store_batch(m.kernels_, m.rec_, buf(Buf::ATT), m.state_.span(m.k_cache_[layer]),
                               m.state_.span(m.v_cache_[layer]), buf(Buf::QKV),
                               m.params_.span(m.batch_rows_), T, longest, c.n_embd, c.n_head, o);
    return;
  }
  if (m.batch_) {  // each row alone, in its slot's cache: the same work as a decode step alone
    const uint64_t row = uint64_t{c.n_embd} * 4;
    for (uint32_t b = 0; b < T; b++) {
      const uint32_t slot = m.batch_->rows[b].slot;
      gpu::attention_store(m.kernels_, m.rec_, buf(Buf::ATT).sub(b * row, row),
                           m.k_cache(layer, slot), m.v_cache(layer, slot),
                           buf(Buf::QKV).sub(b * 3 * row, 3 * row), 1, m.batch_->pos[b],
                           c.n_embd, c.n_head, o);
    }
    return;
  }
  const vk::BufferSpan kc = m.k_cache(layer, m.active_slot_);
  const vk::BufferSpan vc = m.v_cache(layer, m.active_slot_);
  if (layer < m.probs_spans_.size() && m.probs_spans_[layer].size > 0)
    o.probs = &m.probs_spans_[layer];
  o.step = &m.params_.span(m.step_);  // holds pos (GpuModel::run)
  gpu::attention_store(m.kernels_, m.rec_, buf(Buf::ATT), kc, vc, buf(Buf::QKV), T, pos, c.n_embd,
                       c.n_head, o);
}

void GpuBackend::tap(uint32_t layer, uint32_t T) {
  if (m.taps_on_ && m.taps_arena_)
    gpu::activation(m.kernels_, m.rec_, m.tap_spans_[layer], buf(Buf::X), T * m.config_.n_embd,
                    Activation::None);
  // The end of a block: with split_layers, the end of a submission too (after the last block
  // only where the head runs apart).
  const uint32_t n = m.pass_split_;
  if (layer + 1 == m.config_.n_layer ? m.head_apart_ : n && (layer + 1) % n == 0) m.rec_.flush();
}

}  // namespace model
