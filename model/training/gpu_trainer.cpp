// The GPU backend of train_graph.h: buffers are spans of device arenas (gpu_trainer_state.cpp
// plans them), ops the model::gpu ones.
#include "model/training/gpu_trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/ops/gpu/activation.h"
#include "model/ops/gpu/add.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/attention_backward.h"
#include "model/ops/gpu/choose.h"
#include "model/ops/gpu/coop_check.h"
#include "model/ops/gpu/cross_entropy.h"
#include "model/ops/gpu/embedding.h"
#include "model/ops/gpu/embedding_backward.h"
#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/layernorm.h"
#include "model/ops/gpu/layernorm_backward.h"
#include "model/ops/gpu/matmul.h"
#include "model/ops/gpu/matmul_backward.h"
#include "model/ops/gpu/optimizer.h"
#include "model/training/gpu_trainer_impl.h"
#include "model/training/pairs.h"
#include "model/training/train_graph.h"
#include "vk/check.h"

namespace model::training {
namespace {

// The backend train_graph.h drives: each step records its ops into the trainer's one command
// buffer, over the trainer's buffers (sized for its B x T tokens) or a first part of them, and
// micro-batch `micro`'s ids, targets and losses.
struct GpuTrainBackend {
  GpuTrainer::Impl& m;
  Config c;          // the stack's whose rows the ops run over (rows())
  uint32_t B, T, N;  // this pass's sequences, tokens each, and tokens: the trainer's, or fewer
  uint32_t micro = 0;
  uint32_t mean_over = N;  // the targets the loss is the mean over: the step's
  Rows now = Rows::Target;

  // An encoder-decoder's step switches between its target's rows (the decoder's) and its
  // source's (the encoder's: the trainer's B sequences of S tokens).
  void rows(Rows r) {
    now = r;
    c = m.stack_config(r);
    T = r == Rows::Source ? m.S : m.T;
    N = B * T;
  }
  const vk::BufferSpan& span(Saved s) const {
    return m.acts_.span(m.saved.at({rows_of(s, now), slot(s, m.recompute)}));
  }
  const vk::BufferSpan& span(Grad g) const { return m.acts_.span(m.grad.at({now, g})); }
  static gpu::Weight weight(W w, WeightLayout layout) { return {*w, DType::F32, layout}; }
  AttentionSpec spec() const { return {c.causal, c.attention_scale}; }
  // The current rows' ids and weights (the embedding's).
  const vk::BufferSpan& ids() const {
    return m.io_.span(now == Rows::Source ? m.sources[micro] : m.ids[micro]);
  }
  const ModelWeights<W>& stack_weights() const { return now == Rows::Source ? m.ew : m.w; }

