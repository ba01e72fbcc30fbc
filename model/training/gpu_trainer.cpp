// The GPU backend of train_graph.h: buffers are spans of device arenas, ops the model::gpu ones.
#include "model/training/gpu_trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/forward/packer.h"
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
#include "model/training/pairs.h"
#include "model/training/train_graph.h"
#include "vk/check.h"

namespace model::training {
namespace {

using W = const vk::BufferSpan*;

// Which activations and scratch buffers a step uses: a dry walk of train_graph.h.
struct PlanBackend {
  bool recompute;  // activations by slot(s, recompute)
  std::set<std::pair<Rows, Saved>> saved;
  std::set<std::pair<Rows, Grad>> grads;
  std::map<W, Linear<W>> linears;  // each weight matrix a linear reads, once
  Rows now = Rows::Target;
  void rows(Rows r) { now = r; }
  void use(Saved s) { saved.insert({rows_of(s, now), slot(s, recompute)}); }
  void use(Grad g) { grads.insert({now, g}); }
  void embed(Saved out) { use(out); }
  void layernorm(Saved out, Saved in, const Norm<W>&) { use(out), use(in); }
  void linear(Saved out, Saved in, const Linear<W>& l, const Saved* residual = nullptr) {
    use(out), use(in);
    if (residual) use(*residual);
    const auto [it, added] = linears.emplace(l.w, l);
    if (!added && (it->second.K != l.K || it->second.N != l.N || it->second.layout != l.layout))
      throw std::logic_error("training: one weight read by linears of two shapes");
  }
  void activation(Saved out, Saved in) { use(out), use(in); }
  void attention(Saved out, Saved qkv) { use(out), use(qkv); }
  void cross_entropy(Saved logits) { use(logits); }
  template <class Out>
  void linear_backward(const Grad* dx, Out dout, Saved x, const Linear<W>&, const Linear<W>&) {
    if (dx) use(*dx);
    use(dout), use(x);
  }
  template <class Out>
  void layernorm_backward(Grad dx, Out dout, Saved x, const Norm<W>&, const Norm<W>&) {
    use(dx), use(dout), use(x);
  }
  void activation_backward(Grad dx, Grad dout, Saved x) { use(dx), use(dout), use(x); }
  void attention_backward(Grad dqkv, Grad dout, Saved qkv) { use(dqkv), use(dout), use(qkv); }
  void cross_attention(Saved out, Saved q) {
    use(out), use(q), use(Saved{Kept::SourceK, q.layer, q.sub}),
        use(Saved{Kept::SourceV, q.layer, q.sub});
  }
  void cross_attention_backward(Grad dq, Grad dout, Saved q) {
    use(dq), use(dout), use(q);
    for (Kept k : {Kept::SourceK, Kept::SourceV, Kept::SourceDK, Kept::SourceDV})
      use(Saved{k, q.layer, q.sub});
  }
  void add(Grad dst, Grad src) { use(dst), use(src); }
  void embed_backward(Grad dout, W, W) { use(dout); }
};

}  // namespace

struct GpuTrainer::Impl {
  Impl(const vk::Device& d, const Parameters& params, uint32_t b, uint32_t t, uint32_t m,
       bool timestamps, Share sh, bool recompute_blocks, uint32_t s)
      : device(d),
        ops(gpu::checked_ops(d)),
        config(params.config()),
        expected(params.tensors()),
        seq2seq(config.family == Family::EncoderDecoder),
        target_config(seq2seq ? decoder_side(config) : config),
        source_config(seq2seq ? encoder_side(config) : Config{}),
        B(b),
        T(t),
        N(b * t),
        S(s),
        M(m),
        share(std::move(sh)),
        recompute(recompute_blocks),
        weights_(d, "training weights"),
        grads_(d, "training gradients"),
        micro_(d, "training micro-batch gradients"),
        m_(d, "AdamW m"),
        v_(d, "AdamW v"),
        acts_(d, "training activations"),
        packed_(d, "training interleaved weights"),
        io_(d, "training ids"),
        out_(d, "training losses"),
        rec(d, timestamps) {
    const Config& c = config;
    if (B == 0 || T == 0 || M == 0)
      throw std::invalid_argument("training needs B >= 1, T >= 1 and a micro-batch or more");
    if (seq2seq && (S == 0 || S > c.n_ctx))
      throw std::invalid_argument("an encoder-decoder's sources need 1 <= S <= " +
                                  std::to_string(c.n_ctx) + " tokens, not S=" + std::to_string(S));
    if (!seq2seq && S != 0)
      throw std::invalid_argument("S (sources) is an encoder-decoder's; this model is a decoder");
    if (seq2seq && recompute)
      throw std::invalid_argument("recomputation (--recompute) is not built for encoder-decoders");
    if (uint64_t{M} * B * S > UINT32_MAX)
      throw std::invalid_argument("a step's sources pass 2^32 tokens");
    if (uint64_t{M} * N > UINT32_MAX)
      throw std::invalid_argument("a step of " + std::to_string(M) + " micro-batches of " +
                                  std::to_string(N) + " tokens passes 2^32 tokens");
    if (T > c.n_ctx)
      throw std::invalid_argument("T=" + std::to_string(T) + " is past the model's context of " +
                                  std::to_string(c.n_ctx));
    if (share.ranks == 0 || share.rank >= share.ranks || M % share.ranks != 0 ||
        (share.ranks > 1 && !share.allgather))
      throw std::invalid_argument("a shared step needs rank < ranks, M a multiple of the ranks "
                                  "and an allgather");
    for (const ExpectedTensor& e : expected) {
      const uint64_t bytes = e.elements() * 4;
      handles[e.name] = weights_.add(bytes);
      grads_.add(bytes), m_.add(bytes), v_.add(bytes);
      if (M > 1) micro_.add(bytes);
      counts.push_back(e.elements());
    }
    for (Packer* p : {&weights_, &grads_, &m_, &v_}) p->allocate(vk::MemoryKind::Device);
    if (M > 1) micro_.allocate(vk::MemoryKind::Device);
    for (const ExpectedTensor& e : expected) {
      vk::upload(device, weights_.span(handles[e.name]), params.tensor(e.name).data(), e.elements() * 4);
      grad_spans.push_back(grads_.span(handles[e.name]));
      if (M > 1) micro_spans.push_back(micro_.span(handles[e.name]));
    }
    w = map(weights_, Family::Decoder);
    dw = map(grads_, Family::Decoder);
    if (M > 1) dmicro = map(micro_, Family::Decoder);
    if (seq2seq) {
      ew = map(weights_, Family::Encoder);
      dew = map(grads_, Family::Encoder);
      if (M > 1) demicro = map(micro_, Family::Encoder);
    }

    // The activations and scratch the graph touches, and the ops' own scratch.
    PlanBackend plan{recompute, {}, {}, {}};
    record_step(plan, w, dw, ew, dew, Until::Gradients);
    for (const auto& [r, kept] : plan.saved)
      saved[{r, kept}] = acts_.add(rows(r) * width(stack_config(r), kept) * 4);
    for (const auto& [r, g] : plan.grads)
      grad[{r, g}] = acts_.add(rows(r) * width(stack_config(r), g) * 4);
    const uint64_t most_rows = std::max(rows(Rows::Target), rows(Rows::Source));
    ln_stats = acts_.add(most_rows * 16);
    att_stats = acts_.add(std::max(gpu::attention_backward_stats_bytes(B, T, c.n_head),
                                   gpu::attention_backward_stats_bytes(B, S, c.n_head)));
    norm_scratch = acts_.add(gpu::grad_sum_squares_scratch(device.caps(), counts) * 4);
    acts_.allocate(vk::MemoryKind::Device);
    plan_packing(plan.linears);
    // Each micro-batch its own ids, targets and losses: one recording holds them all.
    for (uint32_t i = 0; i < M; i++) {
      ids.push_back(io_.add(uint64_t{N} * 4));
      targets.push_back(io_.add(uint64_t{N} * 4));
      if (seq2seq) {
        sources.push_back(io_.add(uint64_t{B} * S * 4));
        source_lens.push_back(io_.add(uint64_t{B} * 4));
      }
    }
    io_.allocate(vk::MemoryKind::Parameters);
    for (uint32_t i = 0; i < M; i++) losses.push_back(out_.add(uint64_t{N} * 4));
    norm_sq = out_.add(4);
    out_.allocate(vk::MemoryKind::Readback);
    // Moments start at zero.
    rec.begin();
    for (const ExpectedTensor& e : expected) {
      gpu::fill(ops, rec, {.out = m_.span(handles[e.name]), .n = e.elements(), .value = 0.0f});
      gpu::fill(ops, rec, {.out = v_.span(handles[e.name]), .n = e.elements(), .value = 0.0f});
    }
    rec.run();
  }

