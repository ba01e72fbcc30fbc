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
#include "model/training/train_graph.h"

namespace model::training {
namespace {

using W = float*;

struct CpuTrainBackend {
  const Config& c;
  const ModelWeights<W>& w;
  std::span<const int32_t> ids, targets;
  uint32_t B, T, N;
  bool recompute;  // activations stored by slot(s, recompute)
  std::map<Saved, std::vector<float>> saved;
  std::map<Grad, std::vector<float>> grads;
  double loss = 0;

  float* buf(Saved s) {
    std::vector<float>& v = saved[slot(s, recompute)];
    v.resize(size_t{N} * width(c, s));
    return v.data();
  }
  float* buf(Grad g) {
    std::vector<float>& v = grads[g];
    v.resize(size_t{N} * width(c, g));
    return v.data();
  }

  void embed(Saved out) {
    for (uint32_t b = 0; b < B; b++)
      cpu::embedding(buf(out) + size_t{b} * T * c.n_embd, ids.data() + size_t{b} * T, w.wte, w.wpe, T,
                     c.n_embd, c.n_vocab, c.n_ctx, 0, c.positions);
  }
  void layernorm(Saved out, Saved in, const Norm<W>& n) {
    cpu::layernorm(buf(out), buf(in), n.gamma, n.beta, N, c.n_embd, c.layer_norm_epsilon,
                   c.layer_norm);
  }
  void linear(Saved out, Saved in, const Linear<W>& l, const Saved* residual = nullptr) {
    cpu::matmul(buf(out), buf(in), l.w, l.b, residual ? buf(*residual) : nullptr, N, l.K, l.N,
                l.layout);
  }
  void activation(Saved out, Saved in) {
    cpu::activation(buf(out), buf(in), size_t{N} * c.n_inner, c.activation);
  }
  void attention(Saved out, Saved qkv) {
    const float* in = buf(qkv);
    cpu::attention_sequences(buf(out), in, in, in, self_attention_rows(B, T, c.n_embd, c.n_head),
                             {c.causal, c.attention_scale});
  }
  void cross_entropy(Saved logits) {
    float* l = buf(logits);
    std::vector<float> d(size_t{N} * c.n_vocab);
    loss = cpu::cross_entropy(d.data(), l, targets.data(), N, c.n_vocab);
    std::copy(d.begin(), d.end(), l);
  }
  template <class Out>
  void linear_backward(const Grad* dx, Out dout, Saved x, const Linear<W>& l, const Linear<W>& dl) {
    std::vector<float> unused;
    float* dx_buf = dx ? buf(*dx) : (unused.resize(size_t{N} * l.K), unused.data());
    cpu::matmul_backward(dx_buf, dl.w, dl.b, buf(dout), buf(x), l.w, N, l.K, l.N, l.layout);
  }
  template <class Out>
  void layernorm_backward(Grad dx, Out dout, Saved x, const Norm<W>& n, const Norm<W>& dn) {
    cpu::layernorm_backward(buf(dx), dn.gamma, dn.beta, buf(dout), buf(x), n.gamma, N, c.n_embd,
                            c.layer_norm_epsilon, c.layer_norm);
  }
  void activation_backward(Grad dx, Grad dout, Saved x) {
    cpu::activation_backward(buf(dx), buf(dout), buf(x), size_t{N} * c.n_inner, c.activation);
  }
  void attention_backward(Grad dqkv, Grad dout, Saved qkv) {
    float* d = buf(dqkv);
    const float* in = buf(qkv);
    cpu::attention_backward(d, d, d, buf(dout), in, in, in,
                            self_attention_rows(B, T, c.n_embd, c.n_head),
                            {c.causal, c.attention_scale});
  }
  void add(Grad dst, Grad src) {
    float* d = buf(dst);
    const float* s = buf(src);
    for (size_t i = 0; i < size_t{N} * c.n_embd; i++) d[i] += s[i];
  }
  void embed_backward(Grad dout, W dwte, W dwpe) {
    cpu::embedding_backward(dwte, dwpe, buf(dout), ids.data(), B, T, c.n_embd);
  }
};

}  // namespace

double cpu_train_step(Parameters& params, Parameters& grads, std::span<const int32_t> ids,
                      std::span<const int32_t> targets, uint32_t B, uint32_t T, bool recompute) {
  const Config& c = params.config();
  if (ids.size() != size_t{B} * T || targets.size() != ids.size())
    throw std::invalid_argument("cpu_train_step: ids and targets must hold B * T tokens");
  if (T > c.n_ctx) throw std::invalid_argument("cpu_train_step: T is past the model's context");
  if (!(grads.config() == c)) throw std::invalid_argument("cpu_train_step: grads of another model");
  for (const ExpectedTensor& e : grads.tensors()) {
    std::vector<float>& g = grads.tensor(e.name);
    std::fill(g.begin(), g.end(), 0.0f);
  }
  const ModelWeights<W> w = params.weights(), dw = grads.weights();
  CpuTrainBackend backend{c, w, ids, targets, B, T, B * T, recompute, {}, {}, 0};
  train_step(backend, c, w, dw, Until::Gradients, recompute);
  return backend.loss;
}

std::vector<float> cpu_next_logits(Parameters& params, std::span<const int32_t> ids) {
  const Config& c = params.config();
  if (ids.empty() || ids.size() > c.n_ctx)
    throw std::invalid_argument("cpu_next_logits: 1 to n_ctx ids");
  const auto T = static_cast<uint32_t>(ids.size());
  const ModelWeights<W> w = params.weights();
  CpuTrainBackend backend{c, w, ids, {}, 1, T, T, false, {}, {}, 0};
  train_step(backend, c, w, w, Until::Logits);
  const float* last = backend.buf(Saved{Kept::Logits}) + size_t{T - 1} * c.n_vocab;
  return std::vector<float>(last, last + c.n_vocab);
}

}  // namespace model::training
