// The CPU reference forward pass: graph.h over the model::cpu ops, in double accumulation.
#include "model/forward/cpu_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "model/forward/cpu_model.h"
#include "model/formats/checkpoint.h"
#include "model/ops/cpu/gated_activation.h"
#include "model/ops/cpu/attention.h"
#include "model/ops/cpu/common.h"
#include "model/ops/cpu/embedding.h"
#include "model/ops/cpu/kv_store.h"
#include "model/ops/cpu/layernorm.h"
#include "model/ops/cpu/matmul.h"
#include "model/ops/cpu/topk.h"
#include "model/forward/graph.h"
#include "model/forward/encoder.h"
#include "model/forward/model.h"
#include "model/formats/relative_bias.h"

namespace model {
namespace {

// A pass's buffers: host vectors the model keeps between passes (the caches) or refills.
struct CpuState {
  std::vector<int32_t> ids;                           // [T]
  std::vector<int32_t> types;                         // [T] an encoder's token types
  std::vector<float> x, h;                            // [T, C]
  std::vector<float> att;                             // [T, A] (A: Config::attn_width())
  std::vector<float> qkv;                             // [T, 3A]
  std::vector<float> fc;                              // [T, F]
  std::vector<float> gate;                            // [T, 2F] (a gated MLP)
  std::vector<float> logits;                          // [rows, V] (an encoder's head: its width)
  std::vector<std::vector<float>> k_cache, v_cache;  // [layer][n_ctx, A]
  // A decoder's source keys and values (cross-attention): [layer][S, A], S = source_len.
  std::vector<std::vector<float>> source_k, source_v;
  uint32_t source_len = 0;
  int32_t argmax = -1;                                // argmax_head's id
};

// What a pass taps: X after each block, the softmax of the layers marked in `attention_of`.
struct CpuPass {
  std::vector<std::vector<float>>* taps = nullptr;       // [layer][T, C], or none
  std::vector<std::vector<float>>* attention = nullptr;  // [layer][H, T, L], or none
  std::vector<std::vector<float>>* cross = nullptr;      // [layer][H, T, S], or none
  std::vector<bool> attention_of;                        // [layer]
};

// The backend model/graph.h drives: ops of model::cpu on the state's vectors.
struct CpuBackend {
  const Config& c;
  const ModelWeights<const float*>& w;
  DType kv_cache;  // the cache's rounding (cpu::kv_store)
  CpuState& s;
  const CpuPass& pass;
  float* buf(Buf b);
  void embed(Buf out, uint32_t T, uint32_t pos);
  void layernorm(Buf out, Buf in, const Norm<const float*>& n, uint32_t T);
  void gated_activation(Buf out, Buf in, uint32_t T, Activation act);
  void linear(Buf out, Buf in, const Linear<const float*>& l, uint32_t T, const Epilogue& e = {},
              uint32_t in_row = 0);
  void norm_linear(Buf out, Buf in, const Norm<const float*>& n, const Linear<const float*>& l,
                   uint32_t T, const Epilogue& e = {}, uint32_t in_row = 0);
  void attention_store(uint32_t layer, uint32_t T, uint32_t pos);
  void source_store(uint32_t layer, const Linear<const float*>& k, const Linear<const float*>& v,
                    uint32_t S);
  void cross_attention(uint32_t layer, uint32_t T);
  void argmax_head(Buf in, const Linear<const float*>& l, uint32_t row);
  void tap(uint32_t layer, uint32_t T);
};

class CpuModel final : public Model {
 public:
  CpuModel(const Checkpoint& ckpt, Precision precision, Precision kv_cache)
      : config_(ckpt.config()),
        precision_(precision),
        kv_cache_(kv_cache == Precision::F16 ? DType::F16 : DType::F32) {
    const Config& c = config_;
    // Matrices rounded to fp16 as the GPU stores them; vectors (LayerNorm, biases) stay fp32.
    for (const ExpectedTensor& e : expected_tensors(c)) {
      const TensorView& t = ckpt.tensor(e.name);
      std::vector<float> v = to_f32(t);
      const bool f16 = precision == Precision::F16 && e.matrix();
      if (f16)
        for (float& x : v) x = cpu::round_to_half(x);
      uint64_t bad = 0;
      for (float x : v) bad += !std::isfinite(x);
      warn_nonfinite(ckpt, e.name, bad, v.size(),
                     f16 && t.dtype != TensorDType::F16 ? "f16" : nullptr);
      tensors_[e.name] = std::move(v);
    }
    weights_ = map_weights<const float*>(c, [&](const std::string& name) -> const float* {
      auto it = tensors_.find(name);
      return it == tensors_.end() ? nullptr : it->second.data();
    });
    const size_t A = c.attn_width(), T = c.n_ctx;
    s_.k_cache.assign(c.n_layer, std::vector<float>(T * A));
    s_.v_cache.assign(c.n_layer, std::vector<float>(T * A));
    if (c.cross_attention) {
      s_.source_k.assign(c.n_layer, std::vector<float>(T * A));
      s_.source_v.assign(c.n_layer, std::vector<float>(T * A));
    }
  }

