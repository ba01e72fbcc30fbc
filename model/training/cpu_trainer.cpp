// The CPU backend of train_graph.h: buffers are host vectors, ops the model::cpu references.
#include "model/training/cpu_trainer.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/ops/cpu/activation.h"
#include "model/ops/cpu/attention.h"
#include "model/ops/cpu/cross_entropy.h"
#include "model/ops/cpu/embedding.h"
#include "model/ops/cpu/layernorm.h"
#include "model/ops/cpu/matmul.h"
#include "model/training/pairs.h"
#include "model/training/train_graph.h"

namespace model::training {
namespace {

using W = float*;

// One stack's rows: its config and weights, its sequences' ids and their length.
struct StackRows {
  const Config* c = nullptr;
  const ModelWeights<W>* w = nullptr;
  std::span<const int32_t> ids;
  uint32_t T = 0;
  std::vector<uint32_t> lens;  // a source's: each sequence's real tokens (pairs.h's
                               // source_lengths); else empty
};

struct CpuTrainBackend {
  std::span<const int32_t> targets;
  uint32_t B;
  bool recompute;  // activations stored by slot(s, recompute)
  // A decoder's rows (Target), and an encoder-decoder's source (Source); `rows` the current.
  StackRows stacks[2];
  Rows rows_now = Rows::Target;
  std::map<std::pair<Rows, Saved>, std::vector<float>> saved;
  std::map<std::pair<Rows, Grad>, std::vector<float>> grads;
  double loss = 0;

  const StackRows& stack(Rows r) const { return stacks[static_cast<int>(r)]; }
  const StackRows& now() const { return stack(rows_now); }
  const Config& cfg() const { return *now().c; }
  uint32_t T() const { return now().T; }
  uint32_t N() const { return B * now().T; }
  void rows(Rows r) { rows_now = r; }

  float* buf(Saved s) {
    const Rows r = rows_of(s, rows_now);
    std::vector<float>& v = saved[{r, slot(s, recompute)}];
    v.resize(size_t{B} * stack(r).T * width(cfg(), s));
    return v.data();
  }
  float* buf(Grad g) {
    std::vector<float>& v = grads[{rows_now, g}];
    v.resize(size_t{N()} * width(cfg(), g));
    return v.data();
  }

