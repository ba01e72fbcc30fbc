// Training's graph, once: the forward pass over B sequences of T tokens keeping what the backward
// needs, then the backward pass that walks it in reverse, both written against a backend so the
// same description drives the CPU reference (cpu_trainer.cpp) and the GPU recording
// (gpu_trainer.cpp). The forward is graph.h's forward() without a KV cache (every token of a
// sequence attends within it) and with each step's output kept (Saved); the backward is its
// mirror, op by op.
#pragma once
#include <cstdint>

#include "model/forward/graph.h"

namespace model::training {

// The activations a step keeps, per layer (Saved{kind, layer}), over N = B * T tokens. Layer
// n_layer's In is the stream after the last block.
enum class Kept {
  In,     // [N, C] the block's input: the residual stream
  Norm1,  // [N, C] pre-norm: ln_1(In); post-norm: ln_1(Sum1), the MLP's input and residual
  Qkv,    // [N, 3C]
  Att,    // [N, C] attention's output, heads side by side
  Sum1,   // [N, C] the stream after attention: In + proj(Att)
  Norm2,  // [N, C] pre-norm: ln_2(Sum1)
  FcPre,  // [N, F] the MLP's hidden layer before its activation
  FcAct,  // [N, F] after it
  Sum2,   // [N, C] post-norm: Norm1 + proj(FcAct), before ln_2
  NormF,  // [N, C] ln_f's output (layer 0 only: the head's input)
  Logits  // [N, V] (layer 0 only), turned into their gradient in place
};
struct Saved {
  Kept kind;
  uint32_t layer = 0;
};

// The backward's scratch, all [N, C] unless noted.
enum class Grad {
  X,    // the gradient of the residual stream, carried down the layers
  H,    // a LayerNorm's input gradient, added to X (or a sum's gradient, post-norm)
  A,    // attention's output gradient
  QKV,  // [N, 3C]
  F,    // [N, F] the MLP's hidden gradient
};

// Floats per token of each buffer.
inline uint32_t width(const Config& c, Kept k) {
  switch (k) {
    case Kept::Qkv: return 3 * c.n_embd;
    case Kept::FcPre:
    case Kept::FcAct: return c.n_inner;
    case Kept::Logits: return c.n_vocab;
    default: return c.n_embd;
  }
}
inline uint32_t width(const Config& c, Grad g) {
  return g == Grad::QKV ? 3 * c.n_embd : g == Grad::F ? c.n_inner : c.n_embd;
}

// Forward then backward of one step: B sequences of T tokens whose ids (and targets) the
// backend already holds. Returns nothing: the backend's cross_entropy keeps the losses, and
// its gradients (dw) hold d(mean loss)/d(weight) afterwards (zeroed by the backend first).
// backward = false stops after the losses (evaluation).
//
// The backend provides, with W its tensor handle (an empty W is an absent tensor):
//   embed(out)                             wte[ids] + positions 0..T-1 of each sequence
//   layernorm(out, in, norm)
//   linear(out, in, lin, residual = null)  out = in W + b (+ *residual)
//   activation(out, in)                    the config's MLP activation
//   attention(out, qkv)                    causal attention within each sequence
//   cross_entropy(logits)                  the losses; logits become their gradient
//   linear_backward(dx, dout, x, lin, dlin)   dx = dout W^T (skipped when dx is null);
//                                          dlin.w += x^T dout; dlin.b += sum dout
//   layernorm_backward(dx, dout, x, norm, dnorm)   dx written; dnorm accumulated
//   activation_backward(dx, dout, x)       dx = dout f'(x), in place allowed
//   attention_backward(dqkv, dout, qkv)
//   add(dst, src)                          dst += src, [N, C]
//   embed_backward(dout)                   dwte[ids] += dout, dwpe[t] += dout
// Buffers are Saved or Grad values.
template <class Backend, class W>
void train_step(Backend& b, const Config& c, const ModelWeights<W>& w, const ModelWeights<W>& dw,
                bool backward = true) {
  const uint32_t L = c.n_layer;
  const auto S = [](Kept k, uint32_t layer = 0) { return Saved{k, layer}; };
  using K = Kept;

  // Forward, keeping every block's activations.
  b.embed(S(K::In, 0));
  for (uint32_t i = 0; i < L; i++) {
    const Block<W>& l = w.layers[i];
    const Saved in = S(K::In, i), out = S(K::In, i + 1);
    if (c.attention_only) {  // x = x + attn(x)
      b.linear(S(K::Qkv, i), in, l.c_attn);
      b.attention(S(K::Att, i), S(K::Qkv, i));
      b.linear(out, S(K::Att, i), l.attn_proj, &in);
    } else if (c.pre_norm) {  // x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
      b.layernorm(S(K::Norm1, i), in, l.ln_1);
      b.linear(S(K::Qkv, i), S(K::Norm1, i), l.c_attn);
      b.attention(S(K::Att, i), S(K::Qkv, i));
      b.linear(S(K::Sum1, i), S(K::Att, i), l.attn_proj, &in);
      b.layernorm(S(K::Norm2, i), S(K::Sum1, i), l.ln_2);
      b.linear(S(K::FcPre, i), S(K::Norm2, i), l.fc);
      b.activation(S(K::FcAct, i), S(K::FcPre, i));
      const Saved sum1 = S(K::Sum1, i);
      b.linear(out, S(K::FcAct, i), l.mlp_proj, &sum1);
    } else {  // x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))
      b.linear(S(K::Qkv, i), in, l.c_attn);
      b.attention(S(K::Att, i), S(K::Qkv, i));
      b.linear(S(K::Sum1, i), S(K::Att, i), l.attn_proj, &in);
      b.layernorm(S(K::Norm1, i), S(K::Sum1, i), l.ln_1);
      b.linear(S(K::FcPre, i), S(K::Norm1, i), l.fc);
      b.activation(S(K::FcAct, i), S(K::FcPre, i));
      const Saved norm1 = S(K::Norm1, i);
      b.linear(S(K::Sum2, i), S(K::FcAct, i), l.mlp_proj, &norm1);
      b.layernorm(out, S(K::Sum2, i), l.ln_2);
    }
  }
  const Saved top = c.final_norm ? S(K::NormF) : S(K::In, L);
  if (c.final_norm) b.layernorm(top, S(K::In, L), w.ln_f);
  b.linear(S(K::Logits), top, w.head);
  b.cross_entropy(S(K::Logits));
  if (!backward) return;

  // Backward: the head, ln_f, then the blocks from the last, then the embedding. Grad::X holds
  // d loss / d (the stream at the current point) throughout.
  const Grad X = Grad::X, H = Grad::H, A = Grad::A, F = Grad::F, QKV = Grad::QKV;
  b.linear_backward(c.final_norm ? &H : &X, S(K::Logits), top, w.head, dw.head);
  if (c.final_norm) b.layernorm_backward(X, H, S(K::In, L), w.ln_f, dw.ln_f);
  for (uint32_t i = L; i-- > 0;) {
    const Block<W>& l = w.layers[i];
    const Block<W>& d = dw.layers[i];
    const Saved in = S(K::In, i);
    if (c.attention_only) {
      // out = in + proj(att): X flows to in unchanged, and through the attention.
      b.linear_backward(&A, X, S(K::Att, i), l.attn_proj, d.attn_proj);
      b.attention_backward(QKV, A, S(K::Qkv, i));
      b.linear_backward(&H, QKV, in, l.c_attn, d.c_attn);
      b.add(X, H);
    } else if (c.pre_norm) {
      // out = sum1 + proj(act(fc(ln_2(sum1))))
      b.linear_backward(&F, X, S(K::FcAct, i), l.mlp_proj, d.mlp_proj);
      b.activation_backward(F, F, S(K::FcPre, i));
      b.linear_backward(&H, F, S(K::Norm2, i), l.fc, d.fc);
      b.layernorm_backward(A, H, S(K::Sum1, i), l.ln_2, d.ln_2);
      b.add(X, A);  // X is now d / d sum1
      // sum1 = in + proj(attn(c_attn(ln_1(in))))
      b.linear_backward(&A, X, S(K::Att, i), l.attn_proj, d.attn_proj);
      b.attention_backward(QKV, A, S(K::Qkv, i));
      b.linear_backward(&H, QKV, S(K::Norm1, i), l.c_attn, d.c_attn);
      b.layernorm_backward(A, H, in, l.ln_1, d.ln_1);
      b.add(X, A);
    } else {
      // out = ln_2(sum2), sum2 = norm1 + proj(act(fc(norm1)))
      b.layernorm_backward(H, X, S(K::Sum2, i), l.ln_2, d.ln_2);  // H = d / d sum2
      b.linear_backward(&F, H, S(K::FcAct, i), l.mlp_proj, d.mlp_proj);
      b.activation_backward(F, F, S(K::FcPre, i));
      b.linear_backward(&X, F, S(K::Norm1, i), l.fc, d.fc);
      b.add(X, H);  // d / d norm1: through the MLP and the residual
      // norm1 = ln_1(sum1), sum1 = in + proj(attn(c_attn(in)))
      b.layernorm_backward(H, X, S(K::Sum1, i), l.ln_1, d.ln_1);  // H = d / d sum1
      b.linear_backward(&A, H, S(K::Att, i), l.attn_proj, d.attn_proj);
      b.attention_backward(QKV, A, S(K::Qkv, i));
      b.linear_backward(&X, QKV, in, l.c_attn, d.c_attn);
      b.add(X, H);
    }
  }
  b.embed_backward(X);
}

}  // namespace model::training
