// GpuTrainer's state: the buffers a step touches, found by a dry walk of train_graph.h, the
// weights uploaded and the moments zeroed, and the weights' interleaved copies where the kernel
// policy reads weights that way.
#include <algorithm>
#include <set>
#include <stdexcept>

#include "model/ops/gpu/attention_backward.h"
#include "model/ops/gpu/choose.h"
#include "model/ops/gpu/coop_check.h"
#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/optimizer.h"
#include "model/training/gpu_trainer_impl.h"

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

GpuTrainer::Impl::Impl(const vk::Device& d, const Parameters& params, uint32_t b, uint32_t t,
                       uint32_t m, bool timestamps, Share sh, bool recompute_blocks, uint32_t s)
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
    throw std::invalid_argument(
        "a shared step needs rank < ranks, M a multiple of the ranks "
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
    vk::upload(device, weights_.span(handles[e.name]), params.tensor(e.name).data(),
               e.elements() * 4);
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
void GpuTrainer::Impl::plan_packing(const std::map<W, Linear<W>>& linears) {
  const vk::DeviceCaps& caps = device.caps();
  const uint64_t texel_align = gpu::texel_binding_alignment(caps);
  if (!gpu::training_packs_weights(ops.policy()) || !caps.storage_texel_buffers ||
      acts_.alignment() % texel_align != 0)
    return;
  constexpr size_t kNone = ~size_t{0};
  const auto fits = [&](uint32_t k, uint32_t n) {
    return k % 4 == 0 &&
           gpu::interleaved_bytes(DType::F32, k, n) <= caps.max_storage_buffer_range &&
           uint64_t{k} * n * 4 <= caps.max_storage_buffer_range;
  };
  std::vector<std::pair<Linear<W>, std::pair<size_t, size_t>>> planned;
  for (const auto& entry : linears) {
    const Linear<W>& l = entry.second;
    if (!fits(l.K, l.N)) continue;
    planned.push_back(
        {l,
         {packed_.add(gpu::interleaved_bytes(DType::F32, l.K, l.N)),
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
void GpuTrainer::Impl::repack(bool backward) {
  for (const auto& entry : packed) {
    const Packed& p = entry.second;
    const Linear<W>& l = p.linear;
    if (!fwd_current)
      gpu::interleave(ops, rec, {.dst = p.fwd, .src = *l.w, .K = l.K, .N = l.N, .from = l.layout});
    if (backward && !bwd_current && p.has_bwd)
      gpu::interleave(ops, rec,
                      {.dst = p.bwd,
                       .src = *l.w,
                       .K = l.N,
                       .N = l.K,
                       .from = l.layout == WeightLayout::KN ? WeightLayout::NK : WeightLayout::KN});
  }
}

// The tensors of `p` as one stack's weights: a decoder's, or an encoder-decoder's side, named
// as Checkpoint::side() names them (the encoder's under "enc.", the shared wte both sides').
ModelWeights<W> GpuTrainer::Impl::map(const Packer& p, Family side) const {
  const std::string prefix = seq2seq && side == Family::Encoder ? "enc." : "";
  return map_weights<W>(side == Family::Encoder ? source_config : target_config,
                        [&](const std::string& name) -> W {
                          auto it = handles.find(name == "wte.weight" ? name : prefix + name);
                          return it == handles.end() ? nullptr : &p.span(it->second);
                        });
}

}  // namespace model::training