  const Config& config() const override { return config_; }
  std::string device_name() const override { return "CPU reference"; }
  Precision precision() const override { return precision_; }

  // An encoder's pass (EncoderOver<CpuModel>): the whole sequence from position 0.
  void encode(std::span<const int32_t> ids, std::span<const int32_t> types, bool head,
              Encoded& out) {
    const Config& c = config_;
    const auto T = static_cast<uint32_t>(ids.size());
    start(ids, head ? size_t{c.head_rows(T)} * c.head_width() : 0);
    s_.types.assign(types.begin(), types.end());
    CpuPass pass;
    tap_attention(pass);
    CpuBackend b{c, weights_, kv_cache_, s_, pass};
    forward(b, c, weights_, T, 0, head ? Head::AllRows : Head::None);
    const float* hidden = b.buf(encoder_output(c));
    out.hidden.assign(hidden, hidden + size_t{T} * c.n_embd);
    out.logits = s_.logits;
  }

 protected:
  void run_source(std::span<const float> hidden, uint32_t S) override {
    s_.x.assign(hidden.begin(), hidden.end());
    CpuPass pass;
    CpuBackend b{config_, weights_, kv_cache_, s_, pass};
    source(b, weights_, S);
    s_.source_len = S;
  }

  void run(std::span<const int32_t> ids, bool all_rows, uint32_t k, std::vector<float>& logits,
           std::vector<int32_t>& top_ids) override {
    const Config& c = config_;
    const size_t T = ids.size(), V = c.n_vocab;
    start(ids, (all_rows ? T : 1) * V);
    CpuPass pass;
    if (taps_on_) {
      taps_.assign(c.n_layer, {});
      pass.taps = &taps_;
    }
    if (all_rows) tap_attention(pass);
    CpuBackend b{c, weights_, kv_cache_, s_, pass};
    // Greedy decoding takes the argmax head, as the GPU's CPU kernel set does.
    const Head head = all_rows ? Head::AllRows : k == 1 ? Head::LastArgmax : Head::LastRow;
    forward(b, c, weights_, static_cast<uint32_t>(T), length(), head);
    if (head == Head::LastArgmax) {
      top_ids.assign(1, s_.argmax);
      logits = s_.logits;
      return;
    }
    if (all_rows || k == 0) {
      logits = s_.logits;
      return;
    }
    top_ids.resize(k);
    logits.resize(k);
    cpu::topk(top_ids.data(), logits.data(), s_.logits.data(), V, k);
  }

 private:
  // With the attention tap on, this pass keeps the tapped layers' weights in attention_.
  void tap_attention(CpuPass& pass) {
    attention_.clear();
    cross_attention_.clear();
    if (!attention_on_) return;
    attention_.assign(config_.n_layer, {});
    pass.attention = &attention_;
    if (config_.cross_attention) {
      cross_attention_.assign(config_.n_layer, {});
      pass.cross = &cross_attention_;
    }
    for (uint32_t i = 0; i < config_.n_layer; i++) pass.attention_of.push_back(attention_tapped(i));
  }

  // A pass's buffers for ids, its head's output `logits` floats.
  void start(std::span<const int32_t> ids, size_t logits) {
    const Config& c = config_;
    const size_t T = ids.size(), C = c.n_embd, A = c.attn_width();
    s_.ids.assign(ids.begin(), ids.end());
    s_.x.assign(T * C, 0);
    s_.h.assign(T * C, 0);
    s_.att.assign(T * A, 0);
    s_.qkv.assign(T * 3 * A, 0);
    s_.fc.assign(T * c.n_inner, 0);
    s_.gate.assign(c.gated_mlp ? 2 * T * c.n_inner : 0, 0);
    s_.logits.assign(logits, 0);
  }