  // Where the kernel policy keeps weights interleaved (the CPU set), the matrices the linears
  // read get Interleaved copies, repacked on the device when the weights have changed: W for the
  // forward where K is in whole texels, W^T for dx = dout W^T where N is too (GPT-2's head of
  // 50257 outputs has the first only). matmul_interleaved then takes 32 rows of x per workgroup
  // where the [K, N] weights' texel kernel goes 8 rows at a time. A matrix too large for one
  // binding stays as it is (matmul splits it; interleave cannot).
  void plan_packing(const std::map<W, Linear<W>>& linears) {
    const vk::DeviceCaps& caps = device.caps();
    const uint64_t texel_align = gpu::texel_binding_alignment(caps);
    if (!gpu::training_packs_weights(ops.policy()) || !caps.storage_texel_buffers ||
        acts_.alignment() % texel_align != 0)
      return;
    constexpr size_t kNone = ~size_t{0};
    const auto fits = [&](uint32_t k, uint32_t n) {
      return k % 4 == 0 && gpu::interleaved_bytes(DType::F32, k, n) <= caps.max_storage_buffer_range &&
             uint64_t{k} * n * 4 <= caps.max_storage_buffer_range;
    };
    std::vector<std::pair<Linear<W>, std::pair<size_t, size_t>>> planned;
    for (const auto& entry : linears) {
      const Linear<W>& l = entry.second;
      if (!fits(l.K, l.N)) continue;
      planned.push_back({l, {packed_.add(gpu::interleaved_bytes(DType::F32, l.K, l.N)),
                             fits(l.N, l.K) ? packed_.add(gpu::interleaved_bytes(DType::F32, l.N, l.K)) : kNone}});
    }
    if (planned.empty()) return;
    packed_.allocate(vk::MemoryKind::Device);
    for (const auto& [l, h] : planned) {
      Packed p{l, packed_.span(h.first), {}, h.second != kNone};
      if (p.has_bwd) p.bwd = packed_.span(h.second);
      if (p.fwd.offset % texel_align == 0 && (!p.has_bwd || p.bwd.offset % texel_align == 0))
        packed.emplace(l.w, p);
    }
  }
  // Records the repacking of the weights where they changed since the copies were made (the
  // backward's copies only when it runs): an evaluation between steps repacks nothing.
  void repack(bool backward) {
    for (const auto& entry : packed) {
      const Packed& p = entry.second;
      const Linear<W>& l = p.linear;
      if (!fwd_current)
        gpu::interleave(ops, rec,
                        {.dst = p.fwd, .src = *l.w, .K = l.K, .N = l.N, .from = l.layout});
      if (backward && !bwd_current && p.has_bwd)
        gpu::interleave(
            ops, rec,
            {.dst = p.bwd,
             .src = *l.w,
             .K = l.N,
             .N = l.K,
             .from = l.layout == WeightLayout::KN ? WeightLayout::NK : WeightLayout::KN});
    }
  }

