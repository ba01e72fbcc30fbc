// The model, once: the sequence of ops of a forward pass, written against a backend so the
// same description drives the CPU reference (model/cpu_model.cpp) and the GPU recording
// (model/gpu_model.cpp). This is the one place to read the architecture.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/gpu/attention.h"
#include "model/gpu/matmul.h"

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

// A model's tensors as some backend holds them (W: a pointer to floats, a GPU weight, ...).
// Absent tensors (biases of a bias-free variant, ...) are W's empty value.
template <class W>
struct LayerWeights {
  W ln_1_w, ln_1_b;          // [C]
  W c_attn_w, c_attn_b;      // [C, 3C], [3C]
  W attn_proj_w, attn_proj_b;  // [C, C], [C]
  W ln_2_w, ln_2_b;          // [C]
  W fc_w, fc_b;              // [C, n_inner], [n_inner]
  W mlp_proj_w, mlp_proj_b;  // [n_inner, C], [C]
};

template <class W>
struct ModelWeights {
  W wte;             // [V, C]
  W wpe;             // [n_ctx, C], learned positions only
  W ln_f_w, ln_f_b;  // [C]
  W head;            // [V, C]: wte when tied, else lm_head.weight
  std::vector<LayerWeights<W>> layers;
};

// Fills a ModelWeights from a function of the canonical tensor name that returns W's empty
// value for a tensor the config does not have.
template <class W, class Get>
ModelWeights<W> map_weights(const Config& c, Get get) {
  ModelWeights<W> m;
  m.wte = get("wte.weight");
  m.wpe = get("wpe.weight");
  m.ln_f_w = get("ln_f.weight");
  m.ln_f_b = get("ln_f.bias");
  m.head = c.tie_word_embeddings ? m.wte : get("lm_head.weight");
  for (uint32_t i = 0; i < c.n_layer; i++) {
    const std::string h = "h." + std::to_string(i) + ".";
    m.layers.push_back({get(h + "ln_1.weight"), get(h + "ln_1.bias"), get(h + "attn.c_attn.weight"),
                        get(h + "attn.c_attn.bias"), get(h + "attn.c_proj.weight"),
                        get(h + "attn.c_proj.bias"), get(h + "ln_2.weight"), get(h + "ln_2.bias"),
                        get(h + "mlp.c_fc.weight"), get(h + "mlp.c_fc.bias"),
                        get(h + "mlp.c_proj.weight"), get(h + "mlp.c_proj.bias")});
  }
  return m;
}

// One forward pass over T new tokens at positions [pos, pos + T), their ids already in the
// backend. Keys and values go into the cache; attention reads the cache's first pos + T rows.
// last_only: logits of the last position only (generation); otherwise of all T.
//
// The backend provides, with W its weight handle:
//   embed(T, pos)                                  X = wte[ids] + positions
//   layernorm(out, in, gamma, beta, T)             per row
//   linear(out, in, w, bias, residual, T, K, N, act, layout, in_row)
//   attention(layer, T, pos)                       kv_store then attention: QKV -> ATT
//   tap(layer, T)                                  X after block `layer` (for comparisons)
// where bias may be empty, residual is a Buf or nullptr.
template <class Backend, class W>
void forward(Backend& b, const Config& c, const ModelWeights<W>& w, uint32_t T, uint32_t pos,
             bool last_only) {
  const uint32_t C = c.n_embd, F = c.n_inner;
  const Buf X = Buf::X, H = Buf::H, QKV = Buf::QKV, ATT = Buf::ATT, FC = Buf::FC;
  const gpu::Activation none = gpu::Activation::None;
  const gpu::WeightLayout kn = gpu::WeightLayout::KN;

  b.embed(T, pos);
  for (uint32_t i = 0; i < c.n_layer; i++) {
    const LayerWeights<W>& l = w.layers[i];
    if (c.attention_only) {  // x = x + attn(x)
      b.linear(QKV, X, l.c_attn_w, l.c_attn_b, nullptr, T, C, 3 * C, none, kn, 0);
      b.attention(i, T, pos);
      b.linear(X, ATT, l.attn_proj_w, l.attn_proj_b, &X, T, C, C, none, kn, 0);
    } else if (c.pre_norm) {  // GPT-2: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
      b.layernorm(H, X, l.ln_1_w, l.ln_1_b, T);
      b.linear(QKV, H, l.c_attn_w, l.c_attn_b, nullptr, T, C, 3 * C, none, kn, 0);
      b.attention(i, T, pos);
      b.linear(X, ATT, l.attn_proj_w, l.attn_proj_b, &X, T, C, C, none, kn, 0);
      b.layernorm(H, X, l.ln_2_w, l.ln_2_b, T);
      b.linear(FC, H, l.fc_w, l.fc_b, nullptr, T, C, F, c.activation, kn, 0);
      b.linear(X, FC, l.mlp_proj_w, l.mlp_proj_b, &X, T, F, C, none, kn, 0);
    } else {  // Add & Norm (2017): x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))
      b.linear(QKV, X, l.c_attn_w, l.c_attn_b, nullptr, T, C, 3 * C, none, kn, 0);
      b.attention(i, T, pos);
      b.linear(H, ATT, l.attn_proj_w, l.attn_proj_b, &X, T, C, C, none, kn, 0);
      b.layernorm(X, H, l.ln_1_w, l.ln_1_b, T);
      b.linear(FC, X, l.fc_w, l.fc_b, nullptr, T, C, F, c.activation, kn, 0);
      b.linear(H, FC, l.mlp_proj_w, l.mlp_proj_b, &X, T, F, C, none, kn, 0);
      b.layernorm(X, H, l.ln_2_w, l.ln_2_b, T);
    }
    b.tap(i, T);
  }

  // The head reads the final LayerNorm's output (or x), all rows or only the last.
  const uint32_t rows = last_only ? 1 : T, first = last_only ? T - 1 : 0;
  Buf top = X;
  if (c.final_norm) {
    b.layernorm(H, X, w.ln_f_w, w.ln_f_b, T);
    top = H;
  }
  b.linear(Buf::LOGITS, top, w.head, W{}, nullptr, rows, C, c.n_vocab, none,
           gpu::WeightLayout::NK, first);
}

}  // namespace model
