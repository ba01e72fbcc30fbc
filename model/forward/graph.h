// The model, once: the sequence of ops of a forward pass, written against a backend so the
// same description drives the CPU reference (cpu_model.cpp) and the GPU recording
// (gpu_model.cpp). This is the one place to read the architecture. A fusion a backend may
// perform is a named step here (norm_linear, attention_store, argmax_head); the CPU reference
// runs each unfused, and no backend reorders what this file says.
#pragma once
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/formats/config.h"
#include "model/ops/types.h"

namespace model {

// The activations of a forward pass over T tokens (a backend owns them).
enum class Buf {
  X,       // [T, C] the residual stream
  H,       // [T, C] a LayerNorm's output, or a residual sum before a post-norm
  // [T, 3A] the fused query/key/value projection; cross-attention's queries [T, A]. A is the
  // attention's width (Config::attn_width()): C but in a T5 whose d_kv x num_heads is not d_model.
  QKV,
  ATT,     // [T, A] attention output, heads side by side
  FC,      // [T, n_inner] the MLP's hidden layer
  GATE,    // [T, 2 n_inner] a gated MLP's two projections side by side (Config::gated_mlp)
  LOGITS,  // [R, V] logits of the R rows asked for (all T, or the last)
};

// W is how a backend holds a tensor (a pointer to floats, a GPU weight, ...); absent tensors
// (biases of a bias-free variant, ...) are W's empty value.
template <class W>
struct Linear {  // y = x W + b: [T, K] -> [T, N]
  W w;           // [K, N] (layout KN, Conv1D) or [N, K] (NK: the head's rows are outputs)
  W b;           // [N] or empty
  uint32_t K = 0, N = 0;
  WeightLayout layout = WeightLayout::KN;  // as the checkpoint stores w
};

template <class W>
struct Norm {     // LayerNorm: gamma * normalise(x) + beta, [T, C] -> [T, C]
  W gamma, beta;  // [C]; beta empty for RMSNorm (Config::layer_norm)
};

// A block, as data: its sublayers in order, each a body between a norm and a residual.
enum class Body {
  SelfAttention,   // in: the Q, K, V projection [C, 3A]; attention; out: [A, C]
  // in: the query projection [C, A]; attention over the source's keys and values (an
  // encoder's output projected once per source: source()); out: [A, C]
  CrossAttention,
  // in: [C, F] and the config's activation, or gated ([C, 2F], then act(first F) * second F);
  // out: [F, C]
  Mlp,
};
// Where a sublayer's norm sits: before its body (pre-norm, GPT-2: x + body(norm(x))), after the
// residual sum (post-norm, the 2017 Transformer and BERT: norm(x + body(x))), or nowhere
// (x + body(x)).
enum class NormAt { None, Before, After };
struct SublayerKind {
  Body body;
  NormAt norm;
};

// The one place a block variant is described: the forward pass, the training forward and its
// backward below (train_graph.h) all walk this list.
inline std::vector<SublayerKind> block_layout(const Config& c) {
  if (c.attention_only) return {{Body::SelfAttention, NormAt::None}};
  const NormAt at = c.pre_norm ? NormAt::Before : NormAt::After;
  if (c.cross_attention) return {{Body::SelfAttention, at}, {Body::CrossAttention, at}, {Body::Mlp, at}};
  return {{Body::SelfAttention, at}, {Body::Mlp, at}};
}

template <class W>
struct Sublayer {
  SublayerKind kind;
  Norm<W> norm;   // empty where kind.norm is None
  Linear<W> in;   // [C, 3A] (self-attention), [C, A] (cross-attention's queries) or [C, F] (MLP)
  Linear<W> out;  // [A, C] or [F, C]
  // Cross-attention's key and value projections of the source, [C, A] each (else empty).
  Linear<W> source_k, source_v;
};

template <class W>
struct Block {
  std::vector<Sublayer<W>> sublayers;  // block_layout(config)'s, in its order
};

template <class W>
struct ModelWeights {
  W wte;         // [V, C]
  W wpe;         // [n_ctx, C], learned positions only
  W wtt;         // [n_types, C], token types (an encoder's segments) only
  Norm<W> ln_e;  // over the embedding sum (an encoder's), or empty
  Norm<W> ln_f;  // a decoder's before its head; an encoder's over its output (T5)
  // [H, relative_bias_span(c)]: the stack's relative position bias per head and key - query
  // (relative_bias.h), which the backends expand from rel_bias.weight [buckets, H] as they load
  // it; empty without Config::relative_buckets.
  W rel_bias;
  // [V, C] as NK: wte when tied, else lm_head.weight; a bias after a masked-LM transform
  // (mlm.bias) or where the config has logits_bias (head.bias, Marian's final_logits_bias)
  Linear<W> head;
  std::vector<Block<W>> layers;
  // An encoder's task heads (Config::head), each empty where the config has another.
  Linear<W> mlm_dense;  // [C, C], then the activation and mlm_ln, then head
  Norm<W> mlm_ln;
  Linear<W> pooler;      // [C, C] on row 0, then tanh
  Linear<W> classifier;  // [C, labels]
};

// What a linear layer adds after x W + b: an activation, then a residual stream.
struct Epilogue {
  Activation act = Activation::None;
  std::optional<Buf> residual;  // out += residual (may be out itself: the in-place stream)
};
inline Epilogue activation(Activation a) {
  return {a, std::nullopt};
}
inline Epilogue residual(Buf r) {
  return {Activation::None, r};
}

// What the head computes: every row's logits, the last row's, or only the last row's best id;
// or nothing, for a prompt chunk whose logits no one asks for (model/forward/submissions.h).
enum class Head { AllRows, LastRow, LastArgmax, None };

// Fills a ModelWeights from a function of the canonical tensor name that returns W's empty
// value for a tensor the config does not have.
template <class W, class Get>
ModelWeights<W> map_weights(const Config& c, Get get) {
  const uint32_t C = c.n_embd, A = c.attn_width(), F = c.n_inner;
  auto linear = [&](const std::string& name, uint32_t K, uint32_t N) {
    return Linear<W>{get(name + ".weight"), get(name + ".bias"), K, N, WeightLayout::KN};
  };
  auto norm = [&](const std::string& name) {
    return Norm<W>{get(name + ".weight"), get(name + ".bias")};
  };
  ModelWeights<W> m;
  m.wte = get("wte.weight");
  m.wpe = get("wpe.weight");
  m.wtt = get("wtt.weight");
  m.ln_e = norm("ln_e");
  m.ln_f = norm("ln_f");
  m.rel_bias = get("rel_bias.weight");
  m.head = {c.tie_word_embeddings ? m.wte : get("lm_head.weight"),
            get(c.family == Family::Encoder ? "mlm.bias" : "head.bias"), C, c.n_vocab,
            WeightLayout::NK};
  m.mlm_dense = linear("mlm.dense", C, C);
  m.mlm_ln = norm("mlm.ln");
  m.pooler = linear("pooler", C, C);
  m.classifier = linear("classifier", C, static_cast<uint32_t>(c.labels.size()));
  // GPT-2's names: attention's sublayer holds ln_1 and attn.*, the MLP's ln_2 and mlp.*; ours
  // for cross-attention: ln_x and cross.*.
  const std::vector<SublayerKind> layout = block_layout(c);
  for (uint32_t i = 0; i < c.n_layer; i++) {
    const std::string h = "h." + std::to_string(i) + ".";
    Block<W>& b = m.layers.emplace_back();
    for (const SublayerKind& k : layout) {
      const char* ln = k.body == Body::SelfAttention ? "ln_1" : k.body == Body::Mlp ? "ln_2" : "ln_x";
      Sublayer<W>& s = b.sublayers.emplace_back(
          Sublayer<W>{k, k.norm == NormAt::None ? Norm<W>{} : norm(h + ln), {}, {}, {}, {}});
      switch (k.body) {
        case Body::SelfAttention:
          s.in = linear(h + "attn.c_attn", C, 3 * A);
          s.out = linear(h + "attn.c_proj", A, C);
          break;
        case Body::CrossAttention:
          s.in = linear(h + "cross.c_q", C, A);
          s.out = linear(h + "cross.c_proj", A, C);
          s.source_k = linear(h + "cross.c_k", C, A);
          s.source_v = linear(h + "cross.c_v", C, A);
          break;
        case Body::Mlp:
          s.in = linear(h + "mlp.c_fc", C, c.gated_mlp ? 2 * F : F);
          s.out = linear(h + "mlp.c_proj", F, C);
          break;
      }
    }
  }
  return m;
}

// The backend of forward(), with W its weight handle:
//   embed(out, T, pos)                          out = wte[ids] (+ wtt[types]) + positions
//   layernorm(out, in, norm, T)                 per row
//   gated_activation(out, in, T, act)           out[t, f] = act(in[t, f]) * in[t, F + f]
//   linear(out, in, lin, T, epilogue, in_row)   out = epilogue(in[in_row..] W + b), T rows
//   norm_linear(out, in, norm, lin, T, epilogue, in_row)
//                                               H = norm(in) (rows up to in_row + T), then
//                                               linear(out, H, ...): H is scratch that a fused
//                                               kernel may skip
//   attention_store(layer, T, pos)              QKV's keys and values into the cache at pos,
//                                               then attention of its queries -> ATT (with
//                                               the stack's rel_bias where it has one)
//   source_store(layer, k, v, S)                X's S rows (the encoder's output) through k
//                                               and v into the layer's source caches
//   cross_attention(layer, T)                   attention of QKV's T queries ([T, A]) over
//                                               the source caches -> ATT
//   argmax_head(in, lin, row)                   the best id of in[row] W (logits not kept)
//   tap(layer, T)                               X after block `layer` (for comparisons)
// The compiler holds each backend (CPU, GPU) to it.
template <class B, class W>
concept ForwardBackend = requires(B& b, Buf buf, const Norm<W>& n, const Linear<W>& l,
                                  const Epilogue& e, uint32_t u) {
  b.embed(buf, u, u);
  b.layernorm(buf, buf, n, u);
  b.gated_activation(buf, buf, u, Activation::None);
  b.linear(buf, buf, l, u, e, u);
  b.norm_linear(buf, buf, n, l, u, e, u);
  b.attention_store(u, u, u);
  b.source_store(u, l, l, u);
  b.cross_attention(u, u);
  b.argmax_head(buf, l, u);
  b.tap(u, u);
};

// One sublayer over the stream X, in place: X = X + body(norm(X)), norm(X + body(X)) or
// X + body(X) (Sublayer::kind).
template <class W, ForwardBackend<W> Backend>
void sublayer(Backend& b, const Config& c, const Sublayer<W>& s, uint32_t layer, uint32_t T,
              uint32_t pos) {
  const Buf X = Buf::X, H = Buf::H;
  const bool attn = s.kind.body != Body::Mlp;
  const bool gated = !attn && c.gated_mlp;
  const Buf mid = attn ? Buf::QKV : gated ? Buf::GATE : Buf::FC;  // what `in` writes
  const Buf inner = attn ? Buf::ATT : Buf::FC;                     // what `out` reads
  // The MLP's GELU or ReLU in the epilogue, or after it on both halves of a gated one.
  const Epilogue e = attn || gated ? Epilogue{} : activation(c.activation);
  if (s.kind.norm == NormAt::Before) {
    b.norm_linear(mid, X, s.norm, s.in, T, e);
  } else {
    b.linear(mid, X, s.in, T, e);
  }
  if (gated) b.gated_activation(Buf::FC, Buf::GATE, T, c.activation);
  if (s.kind.body == Body::SelfAttention) b.attention_store(layer, T, pos);
  if (s.kind.body == Body::CrossAttention) b.cross_attention(layer, T);
  if (s.kind.norm == NormAt::After) {
    b.linear(H, inner, s.out, T, residual(X));
    b.layernorm(X, H, s.norm, T);
  } else {
    b.linear(X, inner, s.out, T, residual(X));
  }
}

// An encoder's task head over its hidden states X, which it leaves as they are:
// LOGITS [c.head_rows(T), c.head_width()].
template <class W, ForwardBackend<W> Backend>
void encoder_head(Backend& b, const Config& c, const ModelWeights<W>& w, uint32_t T) {
  switch (c.head) {
    case EncoderHead::None: return;
    case EncoderHead::MaskedLm:  // LayerNorm(act(X Wd + bd)) wte^T + bias
      // ATT as a [T, C] scratch: an encoder with a head is BERT's, whose A is C.
      b.linear(Buf::H, Buf::X, w.mlm_dense, T, activation(c.activation));
      b.layernorm(Buf::ATT, Buf::H, w.mlm_ln, T);
      b.linear(Buf::LOGITS, Buf::ATT, w.head, T);
      return;
    case EncoderHead::SequenceClassification:  // tanh(X[0] Wp + bp) Wc + bc
      b.linear(Buf::H, Buf::X, w.pooler, 1, activation(Activation::Tanh));
      b.linear(Buf::LOGITS, Buf::H, w.classifier, 1);
      return;
    case EncoderHead::TokenClassification:
      b.linear(Buf::LOGITS, Buf::X, w.classifier, T);
      return;
  }
}

// Where an encoder's pass leaves its output: X, or H after a final norm (T5).
inline Buf encoder_output(const Config& c) {
  return c.final_norm ? Buf::H : Buf::X;
}

// A decoder's source pass (Config::cross_attention): the encoder's output, S rows in X, projected
// into every layer's source keys and values, which its cross-attention then reads at every step.
template <class W, ForwardBackend<W> Backend>
void source(Backend& b, const ModelWeights<W>& w, uint32_t S) {
  for (uint32_t i = 0; i < w.layers.size(); i++)
    for (const Sublayer<W>& s : w.layers[i].sublayers)
      if (s.kind.body == Body::CrossAttention) b.source_store(i, s.source_k, s.source_v, S);
}

// One forward pass over T new tokens at positions [pos, pos + T), their ids (and an encoder's
// token types) already in the backend. Keys and values go into the cache; attention reads the
// cache's first pos + T rows. An encoder's pass is a whole sequence (pos 0); its head is
// Config::head's, or none with Head::None.
template <class W, ForwardBackend<W> Backend>
void forward(Backend& b, const Config& c, const ModelWeights<W>& w, uint32_t T, uint32_t pos,
             Head head) {
  if (c.embedding_norm) {  // BERT: a LayerNorm over the embedding sum
    b.embed(Buf::H, T, pos);
    b.layernorm(Buf::X, Buf::H, w.ln_e, T);
  } else {
    b.embed(Buf::X, T, pos);
  }
  for (uint32_t i = 0; i < c.n_layer; i++) {
    for (const Sublayer<W>& s : w.layers[i].sublayers) sublayer(b, c, s, i, T, pos);
    b.tap(i, T);
  }
  if (c.family == Family::Encoder) {
    if (c.final_norm) b.layernorm(Buf::H, Buf::X, w.ln_f, T);  // T5's: encoder_output()
    if (head != Head::None) encoder_head(b, c, w, T);
    return;
  }

  // The head, after ln_f where the model has one: the logits of every row or of the last, or
  // only the last row's best id.
  if (head == Head::None) return;
  const uint32_t rows = head == Head::AllRows ? T : 1;
  if (head == Head::LastArgmax) {
    Buf top = Buf::X;
    if (c.final_norm) {
      b.layernorm(Buf::H, Buf::X, w.ln_f, T);
      top = Buf::H;
    }
    b.argmax_head(top, w.head, T - 1);
  } else if (c.final_norm) {
    b.norm_linear(Buf::LOGITS, Buf::X, w.ln_f, w.head, rows, {}, T - rows);
  } else {
    b.linear(Buf::LOGITS, Buf::X, w.head, rows, {}, T - rows);
  }
}

}  // namespace model