  // The tensors of `p` as one stack's weights: a decoder's, or an encoder-decoder's side, named
  // as Checkpoint::side() names them (the encoder's under "enc.", the shared wte both sides').
  ModelWeights<W> map(const Packer& p, Family side) const {
    const std::string prefix = seq2seq && side == Family::Encoder ? "enc." : "";
    return map_weights<W>(side == Family::Encoder ? source_config : target_config,
                          [&](const std::string& name) -> W {
                            auto it = handles.find(name == "wte.weight" ? name : prefix + name);
                            return it == handles.end() ? nullptr : &p.span(it->second);
                          });
  }
  uint64_t rows(Rows r) const { return uint64_t{B} * (r == Rows::Source ? S : T); }
  const Config& stack_config(Rows r) const {
    return r == Rows::Source ? source_config : target_config;
  }
  // One step's graph into backend b: a decoder's train_step, or an encoder-decoder's
  // seq2seq_train_step (ew, dew its encoder's weights and gradients).
  template <class Backend>
  void record_step(Backend& b, const ModelWeights<W>& w_, const ModelWeights<W>& dw_,
                   const ModelWeights<W>& ew_, const ModelWeights<W>& dew_, Until until) {
    if (seq2seq) {
      seq2seq_train_step(b, source_config, ew_, dew_, target_config, w_, dw_, until);
    } else {
      train_step(b, config, w_, dw_, until, recompute);
    }
  }
  // backward false: the losses only (grad_norm 0); update: the optimizer step after them.
  // source_values: an encoder-decoder's sources, [micro-batches B, S].
  StepResult run(std::span<const int32_t> id_values, std::span<const int32_t> target_values,
                 std::span<const int32_t> source_values, bool backward, const StepSettings* update);
  // Micro-batch i's ids, targets (and sources) to the device.
  void upload_micro(uint32_t i, std::span<const int32_t> id_values,
                    std::span<const int32_t> target_values,
                    std::span<const int32_t> source_values) {
    gpu::upload_ids(device, io_.span(ids[i]), id_values.subspan(size_t{i} * N, N), config.n_vocab);
    gpu::upload_ids(device, io_.span(targets[i]), target_values.subspan(size_t{i} * N, N),
                    config.n_vocab, true);
    if (seq2seq) upload_sources(i, source_values.subspan(size_t{i} * B * S, size_t{B} * S));
  }
  // Micro-batch i's sources [B', S] (B' <= B) and their lengths, their trailing pads left out.
  void upload_sources(uint32_t i, std::span<const int32_t> values) {
    gpu::upload_ids(device, io_.span(sources[i]), values, config.n_vocab);
    const std::vector<uint32_t> lens = source_lengths(values, S, config.pad_token_id);
    vk::upload(device, io_.span(source_lens[i]), lens.data(), lens.size() * sizeof(uint32_t));
  }
  // A step shared by ranks: the rounds of micro-batches, each exchanged and summed; the losses.
  double shared_gradients(std::span<const int32_t> id_values,
                          std::span<const int32_t> target_values,
                          std::span<const int32_t> source_values, uint32_t mean_over);
  // Records micro-batch i's forward and backward, its gradients from zero into the sum (the
  // first) or into micro_ (the others); `sum` adds those to the sum.
  void record_micro(uint32_t i, uint32_t mean_over, bool sum);
  void record_sum() {
    for (size_t t = 0; t < grad_spans.size(); t++)
      gpu::add(ops, rec, {.out = grad_spans[t], .a = grad_spans[t], .b = micro_spans[t], .n = counts[t]});
  }
  void record_update(const StepSettings& update);
  std::vector<float> logits_pass(uint32_t n, uint32_t first, uint32_t rows);
  std::vector<float> next_logits(std::span<const int32_t> id_values);
  std::vector<float> target_logits(std::span<const int32_t> source_values,
                                   std::span<const int32_t> input_values);

