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
#include <stdexcept>

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
  Logits,  // [N, V], turned into their gradient in place
  // An encoder-decoder's (seq2seq_train_step), over the source's rows, for the decoder's
  // cross-attention sublayer {layer, sub}: its keys and values [B S, A], projected from the
  // encoder's output; then their gradients, which the decoder's backward leaves for the
  // encoder's.
  SourceK,
  SourceV,
  SourceDK,
  SourceDV,
};
struct Saved {
  Kept kind;
  uint32_t layer = 0, sub = 0;
  auto operator<=>(const Saved&) const = default;
};
// Which rows the ops run over: a decoder's (or a lone stack's) N = B T, or an encoder-decoder's
// source, B S. Each has its own Saved and Grad buffers (the encoder's activations are the
// source's), except the Source* kinds, always the source's.
enum class Rows : uint8_t { Target, Source };
// The rows whose buffer holds s while the ops run over `now`'s.
inline Rows rows_of(Saved s, Rows now) {
  const bool source = s.kind == Kept::SourceK || s.kind == Kept::SourceV ||
                      s.kind == Kept::SourceDK || s.kind == Kept::SourceDV;
  return source ? Rows::Source : now;
}

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

// The backward's scratch, all [N, C] unless noted, one set per Rows.
enum class Grad {
  X,    // the gradient of the residual stream, carried down the layers
  H,    // a norm's input gradient, added to X (or a sum's gradient, post-norm)
  A,    // attention's output gradient
  QKV,  // [N, 3C]; cross-attention's dq [N, A]
  F,    // [N, F] the MLP's hidden gradient
};