  Config config_;
  Precision precision_;
  DType kv_cache_;  // the cache's rounding (cpu::kv_store)
  std::map<std::string, std::vector<float>> tensors_;
  ModelWeights<const float*> weights_;
  CpuState s_;
};

float* CpuBackend::buf(Buf b) {
  switch (b) {
    case Buf::X: return s.x.data();
    case Buf::H: return s.h.data();
    case Buf::QKV: return s.qkv.data();
    case Buf::ATT: return s.att.data();
    case Buf::FC: return s.fc.data();
    case Buf::GATE: return s.gate.data();
    case Buf::LOGITS: return s.logits.data();
  }
  return nullptr;
}

void CpuBackend::embed(Buf out, uint32_t T, uint32_t pos) {
  cpu::embedding(buf(out), s.ids.data(), w.wte, w.wpe, T, c.n_embd, c.n_vocab, c.n_ctx, pos,
                 c.positions, c.n_types ? s.types.data() : nullptr, w.wtt, c.n_types,
                 c.embed_scale);
}

void CpuBackend::layernorm(Buf out, Buf in, const Norm<const float*>& n, uint32_t T) {
  cpu::layernorm(buf(out), buf(in), n.gamma, n.beta, T, c.n_embd, c.layer_norm_epsilon,
                 c.layer_norm);
}

void CpuBackend::gated_activation(Buf out, Buf in, uint32_t T, Activation act) {
  cpu::gated_activation(buf(out), buf(in), T, c.n_inner, act);
}

void CpuBackend::linear(Buf out, Buf in, const Linear<const float*>& l, uint32_t T,
                        const Epilogue& e, uint32_t in_row) {
  cpu::matmul(buf(out), buf(in) + size_t(in_row) * l.K, l.w, l.b,
              e.residual ? buf(*e.residual) : nullptr, T, l.K, l.N, l.layout, e.act);
}

// Unfused: the LayerNorm's output goes through H.
void CpuBackend::norm_linear(Buf out, Buf in, const Norm<const float*>& n,
                             const Linear<const float*>& l, uint32_t T, const Epilogue& e,
                             uint32_t in_row) {
  layernorm(Buf::H, in, n, in_row + T);
  linear(out, Buf::H, l, T, e, in_row);
}

// Unfused: the row's logits, then their best id (kept as the one logit and id of the pass).
void CpuBackend::argmax_head(Buf in, const Linear<const float*>& l, uint32_t row) {
  linear(Buf::LOGITS, in, l, 1, {}, row);
  int32_t id = 0;
  float value = 0;
  cpu::topk(&id, &value, s.logits.data(), l.N, 1);
  s.logits.assign(1, value);
  s.argmax = id;
}

// The attention's width A (Config::attn_width()) is the ops' C: H heads of A / H.
void CpuBackend::attention_store(uint32_t layer, uint32_t T, uint32_t pos) {
  const size_t A = c.attn_width();
  float* kc = s.k_cache[layer].data();
  float* vc = s.v_cache[layer].data();
  cpu::kv_store(kc, vc, s.qkv.data(), T, A, pos, kv_cache);
  float* probs = nullptr;
  if (pass.attention && pass.attention_of[layer]) {
    (*pass.attention)[layer].assign(size_t{c.n_head} * T * (pos + T), 0.0f);
    probs = (*pass.attention)[layer].data();
  }
  const uint32_t span = c.relative_buckets ? relative_bias_span(c) : 0;
  cpu::attention(s.att.data(), s.qkv.data(), 3 * A, kc, vc, T, pos + T, A, c.n_head,
                 {c.causal, c.attention_scale, span}, probs, w.rel_bias);
}

void CpuBackend::source_store(uint32_t layer, const Linear<const float*>& k,
                              const Linear<const float*>& v, uint32_t S) {
  cpu::matmul(s.source_k[layer].data(), s.x.data(), k.w, k.b, nullptr, S, k.K, k.N, k.layout,
              Activation::None);
  cpu::matmul(s.source_v[layer].data(), s.x.data(), v.w, v.b, nullptr, S, v.K, v.N, v.layout,
              Activation::None);
}

// Every query sees every source row: no mask, the queries' positions play no part.
void CpuBackend::cross_attention(uint32_t layer, uint32_t T) {
  const size_t A = c.attn_width();
  float* probs = nullptr;
  if (pass.cross && pass.attention_of[layer]) {
    (*pass.cross)[layer].assign(size_t{c.n_head} * T * s.source_len, 0.0f);
    probs = (*pass.cross)[layer].data();
  }
  cpu::attention(s.att.data(), s.qkv.data(), A, s.source_k[layer].data(),
                 s.source_v[layer].data(), T, s.source_len, A, c.n_head,
                 {false, c.attention_scale}, probs);
}

void CpuBackend::tap(uint32_t layer, uint32_t T) {
  if (pass.taps) (*pass.taps)[layer].assign(s.x.begin(), s.x.begin() + static_cast<std::ptrdiff_t>(size_t{T} * c.n_embd));
}

}  // namespace

std::unique_ptr<Model> make_cpu_model(const Checkpoint& checkpoint, Precision precision,
                                      Precision kv_cache) {
  require_family(checkpoint, Family::Decoder);
  return std::make_unique<CpuModel>(checkpoint, precision, kv_cache);
}

std::unique_ptr<Encoder> make_cpu_encoder(const Checkpoint& checkpoint, Precision precision) {
  require_family(checkpoint, Family::Encoder);
  return std::make_unique<EncoderOver<CpuModel>>(checkpoint, precision, Precision::F32);
}

}  // namespace model