  void embed(Saved out) {
    const ModelWeights<W>& sw = stack_weights();
    const gpu::Weight wte = weight(sw.wte, WeightLayout::KN);
    const gpu::Weight wpe = sw.wpe ? weight(sw.wpe, WeightLayout::KN) : wte;
    gpu::embedding(m.ops, m.rec,
                   {.out = span(out),
                    .ids = ids(),
                    .wte = wte,
                    .wpe = c.positions == PositionKind::Learned ? &wpe : nullptr,
                    .T = N,
                    .C = c.n_embd,
                    .V = c.n_vocab,
                    .n_pos = c.n_ctx,
                    .pos_offset = 0,
                    .position = c.positions,
                    .wte_interleaved = false,
                    .period = T,
                    .scale = c.embed_scale});
  }
  void layernorm(Saved out, Saved in, const Norm<W>& n) {
    gpu::layernorm(m.ops, m.rec,
                   {.out = span(out),
                    .x = span(in),
                    .gamma = *n.gamma,
                    .beta = n.beta ? *n.beta : vk::BufferSpan{},  // none: RMSNorm
                    .T = N,
                    .C = c.n_embd,
                    .eps = c.layer_norm_epsilon,
                    .kind = c.layer_norm});
  }
  void linear(Saved out, Saved in, const Linear<W>& l, const Saved* residual = nullptr) {
    const auto p = m.packed.find(l.w);
    const gpu::Weight w = p == m.packed.end() ? weight(l.w, l.layout)
                                              : gpu::Weight{p->second.fwd, DType::F32, WeightLayout::Interleaved};
    gpu::matmul(m.ops, m.rec,
                {.out = span(out),
                 .x = span(in),
                 .w = w,
                 .bias = l.b,
                 .residual = residual ? &span(*residual) : nullptr,
                 .T = N,
                 .K = l.K,
                 .N = l.N,
                 .options = {.layout = w.layout}});
  }
  void activation(Saved out, Saved in) {
    gpu::activation(m.ops, m.rec,
                    {.out = span(out), .x = span(in), .n = N * c.n_inner, .kind = c.activation});
  }
  // The sources' lengths [B]: the keys of the encoder's self-attention and of cross-attention,
  // where a batch is padded; a decoder's self-attention is causal (its padding comes after every
  // real position) and has none.
  const vk::BufferSpan* source_lens() const {
    return m.seq2seq ? &m.io_.span(m.source_lens[micro]) : nullptr;
  }
  const vk::BufferSpan* self_key_lens() const {
    return now == Rows::Source ? source_lens() : nullptr;
  }
  void attention(Saved out, Saved qkv) {
    const vk::BufferSpan& in = span(qkv);
    gpu::attention_sequences(m.ops, m.rec,
                             {.out = span(out),
                              .q = in,
                              .k = in,
                              .v = in,
                              .key_lens = self_key_lens(),
                              .rows = self_attention_rows(B, T, c.n_embd, c.n_head),
                              .spec = spec()});
  }
  void cross_entropy(Saved logits) {
    gpu::cross_entropy(m.ops, m.rec,
                       {.losses = m.out_.span(m.losses[micro]),
                        .logits = span(logits),
                        .targets = m.io_.span(m.targets[micro]),
                        .N = N,
                        .V = c.n_vocab,
                        .mean_over = mean_over});
  }
  template <class Out>
  void linear_backward(const Grad* dx, Out dout, Saved x, const Linear<W>& l, const Linear<W>& dl) {
    const auto p = m.packed.find(l.w);
    const bool packed = p != m.packed.end() && p->second.has_bwd;
    const gpu::Weight w_t{packed ? p->second.bwd : vk::BufferSpan{}, DType::F32, WeightLayout::Interleaved};
    gpu::matmul_backward(m.ops, m.rec,
                         {.dx = dx ? &span(*dx) : nullptr,
                          .dw = *dl.w,
                          .dbias = dl.b,
                          .dout = span(dout),
                          .x = span(x),
                          .w = weight(l.w, l.layout),
                          .T = N,
                          .K = l.K,
                          .N = l.N,
                          .w_t = packed ? &w_t : nullptr});
  }
  template <class Out>
  void layernorm_backward(Grad dx, Out dout, Saved x, const Norm<W>& n, const Norm<W>& dn) {
    gpu::layernorm_backward(m.ops, m.rec,
                            {.dx = span(dx),
                             .dgamma = *dn.gamma,
                             .dbeta = dn.beta ? *dn.beta : vk::BufferSpan{},
                             .stats = m.acts_.span(m.ln_stats),
                             .dout = span(dout),
                             .x = span(x),
                             .gamma = *n.gamma,
                             .T = N,
                             .C = c.n_embd,
                             .eps = c.layer_norm_epsilon,
                             .kind = c.layer_norm});
  }
  void activation_backward(Grad dx, Grad dout, Saved x) {
    gpu::activation_backward(m.ops, m.rec,
                             {.dx = span(dx),
                              .dout = span(dout),
                              .x = span(x),
                              .n = N * c.n_inner,
                              .kind = c.activation});
  }
  void attention_backward(Grad dqkv, Grad dout, Saved qkv) {
    const vk::BufferSpan &in = span(qkv), &d = span(dqkv);
    gpu::attention_backward(m.ops, m.rec,
                            {.dq = d,
                             .dk = d,
                             .dv = d,
                             .stats = m.acts_.span(m.att_stats),
                             .dout = span(dout),
                             .q = in,
                             .k = in,
                             .v = in,
                             .key_lens = self_key_lens(),
                             .rows = self_attention_rows(B, T, c.n_embd, c.n_head),
                             .spec = spec()});
  }
  SequenceRows cross_rows() const {
    return cross_attention_rows(B, T, m.S, c.attn_width(), c.n_head);
  }
  void cross_attention(Saved out, Saved q) {
    gpu::attention_sequences(m.ops, m.rec,
                             {.out = span(out),
                              .q = span(q),
                              .k = span(Saved{Kept::SourceK, q.layer, q.sub}),
                              .v = span(Saved{Kept::SourceV, q.layer, q.sub}),
                              .key_lens = source_lens(),
                              .rows = cross_rows(),
                              .spec = {false, c.attention_scale}});
  }
  void cross_attention_backward(Grad dq, Grad dout, Saved q) {
    gpu::attention_backward(m.ops, m.rec,
                            {.dq = span(dq),
                             .dk = span(Saved{Kept::SourceDK, q.layer, q.sub}),
                             .dv = span(Saved{Kept::SourceDV, q.layer, q.sub}),
                             .stats = m.acts_.span(m.att_stats),
                             .dout = span(dout),
                             .q = span(q),
                             .k = span(Saved{Kept::SourceK, q.layer, q.sub}),
                             .v = span(Saved{Kept::SourceV, q.layer, q.sub}),
                             .key_lens = source_lens(),
                             .rows = cross_rows(),
                             .spec = {false, c.attention_scale}});
  }
  void add(Grad dst, Grad src) {
    gpu::add(m.ops, m.rec,
             {.out = span(dst), .a = span(dst), .b = span(src), .n = uint64_t{N} * c.n_embd});
  }
  void embed_backward(Grad dout, W dwte, W dwpe) {
    gpu::embedding_backward(m.ops, m.rec,
                            {.dwte = *dwte,
                             .dwpe = dwpe,
                             .dout = span(dout),
                             .ids = ids(),
                             .n = N,
                             .T = T,
                             .C = c.n_embd,
                             .V = c.n_vocab,
                             .scale = c.embed_scale});
  }
};

}  // namespace

void GpuTrainer::Impl::record_micro(uint32_t i, uint32_t mean_over, bool sum) {
  GpuTrainBackend backend{*this, target_config, B, T, N, i, mean_over};
  if (sum) {
    record_step(backend, w, dw, ew, dew, Until::Gradients);
    return;
  }
  for (size_t t = 0; t < micro_spans.size(); t++)
    gpu::fill(ops, rec, {.out = micro_spans[t], .n = counts[t], .value = 0.0f});
  record_step(backend, w, dmicro, ew, demicro, Until::Gradients);
}

void GpuTrainer::Impl::record_update(const StepSettings& update) {
  for (size_t i = 0; i < expected.size(); i++) {
    const size_t h = handles[expected[i].name];
    gpu::OptimizerStep o{update.sgd, update.lr, update.beta1, update.beta2, update.eps,
                         expected[i].shape.size() >= 2 ? update.weight_decay : 0.0f,
                         update.clip, update.step};
    gpu::adamw(ops, rec,
               {.param = weights_.span(h),
                .m = m_.span(h),
                .v = v_.span(h),
                .grad = grads_.span(h),
                .norm_sq = out_.span(norm_sq),
                .n = counts[i],
                .options = o});
  }
}

// Round j: this rank's micro-batch j * ranks + rank computed from zero and read back, every
// rank's gathered, then added into the sum in rank order (the first of all written as it is):
// the sum one process with M micro-batches makes, to the bit. The losses likewise.
double GpuTrainer::Impl::shared_gradients(std::span<const int32_t> id_values,
                                          std::span<const int32_t> target_values,
                                          std::span<const int32_t> source_values,
                                          uint32_t mean_over) {
  const uint32_t R = share.ranks, rounds = M / R;
  uint64_t floats = 0;
  for (uint64_t c : counts) floats += c;
  std::vector<float> mine(floats + N), all((floats + N) * R);
  double total = 0;
  for (uint32_t j = 0; j < rounds; j++) {
    const uint32_t i = j * R + share.rank;
    upload_micro(i, id_values, target_values, source_values);
    rec.begin();
    repack(true);
    record_micro(i, mean_over, false);
    rec.run();
    fwd_current = bwd_current = true;  // until the update
    uint64_t at = 0;
    for (size_t t = 0; t < micro_spans.size(); at += counts[t], t++)
      vk::download(device, mine.data() + at, micro_spans[t], counts[t] * 4);
    vk::download(device, mine.data() + floats, out_.span(losses[i]), uint64_t{N} * 4);
    share.allgather(mine, all);
    for (uint32_t r = 0; r < R; r++) {
      const float* g = all.data() + (floats + N) * r;
      const bool first = j == 0 && r == 0;
      at = 0;
      for (size_t t = 0; t < counts.size(); at += counts[t], t++)
        vk::upload(device, first ? grad_spans[t] : micro_spans[t], g + at, counts[t] * 4);
      if (!first) {
        rec.begin();
        record_sum();
        rec.run();
      }
      for (uint32_t k = 0; k < N; k++) total += static_cast<double>(g[floats + k]);
    }
  }
  return total;
}

StepResult GpuTrainer::Impl::run(std::span<const int32_t> id_values,
                                 std::span<const int32_t> target_values,
                                 std::span<const int32_t> source_values, bool backward,
                                 const StepSettings* update) {
  // An evaluation is one micro-batch; a step's gradients are those of all M.
  const uint32_t micros = backward ? M : 1;
  const uint64_t n = uint64_t{N} * micros, n_sources = uint64_t{B} * S * micros;
  if (id_values.size() != n || target_values.size() != n)
    throw std::invalid_argument(
        backward ? "a step takes M * B * T = " + std::to_string(n) + " ids and as many targets"
                 : "an evaluation takes B * T = " + std::to_string(n) + " ids and as many targets");
  if (source_values.size() != n_sources)
    throw std::invalid_argument(
        seq2seq ? "an encoder-decoder's " + std::string(backward ? "step" : "evaluation") +
                      " takes " + std::to_string(n_sources) + " source ids (B * S each micro-batch)"
                : std::string("sources are an encoder-decoder's; this model is a decoder"));
  // The loss is the mean over the targets that are not padding (ignore_target), in all M
  // micro-batches: each row's gradient is scaled by one over their count.
  const auto real = static_cast<uint32_t>(real_targets(target_values));
  if (real == 0)
    throw std::invalid_argument(std::string(backward ? "a step" : "an evaluation") +
                                " whose targets are all padding (" + std::to_string(ignore_target) +
                                ")");
  const bool shared = backward && share.ranks > 1;
  double total = 0;
  if (shared) {
    total = shared_gradients(id_values, target_values, source_values, real);
    rec.begin();
  } else {
    for (uint32_t i = 0; i < micros; i++) upload_micro(i, id_values, target_values, source_values);
    rec.begin();
    if (backward)
      for (size_t i = 0; i < grad_spans.size(); i++)
        gpu::fill(ops, rec, {.out = grad_spans[i], .n = counts[i], .value = 0.0f});
    repack(backward);
    // The micro-batches in order, each one's share of the mean's gradient (1 / real a target)
    // computed from zero, then added to the sum: one order of the sums, whatever the device,
    // and the one a group of processes can make too.
    for (uint32_t i = 0; i < micros; i++) {
      if (!backward) {
        GpuTrainBackend backend{*this, target_config, B, T, N, i, real};
        record_step(backend, w, dw, ew, dew, Until::Losses);
        continue;
      }
      record_micro(i, real, i == 0);
      if (i > 0) record_sum();
    }
  }
  if (backward)
    gpu::grad_sum_squares(ops, rec,
                          {.out = out_.span(norm_sq),
                           .scratch = acts_.span(norm_scratch),
                           .tensors = grad_spans,
                           .counts = counts});
  if (update) record_update(*update);
  rec.run();
  // The copies now match the weights, until an update changes them.
  fwd_current = !update;
  bwd_current = (bwd_current || backward) && !update;
  std::vector<float> row_losses(N);
  float sum_sq = 0;
  for (uint32_t i = 0; i < micros && !shared; i++) {
    vk::download(device, row_losses.data(), out_.span(losses[i]), uint64_t{N} * 4);
    for (float l : row_losses) total += static_cast<double>(l);
  }
  if (backward) vk::download(device, &sum_sq, out_.span(norm_sq), 4);
  return {total / static_cast<double>(real), std::sqrt(static_cast<double>(sum_sq))};
}

// The forward of one sequence as a pass of B = 1 over the first rows of the trainer's buffers,
// its ids (and an encoder-decoder's source) already uploaded: n target rows, up to the logits;
// then `rows` logit rows from row `first` read back. It changes nothing a step reads.
std::vector<float> GpuTrainer::Impl::logits_pass(uint32_t n, uint32_t first, uint32_t rows) {
  const uint64_t V = config.n_vocab;
  rec.begin();
  repack(false);
  GpuTrainBackend backend{*this, target_config, 1, n, n};
  record_step(backend, w, dw, ew, dew, Until::Logits);
  rec.run();
  fwd_current = true;  // the weights did not change
  std::vector<float> out(rows * V);
  vk::download(
      device, out.data(),
      acts_.span(saved.at({Rows::Target, Saved{Kept::Logits}})).sub(first * V * 4, out.size() * 4),
      out.size() * 4);
  return out;
}

// One sequence of n <= T tokens as a pass of T = n; the last row's logits.
std::vector<float> GpuTrainer::Impl::next_logits(std::span<const int32_t> id_values) {
  if (seq2seq)
    throw std::invalid_argument("next_logits is a decoder's: an encoder-decoder's needs a source");
  if (id_values.empty() || id_values.size() > T)
    throw std::invalid_argument("next_logits takes 1 to T = " + std::to_string(T) + " ids, not " +
                                std::to_string(id_values.size()));
  const auto n = static_cast<uint32_t>(id_values.size());
  gpu::upload_ids(device, io_.span(ids[0]), id_values, config.n_vocab);
  return logits_pass(n, n - 1, 1);
}

// One pair: the source's S rows and the target's T (the step's own shapes, so the same
// kernels); every target row's logits.
std::vector<float> GpuTrainer::Impl::target_logits(std::span<const int32_t> source_values,
                                                   std::span<const int32_t> input_values) {
  if (!seq2seq)
    throw std::invalid_argument(
        "target_logits is an encoder-decoder's: a decoder's is next_logits");
  if (source_values.size() != S || input_values.size() != T)
    throw std::invalid_argument("target_logits takes S = " + std::to_string(S) +
                                " source ids and T = " + std::to_string(T) + " inputs, not " +
                                std::to_string(source_values.size()) + " and " +
                                std::to_string(input_values.size()));
  gpu::upload_ids(device, io_.span(ids[0]), input_values, config.n_vocab);
  upload_sources(0, source_values);
  return logits_pass(T, 0, T);
}

GpuTrainer::GpuTrainer(const vk::Device& device, const Parameters& params, uint32_t B, uint32_t T,
                       bool timestamps, uint32_t M, Share share, bool recompute, uint32_t S)
    : impl_(std::make_unique<Impl>(device, params, B, T, M, timestamps, std::move(share), recompute,
                                   S)) {}
GpuTrainer::~GpuTrainer() = default;

StepResult GpuTrainer::gradients(std::span<const int32_t> ids, std::span<const int32_t> targets,
                                 std::span<const int32_t> sources) {
  return impl_->run(ids, targets, sources, true, nullptr);
}

double GpuTrainer::evaluate(std::span<const int32_t> ids, std::span<const int32_t> targets,
                            std::span<const int32_t> sources) {
  return impl_->run(ids, targets, sources, false, nullptr).loss;
}

std::vector<float> GpuTrainer::next_logits(std::span<const int32_t> ids) {
  return impl_->next_logits(ids);
}

std::vector<float> GpuTrainer::target_logits(std::span<const int32_t> source,
                                             std::span<const int32_t> inputs) {
  return impl_->target_logits(source, inputs);
}

StepResult GpuTrainer::step(std::span<const int32_t> ids, std::span<const int32_t> targets,
                            const StepSettings& settings, std::span<const int32_t> sources) {
  if (settings.step == 0) throw std::invalid_argument("steps count from 1");
  return impl_->run(ids, targets, sources, true, &settings);
}

namespace {

void copy_out(const vk::Device& device, const Packer& from, const std::map<std::string, size_t>& handles,
              Parameters& to) {
  for (const ExpectedTensor& e : to.tensors()) {
    std::vector<float>& v = to.tensor(e.name);
    vk::download(device, v.data(), from.span(handles.at(e.name)), v.size() * 4);
  }
}

}  // namespace

void GpuTrainer::download(Parameters& params) const {
  copy_out(impl_->device, impl_->weights_, impl_->handles, params);
}
void GpuTrainer::download_grads(Parameters& grads) const {
  copy_out(impl_->device, impl_->grads_, impl_->handles, grads);
}
void GpuTrainer::download_moments(Parameters& m, Parameters& v) const {
  copy_out(impl_->device, impl_->m_, impl_->handles, m);
  copy_out(impl_->device, impl_->v_, impl_->handles, v);
}
void GpuTrainer::upload(const Parameters& params) {
  if (!(params.config() == impl_->config))
    throw std::invalid_argument("upload: the parameters are of another model's shape");
  for (const ExpectedTensor& e : impl_->expected)
    vk::upload(impl_->device, impl_->weights_.span(impl_->handles.at(e.name)),
               params.tensor(e.name).data(), e.elements() * 4);
  impl_->fwd_current = impl_->bwd_current = false;  // the interleaved copies are stale
}
void GpuTrainer::upload_moments(const Parameters& m, const Parameters& v) {
  for (const ExpectedTensor& e : impl_->expected) {
    const size_t h = impl_->handles.at(e.name);
    vk::upload(impl_->device, impl_->m_.span(h), m.tensor(e.name).data(), e.elements() * 4);
    vk::upload(impl_->device, impl_->v_.span(h), v.tensor(e.name).data(), e.elements() * 4);
  }
}
std::vector<vk::DispatchTime> GpuTrainer::timings() const { return impl_->rec.timings(); }
uint64_t GpuTrainer::dispatches() const { return impl_->rec.stats().dispatches; }
uint32_t GpuTrainer::batch() const { return impl_->B; }
uint32_t GpuTrainer::context() const { return impl_->T; }
uint32_t GpuTrainer::source_length() const {
  return impl_->S;
}
uint32_t GpuTrainer::micro_batches() const { return impl_->M; }
bool GpuTrainer::recomputes() const { return impl_->recompute; }
GpuTrainer::Memory GpuTrainer::memory() const {
  const Impl& i = *impl_;
  return {.weights = i.weights_.total(),
          .gradients = i.grads_.total() + i.micro_.total(),
          .moments = i.m_.total() + i.v_.total(),
          .activations = i.acts_.total(),
          .packed = i.packed_.total(),
          .io = i.io_.total() + i.out_.total()};
}

}  // namespace model::training