// Floats per token of each buffer.
inline uint32_t width(const Config& c, Saved s) {
  switch (s.kind) {
    case Kept::Mid:
    case Kept::Inner: {
      const Body body = block_layout(c).at(s.sub).body;
      if (body == Body::Mlp) return c.n_inner;
      if (body == Body::CrossAttention) return c.attn_width();
      return s.kind == Kept::Mid ? 3 * c.n_embd : c.n_embd;
    }
    case Kept::Logits: return c.n_vocab;
    case Kept::SourceK:
    case Kept::SourceV:
    case Kept::SourceDK:
    case Kept::SourceDV:
      return c.attn_width();
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

// An encoder-decoder's backend (seq2seq_train_step) adds, over the same buffers:
//   rows(r)                                  the ops that follow run over r's rows, with its
//                                            stack's config: Target (the decoder's B T) or
//                                            Source (the encoder's B S, the source ids)
//   cross_attention(out, q)                  q = {Mid, layer, sub} of Target's rows attends to
//                                            each sequence's source {SourceK, SourceV, layer,
//                                            sub} (not causal)
//   cross_attention_backward(dq, dout, q)    dq (Target's rows, [N, A]) written, and the
//                                            source's {SourceDK, SourceDV, layer, sub}
//   embed_backward(dout, dwte, dwpe)         over the rows' own ids (source or target)
// The encoder's ops then run with the encoder's config and the source ids.
template <class B, class W>
concept Seq2SeqTrainBackend = TrainBackend<B, W> && requires(B& b, Saved s, Grad g, Rows r) {
  b.rows(r);
  b.cross_attention(s, s);
  b.cross_attention_backward(g, g, s);
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
  } else if (s.kind.body == Body::CrossAttention) {
    if constexpr (Seq2SeqTrainBackend<Backend, W>) {
      b.cross_attention(S(Kept::Inner), S(Kept::Mid));
    } else {
      throw std::logic_error("train_graph: cross-attention needs an encoder-decoder's backend");
    }
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
    } else if (s.kind.body == Body::CrossAttention) {
      // dq into Grad::QKV; the source's dk and dv into {SourceDK, SourceDV} for the encoder's
      // backward (seq2seq_train_step).
      b.linear_backward(&A, dout, S(Kept::Inner), s.out, ds.out);
      if constexpr (Seq2SeqTrainBackend<Backend, W>) {
        b.cross_attention_backward(Grad::QKV, A, S(Kept::Mid));
      } else {
        throw std::logic_error("train_graph: cross-attention needs an encoder-decoder's backend");
      }
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

// Block i's sublayers from its input stream {Stream, i, 0}, each writing the next one's input
// and the last the next block's (not written where !write_out).
template <class W, TrainBackend<W> Backend>
void block_forward(Backend& b, const ModelWeights<W>& w, uint32_t i, bool write_out) {
  const auto& subs = w.layers[i].sublayers;
  for (uint32_t j = 0; j < subs.size(); j++) {
    const bool last = j + 1 == subs.size();
    const Saved out = last ? Saved{Kept::Stream, i + 1, 0} : Saved{Kept::Stream, i, j + 1};
    sublayer_forward(b, subs[j], i, j, out, write_out || !last);
  }
}
// Its mirror, from the last sublayer: Grad::X from d / d block i's output to d / d its input.
template <class W, TrainBackend<W> Backend>
void block_backward(Backend& b, const ModelWeights<W>& w, const ModelWeights<W>& dw, uint32_t i) {
  for (uint32_t j = static_cast<uint32_t>(w.layers[i].sublayers.size()); j-- > 0;)
    sublayer_backward(b, w.layers[i].sublayers[j], dw.layers[i].sublayers[j], i, j);
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

  // Forward, keeping every sublayer's activations (recompute: each block's input only).
  b.embed(Saved{Kept::Stream, 0, 0});
  for (uint32_t i = 0; i < L; i++) block_forward(b, w, i, true);
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
    if (recompute && i + 1 < L) block_forward(b, w, i, false);
    block_backward(b, w, dw, i);
  }
  b.embed_backward(X, dw.wte, c.positions == PositionKind::Learned ? dw.wpe : nullptr);
}

// Every cross-attention sublayer of a decoder's weights w and of its gradients dw, in layer
// order: f(layer, sub, s, ds).
template <class W, class F>
void for_each_cross_attention(const ModelWeights<W>& w, const ModelWeights<W>& dw, F f) {
  for (uint32_t i = 0; i < w.layers.size(); i++)
    for (uint32_t j = 0; j < w.layers[i].sublayers.size(); j++)
      if (w.layers[i].sublayers[j].kind.body == Body::CrossAttention)
        f(i, j, w.layers[i].sublayers[j], dw.layers[i].sublayers[j]);
}

// An encoder-decoder's step: B sources of S tokens (the backend's Source rows) and B targets of
// T tokens (its Target rows: the decoder's inputs, from decoder_start_token_id, and their next
// tokens). The encoder (ec, ew: encoder_side()'s config and weights) runs over the sources and
// its output goes through every cross-attention's key and value projections; then the decoder's
// train_step (dc, w); then, for a step, the encoder's backward from what the cross-attentions
// passed back. The embedding's gradient gathers both stacks' terms where they share it (dew.wte
// and dw.wte one tensor). No recomputation.
template <class W, Seq2SeqTrainBackend<W> Backend>
void seq2seq_train_step(Backend& b, const Config& ec, const ModelWeights<W>& ew,
                        const ModelWeights<W>& dew, const Config& dc, const ModelWeights<W>& w,
                        const ModelWeights<W>& dw, Until until = Until::Gradients) {
  const uint32_t L = ec.n_layer;
  const Saved stream_out{Kept::Stream, L, 0}, top = ec.final_norm ? Saved{Kept::NormF} : stream_out;
  b.rows(Rows::Source);
  b.embed(Saved{Kept::Stream, 0, 0});
  for (uint32_t i = 0; i < L; i++) block_forward(b, ew, i, true);
  if (ec.final_norm) b.layernorm(top, stream_out, ew.ln_f);
  for_each_cross_attention(w, dw,
                           [&](uint32_t i, uint32_t j, const Sublayer<W>& s, const Sublayer<W>&) {
                             b.linear(Saved{Kept::SourceK, i, j}, top, s.source_k);
                             b.linear(Saved{Kept::SourceV, i, j}, top, s.source_v);
                           });

  b.rows(Rows::Target);
  train_step(b, dc, w, dw, until);
  if (until != Until::Gradients) return;

  // d loss / d (the encoder's output): the sum of what every cross-attention's key and value
  // projections pass back, in layer order, into acc.
  b.rows(Rows::Source);
  const Grad X = Grad::X, H = Grad::H, acc = ec.final_norm ? H : X,
             part = ec.final_norm ? Grad::A : H;
  bool first = true;
  const auto pass_back = [&](Saved dout, const Linear<W>& l, const Linear<W>& dl) {
    b.linear_backward(first ? &acc : &part, dout, top, l, dl);
    if (!first) b.add(acc, part);
    first = false;
  };
  for_each_cross_attention(
      w, dw, [&](uint32_t i, uint32_t j, const Sublayer<W>& s, const Sublayer<W>& ds) {
        pass_back(Saved{Kept::SourceDK, i, j}, s.source_k, ds.source_k);
        pass_back(Saved{Kept::SourceDV, i, j}, s.source_v, ds.source_v);
      });
  if (first) throw std::logic_error("seq2seq_train_step: a decoder without cross-attention");
  if (ec.final_norm) b.layernorm_backward(X, H, stream_out, ew.ln_f, dew.ln_f);
  for (uint32_t i = L; i-- > 0;) block_backward(b, ew, dew, i);
  b.embed_backward(X, dew.wte, ec.positions == PositionKind::Learned ? dew.wpe : nullptr);
}

}  // namespace model::training
