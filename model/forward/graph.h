// The model, once: the sequence of ops of a forward pass, written against a backend so the
// same description drives the CPU reference (cpu_model.cpp) and the GPU recording
// (gpu_model.cpp). This is the one place to read the architecture. A fusion a backend may
// perform is a named step here (norm_linear, attention_store, argmax_head); the CPU reference
// runs each unfused, and no backend reorders what this file says.
#pragma once
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
  QKV,     // [T, 3C] the fused query/key/value projection
  ATT,     // [T, C] attention output, heads side by side
  FC,      // [T, n_inner] the MLP's hidden layer
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
  W gamma, beta;  // [C]
};

template <class W>
struct Block {
  Norm<W> ln_1;
  Linear<W> c_attn;     // [C, 3C]
  Linear<W> attn_proj;  // [C, C]
  Norm<W> ln_2;
  Linear<W> fc;        // [C, n_inner]
  Linear<W> mlp_proj;  // [n_inner, C]
};

template <class W>
struct ModelWeights {
  W wte;  // [V, C]
  W wpe;  // [n_ctx, C], learned positions only
  Norm<W> ln_f;
  Linear<W> head;  // [V, C] as NK: wte when tied, else lm_head.weight; no bias
  std::vector<Block<W>> layers;
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
  const uint32_t C = c.n_embd, F = c.n_inner;
  auto linear = [&](const std::string& name, uint32_t K, uint32_t N) {
    return Linear<W>{get(name + ".weight"), get(name + ".bias"), K, N, WeightLayout::KN};
  };
  auto norm = [&](const std::string& name) {
    return Norm<W>{get(name + ".weight"), get(name + ".bias")};
  };
  ModelWeights<W> m;
  m.wte = get("wte.weight");
  m.wpe = get("wpe.weight");
  m.ln_f = norm("ln_f");
  m.head = {c.tie_word_embeddings ? m.wte : get("lm_head.weight"), W{}, C, c.n_vocab,
            WeightLayout::NK};
  for (uint32_t i = 0; i < c.n_layer; i++) {
    const std::string h = "h." + std::to_string(i) + ".";
    m.layers.push_back({norm(h + "ln_1"), linear(h + "attn.c_attn", C, 3 * C),
                        linear(h + "attn.c_proj", C, C), norm(h + "ln_2"),
                        linear(h + "mlp.c_fc", C, F), linear(h + "mlp.c_proj", F, C)});
  }
  return m;
}

// One forward pass over T new tokens at positions [pos, pos + T), their ids already in the
// backend. Keys and values go into the cache; attention reads the cache's first pos + T rows.
//
// The backend provides, with W its weight handle:
//   embed(T, pos)                               X = wte[ids] + positions
//   layernorm(out, in, norm, T)                 per row
//   linear(out, in, lin, T, epilogue = {}, in_row = 0)
//                                               out = epilogue(in[in_row..] W + b), T rows
//   norm_linear(out, in, norm, lin, T, epilogue = {}, in_row = 0)
//                                               H = norm(in) (rows up to in_row + T), then
//                                               linear(out, H, ...): H is scratch that a fused
//                                               kernel may skip
//   attention_store(layer, T, pos)              QKV's keys and values into the cache at pos,
//                                               then attention of its queries -> ATT
//   argmax_head(in, lin, row)                   the best id of in[row] W (logits not kept)
//   tap(layer, T)                               X after block `layer` (for comparisons)
template <class Backend, class W>
void forward(Backend& b, const Config& c, const ModelWeights<W>& w, uint32_t T, uint32_t pos,
             Head head) {
  const Buf X = Buf::X, H = Buf::H, QKV = Buf::QKV, ATT = Buf::ATT, FC = Buf::FC;
  const Epilogue act = activation(c.activation);  // the MLP's: GELU (tanh or erf) or ReLU

  b.embed(T, pos);
  for (uint32_t i = 0; i < c.n_layer; i++) {
    const Block<W>& l = w.layers[i];
    if (c.attention_only) {  // x = x + attn(x)
      b.linear(QKV, X, l.c_attn, T);
      b.attention_store(i, T, pos);
      b.linear(X, ATT, l.attn_proj, T, residual(X));
    } else if (c.pre_norm) {  // GPT-2: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
      b.norm_linear(QKV, X, l.ln_1, l.c_attn, T);
      b.attention_store(i, T, pos);
      b.linear(X, ATT, l.attn_proj, T, residual(X));
      b.norm_linear(FC, X, l.ln_2, l.fc, T, act);
      b.linear(X, FC, l.mlp_proj, T, residual(X));
    } else {  // Add & Norm (2017): x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))
      b.linear(QKV, X, l.c_attn, T);
      b.attention_store(i, T, pos);
      b.linear(H, ATT, l.attn_proj, T, residual(X));
      b.layernorm(X, H, l.ln_1, T);
      b.linear(FC, X, l.fc, T, act);
      b.linear(H, FC, l.mlp_proj, T, residual(X));
      b.layernorm(X, H, l.ln_2, T);
    }
    b.tap(i, T);
  }

  // The head, after ln_f where the model has one: the logits of every row or of the last, or
  // only the last row's best id.
  if (head == Head::None) return;
  const uint32_t rows = head == Head::AllRows ? T : 1;
  if (head == Head::LastArgmax) {
    Buf top = X;
    if (c.final_norm) {
      b.layernorm(H, X, w.ln_f, T);
      top = H;
    }
    b.argmax_head(top, w.head, T - 1);
  } else if (c.final_norm) {
    b.norm_linear(Buf::LOGITS, X, w.ln_f, w.head, rows, {}, T - rows);
  } else {
    b.linear(Buf::LOGITS, X, w.head, rows, {}, T - rows);
  }
}

}  // namespace model