  void embed(Saved out) {
    const Config& c = cfg();
    for (uint32_t b = 0; b < B; b++)
      cpu::embedding(buf(out) + size_t{b} * T() * c.n_embd, now().ids.data() + size_t{b} * T(),
                     now().w->wte, now().w->wpe, T(), c.n_embd, c.n_vocab, c.n_ctx, 0, c.positions,
                     nullptr, nullptr, 0, c.embed_scale);
  }
  void layernorm(Saved out, Saved in, const Norm<W>& n) {
    const Config& c = cfg();
    cpu::layernorm(buf(out), buf(in), n.gamma, n.beta, N(), c.n_embd, c.layer_norm_epsilon,
                   c.layer_norm);
  }
  void linear(Saved out, Saved in, const Linear<W>& l, const Saved* residual = nullptr) {
    cpu::matmul(buf(out), buf(in), l.w, l.b, residual ? buf(*residual) : nullptr, N(), l.K, l.N,
                l.layout);
  }
  void activation(Saved out, Saved in) {
    const Config& c = cfg();
    cpu::activation(buf(out), buf(in), size_t{N()} * c.n_inner, c.activation);
  }
  // The keys' lengths of the current rows' self-attention (an encoder-decoder's source's, where
  // padded), and of cross-attention (the source's); null: every key.
  const uint32_t* self_key_lens() const { return now().lens.empty() ? nullptr : now().lens.data(); }
  const uint32_t* source_lens() const { return stack(Rows::Source).lens.data(); }
  void attention(Saved out, Saved qkv) {
    const Config& c = cfg();
    const float* in = buf(qkv);
    cpu::attention_sequences(buf(out), in, in, in, self_attention_rows(B, T(), c.n_embd, c.n_head),
                             {c.causal, c.attention_scale}, self_key_lens());
  }
  SequenceRows cross_rows() const {
    const Config& c = cfg();
    return cross_attention_rows(B, T(), stack(Rows::Source).T, c.attn_width(), c.n_head);
  }
  void cross_attention(Saved out, Saved q) {
    const Config& c = cfg();
    cpu::attention_sequences(buf(out), buf(q), buf(Saved{Kept::SourceK, q.layer, q.sub}),
                             buf(Saved{Kept::SourceV, q.layer, q.sub}), cross_rows(),
                             {false, c.attention_scale}, source_lens());
  }
  void cross_attention_backward(Grad dq, Grad dout, Saved q) {
    const Config& c = cfg();
    cpu::attention_backward(buf(dq), buf(Saved{Kept::SourceDK, q.layer, q.sub}),
                            buf(Saved{Kept::SourceDV, q.layer, q.sub}), buf(dout), buf(q),
                            buf(Saved{Kept::SourceK, q.layer, q.sub}),
                            buf(Saved{Kept::SourceV, q.layer, q.sub}), cross_rows(),
                            {false, c.attention_scale}, source_lens());
  }
  void cross_entropy(Saved logits) {
    const Config& c = cfg();
    float* l = buf(logits);
    std::vector<float> d(size_t{N()} * c.n_vocab);
    loss = cpu::cross_entropy(d.data(), l, targets.data(), N(), c.n_vocab);
    std::copy(d.begin(), d.end(), l);
  }
  template <class Out>
  void linear_backward(const Grad* dx, Out dout, Saved x, const Linear<W>& l, const Linear<W>& dl) {
    std::vector<float> unused;
    float* dx_buf = dx ? buf(*dx) : (unused.resize(size_t{N()} * l.K), unused.data());
    cpu::matmul_backward(dx_buf, dl.w, dl.b, buf(dout), buf(x), l.w, N(), l.K, l.N, l.layout);
  }
  template <class Out>
  void layernorm_backward(Grad dx, Out dout, Saved x, const Norm<W>& n, const Norm<W>& dn) {
    const Config& c = cfg();
    cpu::layernorm_backward(buf(dx), dn.gamma, dn.beta, buf(dout), buf(x), n.gamma, N(), c.n_embd,
                            c.layer_norm_epsilon, c.layer_norm);
  }
  void activation_backward(Grad dx, Grad dout, Saved x) {
    const Config& c = cfg();
    cpu::activation_backward(buf(dx), buf(dout), buf(x), size_t{N()} * c.n_inner, c.activation);
  }
  void attention_backward(Grad dqkv, Grad dout, Saved qkv) {
    const Config& c = cfg();
    float* d = buf(dqkv);
    const float* in = buf(qkv);
    cpu::attention_backward(d, d, d, buf(dout), in, in, in,
                            self_attention_rows(B, T(), c.n_embd, c.n_head),
                            {c.causal, c.attention_scale}, self_key_lens());
  }
  void add(Grad dst, Grad src) {
    float* d = buf(dst);
    const float* s = buf(src);
    for (size_t i = 0; i < size_t{N()} * cfg().n_embd; i++) d[i] += s[i];
  }
  void embed_backward(Grad dout, W dwte, W dwpe) {
    const Config& c = cfg();
    cpu::embedding_backward(dwte, dwpe, buf(dout), now().ids.data(), B, T(), c.n_embd,
                            c.embed_scale);
  }
};

}  // namespace

namespace {

// Throws unless some target is not padding: the mean has no rows otherwise (as GpuTrainer).
void require_targets(std::span<const int32_t> targets, const char* op) {
  if (real_targets(targets) == 0)
    throw std::invalid_argument(std::string(op) + ": a step whose targets are all padding (" +
                                std::to_string(ignore_target) + ")");
}

// Zeroes every gradient; throws unless grads are of params' model.
void zero_grads(const Parameters& params, Parameters& grads, const char* op) {
  if (!(grads.config() == params.config()))
    throw std::invalid_argument(std::string(op) + ": grads of another model");
  for (const ExpectedTensor& e : grads.tensors()) {
    std::vector<float>& g = grads.tensor(e.name);
    std::fill(g.begin(), g.end(), 0.0f);
  }
}

}  // namespace

double cpu_train_step(Parameters& params, Parameters& grads, std::span<const int32_t> ids,
                      std::span<const int32_t> targets, uint32_t B, uint32_t T, bool recompute) {
  const Config& c = params.config();
  if (c.family == Family::EncoderDecoder)
    throw std::invalid_argument(
        "cpu_train_step: an encoder-decoder's step is cpu_seq2seq_train_step");
  if (ids.size() != size_t{B} * T || targets.size() != ids.size())
    throw std::invalid_argument("cpu_train_step: ids and targets must hold B * T tokens");
  if (T > c.n_ctx) throw std::invalid_argument("cpu_train_step: T is past the model's context");
  require_targets(targets, "cpu_train_step");
  zero_grads(params, grads, "cpu_train_step");
  const ModelWeights<W> w = params.weights(), dw = grads.weights();
  CpuTrainBackend backend{targets, B, recompute, {StackRows{&c, &w, ids, T}, {}}};
  train_step(backend, c, w, dw, Until::Gradients, recompute);
  return backend.loss;
}

double cpu_seq2seq_train_step(Parameters& params, Parameters& grads,
                              std::span<const int32_t> sources, std::span<const int32_t> inputs,
                              std::span<const int32_t> targets, uint32_t B, uint32_t S,
                              uint32_t T) {
  const Config& c = params.config();
  if (c.family != Family::EncoderDecoder)
    throw std::invalid_argument("cpu_seq2seq_train_step: not an encoder-decoder's parameters");
  if (sources.size() != size_t{B} * S || S == 0)
    throw std::invalid_argument("cpu_seq2seq_train_step: sources must hold B * S tokens, S >= 1");
  if (inputs.size() != size_t{B} * T || targets.size() != inputs.size())
    throw std::invalid_argument(
        "cpu_seq2seq_train_step: inputs and targets must hold B * T tokens");
  if (S > c.n_ctx || T > c.n_ctx)
    throw std::invalid_argument("cpu_seq2seq_train_step: S or T is past the model's context");
  require_targets(targets, "cpu_seq2seq_train_step");
  zero_grads(params, grads, "cpu_seq2seq_train_step");
  const Config ec = encoder_side(c), dc = decoder_side(c);
  const ModelWeights<W> ew = params.weights(Family::Encoder), dew = grads.weights(Family::Encoder),
                        w = params.weights(Family::Decoder), dw = grads.weights(Family::Decoder);
  CpuTrainBackend backend{
      targets,
      B,
      false,
      {StackRows{&dc, &w, inputs, T, {}},
       StackRows{&ec, &ew, sources, S, source_lengths(sources, S, c.pad_token_id)}}};
  seq2seq_train_step(backend, ec, ew, dew, dc, w, dw);
  return backend.loss;
}

std::vector<float> cpu_next_logits(Parameters& params, std::span<const int32_t> ids) {
  const Config& c = params.config();
  if (ids.empty() || ids.size() > c.n_ctx)
    throw std::invalid_argument("cpu_next_logits: 1 to n_ctx ids");
  const auto T = static_cast<uint32_t>(ids.size());
  const ModelWeights<W> w = params.weights();
  CpuTrainBackend backend{{}, 1, false, {StackRows{&c, &w, ids, T}, {}}};
  train_step(backend, c, w, w, Until::Logits);
  const float* last = backend.buf(Saved{Kept::Logits}) + size_t{T - 1} * c.n_vocab;
  return std::vector<float>(last, last + c.n_vocab);
}

}  // namespace model::training
