// Training's graph, once: the forward pass over B sequences of T tokens keeping what the backward
// needs, then the backward pass that walks it in reverse, both written against a backend so the
// same description drives the CPU reference (cpu_trainer.cpp) and the GPU recording
// (gpu_trainer.cpp). The forward is graph.h's forward() without a KV cache (every token of a
// sequence attends within it) and with each step's output kept (Saved); the backward is its
// mirror, op by op. With recomputation it keeps each block's input only and runs each block's
// forward again before its backward.
#pragma once
#include <compare>
#include <cstdint>

#include "model/forward/graph.h"

namespace model::training {

// The activations a step keeps, Saved{kind, layer, sub} for sublayer `sub` of block `layer`
// (block_layout), over N = B * T tokens.
enum class Kept {
  Stream,  // [N, C] the residual stream into the sublayer; {Stream, n_layer, 0}: after the last
  Normed,  // [N, C] NormAt::Before: norm(Stream), the body's input
  Mid,     // what the body's `in` writes: attention's Q, K, V [N, 3C]; the MLP's hidden layer
           // before its activation [N, F]
  Inner,   // what its `out` reads: attention's output [N, C]; the MLP's activated layer [N, F]
  Sum,     // [N, C] NormAt::After: Stream + out(Inner), before the norm
  NormF,   // [N, C] ln_f's output: the head's input
  Logits   // [N, V], turned into their gradient in place
};
struct Saved {
  Kept kind;
  uint32_t layer = 0, sub = 0;
  auto operator<=>(const Saved&) const = default;
};

// Where a Saved activation is stored. Without recomputation, each its own buffer. With it (issue
// 41's --recompute), only what a block's backward cannot recompute keeps a buffer of its own:
// each block's input stream {Stream, i, 0} (and the last block's output {Stream, n_layer, 0}),
// ln_f's output and the logits. Every other activation of block i is stored as block 0's, one
// block's buffers shared by all, which the backward fills again from the block's input just
// before the block's backward (train_step).
inline Saved slot(Saved s, bool recompute) {
  const bool kept = (s.kind == Kept::Stream && s.sub == 0) || s.kind == Kept::NormF ||
                    s.kind == Kept::Logits;
  return recompute && !kept ? Saved{s.kind, 0, s.sub} : s;
}

// The backward's scratch, all [N, C] unless noted.
enum class Grad {
  X,    // the gradient of the residual stream, carried down the layers
  H,    // a norm's input gradient, added to X (or a sum's gradient, post-norm)
  A,    // attention's output gradient
  QKV,  // [N, 3C]
  F,    // [N, F] the MLP's hidden gradient
};

// Floats per token of each buffer.
inline uint32_t width(const Config& c, Saved s) {
  switch (s.kind) {
    case Kept::Mid:
    case Kept::Inner: {
      const bool attn = block_layout(c).at(s.sub).body == Body::SelfAttention;
      return !attn ? c.n_inner : s.kind == Kept::Mid ? 3 * c.n_embd : c.n_embd;
    }
    case Kept::Logits: return c.n_vocab;
    default: return c.n_embd;
  }
}
inline uint32_t width(const Config& c, Grad g) {
  return g == Grad::QKV ? 3 * c.n_embd : g == Grad::F ? c.n_inner : c.n_embd;
}

// The backend of train_step(), with W its tensor handle (an empty W is an absent tensor):
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
//   embed_backward(dout, dwte, dwpe)       dwte[ids] += dout, dwpe[t] += dout (dwpe null:
//                                          no learned positions)
// Buffers are Saved or Grad values. The compiler holds each backend (CPU, GPU, the GPU's
// planner) to it.
template <class B, class W>
concept TrainBackend = requires(B& b, Saved s, Grad g, const Grad* dx, const Norm<W>& n,
                                const Linear<W>& l, W t) {
  b.embed(s);
  b.layernorm(s, s, n);
  b.linear(s, s, l, &s);
  b.activation(s, s);
  b.attention(s, s);
  b.cross_entropy(s);
  b.linear_backward(dx, g, s, l, l);
  b.linear_backward(dx, s, s, l, l);
  b.layernorm_backward(g, g, s, n, n);
  b.activation_backward(g, g, s);
  b.attention_backward(g, g, s);
  b.add(g, g);
  b.embed_backward(g, t, t);
};

// One sublayer forward, keeping what its backward reads: `out` = Stream + out(body(Normed)),
// norm(Sum) or Stream + out(body(Stream)), as graph.h's sublayer(). Without write_out, the step
// that writes `out` is left out (its backward does not read it): a block's recomputation, whose
// output the next block keeps.
template <class W, TrainBackend<W> Backend>
void sublayer_forward(Backend& b, const Sublayer<W>& s, uint32_t layer, uint32_t sub, Saved out,
                      bool write_out = true) {
  const auto S = [&](Kept k) { return Saved{k, layer, sub}; };
  const Saved in = S(Kept::Stream), x = s.kind.norm == NormAt::Before ? S(Kept::Normed) : in;
  if (s.kind.norm == NormAt::Before) b.layernorm(x, in, s.norm);
  b.linear(S(Kept::Mid), x, s.in);
  if (s.kind.body == Body::SelfAttention) {
    b.attention(S(Kept::Inner), S(Kept::Mid));
  } else {
    b.activation(S(Kept::Inner), S(Kept::Mid));
  }
  if (s.kind.norm == NormAt::After) {
    b.linear(S(Kept::Sum), S(Kept::Inner), s.out, &in);
    if (write_out) b.layernorm(out, S(Kept::Sum), s.norm);
  } else if (write_out) {
    b.linear(out, S(Kept::Inner), s.out, &in);
  }
}

// Its mirror: Grad::X holds d loss / d out on entry and d loss / d Stream on return; ds
// accumulates the sublayer's weight gradients.
template <class W, TrainBackend<W> Backend>
void sublayer_backward(Backend& b, const Sublayer<W>& s, const Sublayer<W>& ds, uint32_t layer,
                       uint32_t sub) {
  const auto S = [&](Kept k) { return Saved{k, layer, sub}; };
  const Grad X = Grad::X, H = Grad::H, A = Grad::A;
  const Saved in = S(Kept::Stream), x = s.kind.norm == NormAt::Before ? S(Kept::Normed) : in;
  // d / d x into dx from dout = d / d (the body's output).
  const auto body = [&](Grad dout, Grad dx) {
    if (s.kind.body == Body::SelfAttention) {
      b.linear_backward(&A, dout, S(Kept::Inner), s.out, ds.out);
      b.attention_backward(Grad::QKV, A, S(Kept::Mid));
      b.linear_backward(&dx, Grad::QKV, x, s.in, ds.in);
    } else {
      const Grad F = Grad::F;
      b.linear_backward(&F, dout, S(Kept::Inner), s.out, ds.out);
      b.activation_backward(F, F, S(Kept::Mid));
      b.linear_backward(&dx, F, x, s.in, ds.in);
    }
  };
  switch (s.kind.norm) {
    case NormAt::None:  // out = in + body(in)
      body(X, H);
      b.add(X, H);
      break;
    case NormAt::Before:  // out = in + body(norm(in))
      body(X, H);
      b.layernorm_backward(A, H, in, s.norm, ds.norm);
      b.add(X, A);
      break;
    case NormAt::After:  // out = norm(sum), sum = in + body(in)
      b.layernorm_backward(H, X, S(Kept::Sum), s.norm, ds.norm);  // H = d / d sum
      body(H, X);
      b.add(X, H);
      break;
  }
}

// How far train_step() goes: the logits (a sample between steps), the losses (evaluation), or
// the gradients too (a step).
enum class Until { Logits, Losses, Gradients };

// Forward then backward of one step: B sequences of T tokens whose ids (and targets) the
// backend already holds. Returns nothing: the backend's cross_entropy keeps the losses, and
// its gradients (dw) hold d(mean loss)/d(weight) afterwards (zeroed by the backend first).
// recompute: the backend stores the activations by slot(s, true), and the backward runs each
// block's forward again from its kept input before the block's backward (but the last block's,
// whose activations the forward left in the shared buffers), so that it reads what the forward
// wrote: the same ops on the same inputs, the same bits.
template <class W, TrainBackend<W> Backend>
void train_step(Backend& b, const Config& c, const ModelWeights<W>& w, const ModelWeights<W>& dw,
                Until until = Until::Gradients, bool recompute = false) {
  const uint32_t L = c.n_layer;
  const Saved stream_out{Kept::Stream, L, 0}, top = c.final_norm ? Saved{Kept::NormF} : stream_out;
  // Block i's sublayers from its input stream {Stream, i, 0}, each writing the next one's input
  // and the last the next block's (not written where !write_out).
  const auto block_forward = [&](uint32_t i, bool write_out) {
    const auto& subs = w.layers[i].sublayers;
    for (uint32_t j = 0; j < subs.size(); j++) {
      const bool last = j + 1 == subs.size();
      const Saved out = last ? Saved{Kept::Stream, i + 1, 0} : Saved{Kept::Stream, i, j + 1};
      sublayer_forward(b, subs[j], i, j, out, write_out || !last);
    }
  };

  // Forward, keeping every sublayer's activations (recompute: each block's input only).
  b.embed(Saved{Kept::Stream, 0, 0});
  for (uint32_t i = 0; i < L; i++) block_forward(i, true);
  if (c.final_norm) b.layernorm(top, stream_out, w.ln_f);
  b.linear(Saved{Kept::Logits}, top, w.head);
  if (until == Until::Logits) return;
  b.cross_entropy(Saved{Kept::Logits});
  if (until == Until::Losses) return;

  // Backward: the head, ln_f, then the sublayers from the last, then the embedding. Grad::X
  // holds d loss / d (the stream at the current point) throughout.
  const Grad X = Grad::X, H = Grad::H;
  b.linear_backward(c.final_norm ? &H : &X, Saved{Kept::Logits}, top, w.head, dw.head);
  if (c.final_norm) b.layernorm_backward(X, H, stream_out, w.ln_f, dw.ln_f);
  for (uint32_t i = L; i-- > 0;) {
    if (recompute && i + 1 < L) block_forward(i, false);
    for (uint32_t j = static_cast<uint32_t>(w.layers[i].sublayers.size()); j-- > 0;)
      sublayer_backward(b, w.layers[i].sublayers[j], dw.layers[i].sublayers[j], i, j);
  }
  b.embed_backward(X, dw.wte, c.positions == PositionKind::Learned ? dw.wpe : nullptr);
}

}  // namespace model::training