  const vk::Device& device;
  const gpu::Ops ops;  // the device's pipelines and policy, decided once
  Config config;
  std::vector<ExpectedTensor> expected;
  // An encoder-decoder: its decoder's config (target_config) and its encoder's (source_config),
  // over which its step runs; else the config and an empty one.
  bool seq2seq;
  Config target_config, source_config;
  uint32_t B, T, N;  // a micro-batch's sequences, tokens each, and tokens
  uint32_t S;        // an encoder-decoder's source tokens a sequence, else 0
  uint32_t M;        // micro-batches a step
  Share share;       // the micro-batches this process computes
  bool recompute;    // one block's activations, recomputed in the backward (train_graph.h slot)
  // One span per tensor each, the same plan; micro_ (M > 1 only) a micro-batch's gradients.
  Packer weights_, grads_, micro_, m_, v_;
  std::map<std::string, size_t> handles;
  // Per tensor, in `expected` order: its gradient's span and its elements.
  std::vector<vk::BufferSpan> grad_spans, micro_spans;
  std::vector<uint64_t> counts;
  ModelWeights<W> w, dw, dmicro;
  ModelWeights<W> ew, dew, demicro;  // an encoder-decoder's encoder side
  Packer acts_;
  std::map<std::pair<Rows, Saved>, size_t> saved;
  std::map<std::pair<Rows, Grad>, size_t> grad;
  size_t ln_stats = 0, att_stats = 0, norm_scratch = 0;
  struct Packed {
    Linear<W> linear;
    vk::BufferSpan fwd, bwd;  // W [N, K] and W^T [K, N] as Interleaved
    bool has_bwd = false;
  };
  Packer packed_;
  std::map<W, Packed> packed;  // by the weight's span; empty where weights stay as they are
  bool fwd_current = false, bwd_current = false;  // the copies hold the weights as they are
  // host-written: ids and targets [N] (and sources [B S], their lengths [B]) of each micro-batch
  Packer io_;
  std::vector<size_t> ids, targets, sources, source_lens;
  Packer out_;  // read back: each micro-batch's row losses [N], the gradients' sum of squares
  std::vector<size_t> losses;
  size_t norm_sq = 0;
  vk::Recorder rec;
};

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
