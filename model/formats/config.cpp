// config.json: Hugging Face's GPT-2 keys and our variant keys, every value checked.
#include "model/formats/config.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "model/formats/json_util.h"

namespace model {

using nlohmann::json;

namespace {

// Limits well above any real model, low enough that sizes computed from them cannot overflow.
constexpr uint64_t kMaxVocab = 1u << 24;
constexpr uint64_t kMaxCtx = 1u << 20;
constexpr uint64_t kMaxEmbd = 65536;
constexpr uint64_t kMaxLayer = 1024;
constexpr uint64_t kMaxInner = 1u << 20;

// A value for a message: scalars as written, containers by kind (never dumped: they may be deep).
std::string describe(const json& v) {
  if (v.is_string()) return "string " + json_util::show(v.get_ref<const std::string&>(), 40);
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return v.dump();
}

// One config.json, read key by key; every problem throws "<file>: <key>: <problem>".
class Reader {
 public:
  Reader(const json& j, const std::string& file) : j_(j), file_(file) {}

  [[noreturn]] void fail(std::string_view key, const std::string& problem) const {
    throw std::runtime_error(file_ + ": " + std::string(key) + ": " + problem);
  }

  // The value, or nullptr where the key is absent or null (Hugging Face writes null for "unset").
  const json* get(std::string_view key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  // Whether the key is there with null: Hugging Face's None, where the absent key means a default.
  bool is_null(std::string_view key) const {
    const auto it = j_.find(key);
    return it != j_.end() && it->is_null();
  }

  uint32_t count(std::string_view key, uint64_t max, std::optional<uint32_t> fallback = {}) const {
    const json* v = get(key);
    if (!v) {
      if (fallback) return *fallback;
      fail(key, "missing");
    }
    if (v->is_number_integer() && !v->is_number_unsigned())
      fail(key, "must be at least 1, got " + v->dump());
    if (!v->is_number_unsigned()) fail(key, "must be an integer, got " + describe(*v));
    const uint64_t n = v->get<uint64_t>();
    if (n == 0) fail(key, "must be at least 1, got 0");
    if (n > max) fail(key, std::to_string(n) + " is larger than the limit " + std::to_string(max));
    return static_cast<uint32_t>(n);
  }

  bool flag(std::string_view key, bool fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + describe(*v));
    return v->get<bool>();
  }

  // A finite number > 0 that stays so as a float.
  std::optional<float> positive(std::string_view key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) fail(key, "must be a number, got " + describe(*v));
    const double d = v->get<double>();
    const auto f = static_cast<float>(d);
    if (!(d > 0) || !std::isfinite(f) || !(f > 0))
      fail(key, "must be a finite number > 0 (as a float), got " + v->dump());
    return f;
  }

  std::optional<std::string> text(std::string_view key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(key, "must be a string, got " + describe(*v));
    return v->get<std::string>();
  }

  // One of the names in `choices` (pairs of name, value); `fallback` when absent.
  template <class T>
  T choice(std::string_view key, T fallback,
           std::initializer_list<std::pair<const char*, T>> choices) const {
    const auto s = text(key);
    if (!s) return fallback;
    std::string names;
    for (const auto& [name, value] : choices) {
      if (*s == name) return value;
      names += (names.empty() ? "" : ", ") + std::string(name);
    }
    fail(key, "unknown value " + json_util::show(*s, 40) + " (expected one of: " + names + ")");
  }

 private:
  const json& j_;
  const std::string& file_;
};

// The code points of valid UTF-8 text (nlohmann has validated it), each as its bytes.
std::vector<std::string> split_utf8(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
    out.push_back(s.substr(i, n));  // substr clamps at the end: never reads past it
    i += n;
  }
  return out;
}

TokenizerSpec read_tokenizer(const Reader& r, uint32_t n_vocab) {
  TokenizerSpec spec;
  spec.kind = r.choice("tokenizer", TokenizerKind::Gpt2,
                       {{"gpt2", TokenizerKind::Gpt2},
                        {"bytes", TokenizerKind::Bytes},
                        {"chars", TokenizerKind::Chars}});
  const json* chars = r.get("chars");
  if (spec.kind != TokenizerKind::Chars) {
    if (chars) r.fail("chars", "given, but \"tokenizer\" is not \"chars\"");
    if (spec.kind == TokenizerKind::Bytes && n_vocab != 256)
      r.fail("vocab_size", std::to_string(n_vocab) + " but the bytes tokenizer has 256 tokens");
    return spec;
  }
  if (!chars) r.fail("chars", "missing (the \"chars\" tokenizer needs its character list)");
  if (chars->is_string()) {
    spec.chars = split_utf8(chars->get<std::string>());
  } else if (chars->is_array()) {
    for (const json& c : *chars) {
      if (!c.is_string() || split_utf8(c.get<std::string>()).size() != 1)
        r.fail("chars", "element " + std::to_string(spec.chars.size()) +
                            " is not a one-character string: " + describe(c));
      spec.chars.push_back(c.get<std::string>());
    }
  } else {
    r.fail("chars",
           "must be a string or an array of one-character strings, got " + describe(*chars));
  }
  std::set<std::string> seen;
  for (const std::string& c : spec.chars)
    if (!seen.insert(c).second) r.fail("chars", "character " + json_util::show(c) + " repeats");
  if (spec.chars.size() != n_vocab)
    r.fail("vocab_size", std::to_string(n_vocab) + " but \"chars\" lists " +
                             std::to_string(spec.chars.size()) + " characters");
  return spec;
}

void read_variants(const Reader& r, Config& c) {
  c.pre_norm = r.choice("norm_position", true, {{"pre", true}, {"post", false}});
  c.final_norm = r.flag("final_norm", true);
  c.positions = r.choice("position_embedding", model::PositionKind::Learned,
                         {{"learned", model::PositionKind::Learned},
                          {"sinusoidal", model::PositionKind::Sinusoidal},
                          {"sinusoidal_halves", model::PositionKind::SinusoidalHalves},
                          {"none", model::PositionKind::None}});
  c.attention_bias = r.flag("attention_bias", true);
  c.mlp_bias = r.flag("mlp_bias", true);
  c.causal = r.flag("causal", true);
  c.layer_norm = r.choice("layer_norm_formula", model::LayerNormKind::Standard,
                          {{"standard", model::LayerNormKind::Standard},
                           {"std_plus_eps", model::LayerNormKind::StdPlusEps},
                           {"rms", model::LayerNormKind::Rms}});
  if (c.layer_norm == model::LayerNormKind::StdPlusEps && c.n_embd < 2)
    r.fail("layer_norm_formula", "std_plus_eps (unbiased std) needs n_embd >= 2");
  c.attention_only = r.flag("attention_only", false);
  // Hugging Face's scale_attn_weights=false means no scaling at all: scale 1.
  const bool scaled = r.flag("scale_attn_weights", true);
  const auto scale = r.positive("attention_scale");
  if (scale && !scaled && *scale != 1.0f)
    r.fail("attention_scale", "conflicts with scale_attn_weights false (which means scale 1)");
  c.attention_scale = scale ? *scale : scaled ? 0.0f : 1.0f;
  if (r.flag("scale_attn_by_inverse_layer_idx", false))
    r.fail("scale_attn_by_inverse_layer_idx", "true is not supported");
}

// BERT's config.json (Hugging Face's BertConfig keys): the encoder's sizes, its variant fixed
// (post-norm, bidirectional, learned positions, biases, no ln_f, an embedding LayerNorm), and
// the head its "architectures" names.
Config parse_bert(const Reader& r) {
  Config c;
  c.family = Family::Encoder;
  c.n_vocab = r.count("vocab_size", kMaxVocab);
  c.n_ctx = r.count("max_position_embeddings", kMaxCtx);
  c.n_embd = r.count("hidden_size", kMaxEmbd);
  c.n_layer = r.count("num_hidden_layers", kMaxLayer);
  c.n_head = r.count("num_attention_heads", kMaxEmbd);
  if (c.n_embd % c.n_head != 0)
    r.fail("num_attention_heads", "hidden_size " + std::to_string(c.n_embd) +
                                      " is not divisible by num_attention_heads " +
                                      std::to_string(c.n_head));
  c.n_inner = r.count("intermediate_size", kMaxInner);
  c.layer_norm_epsilon = r.positive("layer_norm_eps").value_or(1e-12f);
  c.activation = r.choice("hidden_act", model::Activation::GeluErf,
                          {{"gelu", model::Activation::GeluErf},
                           {"gelu_new", model::Activation::GeluTanh},
                           {"gelu_pytorch_tanh", model::Activation::GeluTanh},
                           {"relu", model::Activation::Relu}});
  r.choice("position_embedding_type", 0, {{"absolute", 0}});
  if (r.flag("is_decoder", false)) r.fail("is_decoder", "true is not supported (an encoder only)");
  if (r.flag("add_cross_attention", false))
    r.fail("add_cross_attention", "true is not supported (an encoder only)");
  c.n_types = r.count("type_vocab_size", kMaxVocab, 2);
  c.tie_word_embeddings = r.flag("tie_word_embeddings", true);
  c.pre_norm = false;
  c.final_norm = false;
  c.causal = false;
  c.embedding_norm = true;
  c.tokenizer.kind = TokenizerKind::WordPiece;
  if (const json* pad = r.get("pad_token_id")) {
    if (!pad->is_number_unsigned() || pad->get<uint64_t>() >= c.n_vocab)
      r.fail("pad_token_id", pad->dump() + " is not a token id (vocab_size " +
                                 std::to_string(c.n_vocab) + ")");
    c.pad_token_id = static_cast<int32_t>(pad->get<uint64_t>());
  }

  // The head: the first of "architectures" (absent: the bare BertModel).
  c.head = EncoderHead::None;
  if (const json* a = r.get("architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      r.fail("architectures", "must be a list of class names, got " + describe(*a));
    const std::string name = (*a)[0].get<std::string>();
    bool known = false;
    for (EncoderHead h : {EncoderHead::None, EncoderHead::MaskedLm,
                          EncoderHead::SequenceClassification, EncoderHead::TokenClassification})
      if (name == encoder_head_name(h)) c.head = h, known = true;
    if (!known)
      r.fail("architectures", json_util::show(name, 60) +
                                  " is not supported (BertModel, BertForMaskedLM, "
                                  "BertForSequenceClassification, BertForTokenClassification)");
  }
  if (c.head == EncoderHead::SequenceClassification || c.head == EncoderHead::TokenClassification) {
    // id2label {"0": "NEG", ...}: every id from 0 once. Without it, Hugging Face's default of
    // num_labels (2) labels "LABEL_i".
    const json* labels = r.get("id2label");
    if (labels && !labels->is_object())
      r.fail("id2label", "must be an object of id -> label, got " + describe(*labels));
    const uint32_t n = labels ? static_cast<uint32_t>(labels->size()) : r.count("num_labels", 1u << 16, 2);
    if (n == 0 || n > (1u << 16)) r.fail("id2label", std::to_string(n) + " labels (expected 1 to 65536)");
    c.labels.assign(n, "");
    for (uint32_t i = 0; i < n; i++) c.labels[i] = "LABEL_" + std::to_string(i);
    if (labels) {
      std::vector<bool> seen(n);
      for (const auto& [key, value] : labels->items()) {
        uint32_t id = 0;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (ec != std::errc() || end != key.data() + key.size() || id >= n || seen[id])
          r.fail("id2label", "key " + json_util::show(key, 20) + " is not an id from 0 to " +
                                 std::to_string(n - 1) + " given once");
        if (!value.is_string()) r.fail("id2label", "label " + key + " is not a string");
        seen[id] = true;
        c.labels[id] = value.get<std::string>();
      }
    }
  }
  return c;
}

}  // namespace

const char* encoder_head_name(EncoderHead h) {
  switch (h) {
    case EncoderHead::None: return "BertModel";
    case EncoderHead::MaskedLm: return "BertForMaskedLM";
    case EncoderHead::SequenceClassification: return "BertForSequenceClassification";
    case EncoderHead::TokenClassification: return "BertForTokenClassification";
  }
  return "?";
}

uint32_t Config::head_width() const {
  if (family != Family::Encoder || head == EncoderHead::MaskedLm) return n_vocab;
  if (head == EncoderHead::None) return 0;
  return static_cast<uint32_t>(labels.size());
}

uint32_t Config::head_rows(uint32_t T) const {
  return family == Family::Encoder && head == EncoderHead::SequenceClassification ? 1 : T;
}

namespace {

// A token id key, or nullopt where it is absent or null.
std::optional<int32_t> token_id(const Reader& r, std::string_view key, uint32_t vocab) {
  const json* v = r.get(key);
  if (!v) return std::nullopt;
  if (!v->is_number_unsigned() || v->get<uint64_t>() >= vocab)
    r.fail(key, v->dump() + " is not a token id (vocab_size " + std::to_string(vocab) + ")");
  return static_cast<int32_t>(v->get<uint64_t>());
}

// Marian's config.json (Hugging Face's MarianConfig): the 2017 Transformer, post-norm on both
// sides, sinusoidal positions in halves, embeddings scaled by sqrt(d_model), one vocabulary.
Config parse_marian(const Reader& r) {
  Config c;
  c.family = Family::EncoderDecoder;
  c.n_vocab = r.count("vocab_size", kMaxVocab);
  if (r.count("decoder_vocab_size", kMaxVocab, c.n_vocab) != c.n_vocab)
    r.fail("decoder_vocab_size", "differs from vocab_size: separate source and target "
                                 "vocabularies are not supported");
  if (!r.flag("share_encoder_decoder_embeddings", true))
    r.fail("share_encoder_decoder_embeddings", "false is not supported (one shared embedding)");
  c.n_ctx = r.count("max_position_embeddings", kMaxCtx);
  c.n_embd = r.count("d_model", kMaxEmbd);
  c.n_layer = r.count("decoder_layers", kMaxLayer);
  c.n_encoder_layer = r.count("encoder_layers", kMaxLayer);
  c.n_head = r.count("decoder_attention_heads", kMaxEmbd);
  if (r.count("encoder_attention_heads", kMaxEmbd) != c.n_head)
    r.fail("encoder_attention_heads", "differs from decoder_attention_heads (not supported)");
  if (c.n_embd % c.n_head != 0)
    r.fail("decoder_attention_heads", "d_model " + std::to_string(c.n_embd) +
                                          " is not divisible by " + std::to_string(c.n_head));
  c.n_inner = r.count("decoder_ffn_dim", kMaxInner);
  if (r.count("encoder_ffn_dim", kMaxInner) != c.n_inner)
    r.fail("encoder_ffn_dim", "differs from decoder_ffn_dim (not supported)");
  c.activation = r.choice("activation_function", model::Activation::GeluErf,
                          {{"swish", model::Activation::Silu},
                           {"silu", model::Activation::Silu},
                           {"gelu", model::Activation::GeluErf},
                           {"gelu_new", model::Activation::GeluTanh},
                           {"relu", model::Activation::Relu}});
  if (r.flag("normalize_before", false)) r.fail("normalize_before", "true is not supported");
  c.layer_norm_epsilon = 1e-5f;  // nn.LayerNorm's default: Marian's config has no key for it
  c.pre_norm = false;
  c.final_norm = false;
  c.positions = model::PositionKind::SinusoidalHalves;
  c.embed_scale = r.flag("scale_embedding", false) ? std::sqrt(static_cast<float>(c.n_embd)) : 1.0f;
  c.logits_bias = true;
  c.tie_word_embeddings = r.flag("tie_word_embeddings", true);
  c.eos_token_id = token_id(r, "eos_token_id", c.n_vocab);
  c.pad_token_id = token_id(r, "pad_token_id", c.n_vocab);
  c.decoder_start_token_id = token_id(r, "decoder_start_token_id", c.n_vocab);
  c.forced_eos_token_id = token_id(r, "forced_eos_token_id", c.n_vocab);
  if (!c.decoder_start_token_id) c.decoder_start_token_id = c.pad_token_id;
  if (!c.decoder_start_token_id)
    r.fail("decoder_start_token_id", "missing (and no pad_token_id to start from)");
  c.tokenizer.kind = TokenizerKind::MarianSpm;
  return c;
}

// T5's config.json (Hugging Face's T5Config): pre-norm RMSNorm blocks without biases, no position
// embeddings but a relative position bias in each stack's self-attention, attention scores not
// scaled by 1/sqrt(d), a final norm on both sides, one vocabulary.
Config parse_t5(const Reader& r) {
  Config c;
  c.family = Family::EncoderDecoder;
  c.n_vocab = r.count("vocab_size", kMaxVocab);
  // T5 has no position table: the context is what the models were trained at (512) unless the
  // config says otherwise; the bias table is built for it.
  c.n_ctx = r.count("n_positions", kMaxCtx, 512);
  c.n_embd = r.count("d_model", kMaxEmbd);
  c.n_head = r.count("num_heads", kMaxEmbd);
  // The attention's width d_kv x num_heads need not be d_model's (t5-v1_1-small: 6 x 64 in 512,
  // t5-3b: 32 x 128 in 1024); kept only where it differs (Config::n_attn).
  const uint32_t d_kv = r.count("d_kv", kMaxEmbd);
  const uint64_t width = uint64_t{d_kv} * c.n_head;
  if (width > kMaxEmbd)
    r.fail("d_kv", std::to_string(d_kv) + " x num_heads " + std::to_string(c.n_head) +
                       " is more than " + std::to_string(kMaxEmbd) + " wide");
  if (width != c.n_embd) c.n_attn = static_cast<uint32_t>(width);
  c.n_inner = r.count("d_ff", kMaxInner);
  c.n_encoder_layer = r.count("num_layers", kMaxLayer);
  c.n_layer = r.count("num_decoder_layers", kMaxLayer, c.n_encoder_layer);
  c.relative_buckets = r.count("relative_attention_num_buckets", 1024, 32);
  c.relative_max_distance = r.count("relative_attention_max_distance", kMaxCtx, 128);
  if (c.relative_buckets < 4)
    r.fail("relative_attention_num_buckets", "must be at least 4, got " +
                                                 std::to_string(c.relative_buckets));
  c.layer_norm_epsilon = r.positive("layer_norm_epsilon").value_or(1e-6f);
  // feed_forward_proj "ACT" or "gated-ACT", as T5Config splits it; transformers reads
  // "gated-gelu" as gelu_new (the tanh form), and a saved dense_act_fn names the activation.
  const json* proj = r.get("feed_forward_proj");
  const std::string ff = proj && proj->is_string() ? proj->get<std::string>() : "relu";
  if (proj && !proj->is_string()) r.fail("feed_forward_proj", "must be a string, got " + describe(*proj));
  const size_t dash = ff.find('-');
  c.gated_mlp = dash != std::string::npos;
  if (c.gated_mlp && (ff.substr(0, dash) != "gated" || ff.find('-', dash + 1) != std::string::npos))
    r.fail("feed_forward_proj", json_util::show(ff, 40) + " is not ACT or gated-ACT");
  std::string act = r.text("dense_act_fn").value_or(ff.substr(c.gated_mlp ? dash + 1 : 0));
  if (ff == "gated-gelu") act = "gelu_new";
  const std::map<std::string, model::Activation> acts{{"relu", model::Activation::Relu},
                                                      {"gelu", model::Activation::GeluErf},
                                                      {"gelu_new", model::Activation::GeluTanh},
                                                      {"gelu_pytorch_tanh", model::Activation::GeluTanh},
                                                      {"silu", model::Activation::Silu},
                                                      {"swish", model::Activation::Silu}};
  const auto a = acts.find(act);
  if (a == acts.end())
    r.fail("feed_forward_proj", "activation " + json_util::show(act, 40) +
                                    " is not supported (relu, gelu, gelu_new, silu)");
  c.activation = a->second;
  c.layer_norm = model::LayerNormKind::Rms;
  c.pre_norm = true;
  c.final_norm = true;
  c.positions = model::PositionKind::None;
  c.attention_bias = false;
  c.mlp_bias = false;
  c.attention_scale = 1.0f;
  c.tie_word_embeddings = r.flag("tie_word_embeddings", true);
  // transformers 5 saves scale_decoder_outputs; before, a tied head implied the scale.
  if (r.flag("scale_decoder_outputs", c.tie_word_embeddings))
    c.output_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd));
  // T5Config's defaults where the keys are absent; null: none (generation then never stops early).
  c.eos_token_id = token_id(r, "eos_token_id", c.n_vocab);
  if (!c.eos_token_id && !r.is_null("eos_token_id")) c.eos_token_id = 1;
  c.pad_token_id = token_id(r, "pad_token_id", c.n_vocab).value_or(0);
  c.decoder_start_token_id = token_id(r, "decoder_start_token_id", c.n_vocab);
  if (!c.decoder_start_token_id) c.decoder_start_token_id = c.pad_token_id;
  c.tokenizer.kind = TokenizerKind::T5Spm;
  return c;
}

}  // namespace

Config encoder_side(const Config& c) {
  Config e = c;
  e.family = Family::Encoder;
  e.head = EncoderHead::None;
  e.n_layer = c.n_encoder_layer;
  e.n_encoder_layer = 0;
  e.causal = false;
  e.cross_attention = false;
  e.logits_bias = false;
  e.output_scale = 1.0f;
  return e;
}

Config decoder_side(const Config& c) {
  Config d = c;
  d.family = Family::Decoder;
  d.n_encoder_layer = 0;
  d.causal = true;
  d.cross_attention = true;
  return d;
}

Config parse_config(std::string_view json_text, const std::string& file) {
  const json j = json_util::parse(json_text, file);
  if (!j.is_object())
    throw std::runtime_error(file + ": a JSON " + j.type_name() + ", not an object");
  const Reader r(j, file);
  const auto type = r.text("model_type");
  if (type && *type == "bert") return parse_bert(r);
  if (type && *type == "marian") return parse_marian(r);
  if (type && *type == "t5") return parse_t5(r);
  if (type && *type != "gpt2")
    r.fail("model_type", json_util::show(*type, 40) + " is not supported (gpt2, bert, marian, t5)");

  Config c;
  c.n_vocab = r.count("vocab_size", kMaxVocab);
  // Hugging Face reads n_positions; n_ctx is its older name, used only when n_positions is absent.
  c.n_ctx = r.get("n_positions") ? r.count("n_positions", kMaxCtx) : r.count("n_ctx", kMaxCtx);
  c.n_embd = r.count("n_embd", kMaxEmbd);
  c.n_layer = r.count("n_layer", kMaxLayer);
  c.n_head = r.count("n_head", kMaxEmbd);
  if (c.n_embd % c.n_head != 0)
    r.fail("n_head", "n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " +
                         std::to_string(c.n_head));
  c.n_inner = r.count("n_inner", kMaxInner, 4 * c.n_embd);
  c.layer_norm_epsilon = r.positive("layer_norm_epsilon").value_or(1e-5f);
  c.activation = r.choice("activation_function", model::Activation::GeluTanh,
                          {{"gelu_new", model::Activation::GeluTanh},
                           {"gelu_pytorch_tanh", model::Activation::GeluTanh},
                           {"gelu", model::Activation::GeluErf},
                           {"relu", model::Activation::Relu},
                           {"silu", model::Activation::Silu},
                           {"swish", model::Activation::Silu}});
  c.tie_word_embeddings = r.flag("tie_word_embeddings", true);
  if (const json* eos = r.get("eos_token_id")) {
    if (!eos->is_number_integer())
      r.fail("eos_token_id", "must be an integer, got " + describe(*eos));
    if (!eos->is_number_unsigned() || eos->get<uint64_t>() >= c.n_vocab)
      r.fail("eos_token_id",
             eos->dump() + " is not a token id (vocab_size " + std::to_string(c.n_vocab) + ")");
    c.eos_token_id = static_cast<int32_t>(eos->get<uint64_t>());
  }
  read_variants(r, c);
  c.tokenizer = read_tokenizer(r, c.n_vocab);
  return c;
}

Config load_config(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw std::runtime_error(file.string() + ": no such file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file.string() + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return parse_config(s.str(), file.string());
}

namespace {

// The shortest decimal that reads back as the same float ("1e-05", not 9.99999974737875e-06).
json float_json(float f) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, f).ptr;
  double d = 0;
  std::from_chars(buf, end, d);
  return d;
}

const char* activation_name(model::Activation a) {
  switch (a) {
    case model::Activation::GeluTanh:
      return "gelu_new";
    case model::Activation::GeluErf:
      return "gelu";
    case model::Activation::Relu:
      return "relu";
    case model::Activation::Silu:
      return "silu";
    case model::Activation::Tanh:
    case model::Activation::None:
      break;
  }
  throw std::invalid_argument("config_json: the MLP needs an activation, not None");
}

const char* position_name(model::PositionKind p) {
  return p == model::PositionKind::Learned      ? "learned"
         : p == model::PositionKind::Sinusoidal ? "sinusoidal"
         : p == model::PositionKind::SinusoidalHalves ? "sinusoidal_halves"
                                              : "none";
}

const char* tokenizer_name(TokenizerKind k) {
  return k == TokenizerKind::Gpt2 ? "gpt2" : k == TokenizerKind::Bytes ? "bytes" : "chars";
}

// An encoder's config.json: Hugging Face's BertConfig keys.
std::string bert_json(const Config& c) {
  nlohmann::ordered_json j;
  j["model_type"] = "bert";
  j["architectures"] = {encoder_head_name(c.head)};
  j["vocab_size"] = c.n_vocab;
  j["max_position_embeddings"] = c.n_ctx;
  j["hidden_size"] = c.n_embd;
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["intermediate_size"] = c.n_inner;
  j["layer_norm_eps"] = float_json(c.layer_norm_epsilon);
  j["hidden_act"] = activation_name(c.activation);
  j["type_vocab_size"] = c.n_types;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  if (!c.labels.empty()) {
    nlohmann::ordered_json labels = nlohmann::ordered_json::object();
    for (size_t i = 0; i < c.labels.size(); i++) labels[std::to_string(i)] = c.labels[i];
    j["id2label"] = labels;
  }
  return j.dump(2) + "\n";
}

// An encoder-decoder's config.json: Hugging Face's MarianConfig keys.
std::string marian_json(const Config& c) {
  nlohmann::ordered_json j;
  j["model_type"] = "marian";
  j["architectures"] = {"MarianMTModel"};
  j["is_encoder_decoder"] = true;
  j["vocab_size"] = c.n_vocab;
  j["decoder_vocab_size"] = c.n_vocab;
  j["share_encoder_decoder_embeddings"] = true;
  j["max_position_embeddings"] = c.n_ctx;
  j["d_model"] = c.n_embd;
  j["encoder_layers"] = c.n_encoder_layer;
  j["decoder_layers"] = c.n_layer;
  j["encoder_attention_heads"] = c.n_head;
  j["decoder_attention_heads"] = c.n_head;
  j["encoder_ffn_dim"] = c.n_inner;
  j["decoder_ffn_dim"] = c.n_inner;
  j["activation_function"] = c.activation == model::Activation::Silu ? "swish"
                                                                     : activation_name(c.activation);
  j["scale_embedding"] = c.embed_scale != 1.0f;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  if (c.forced_eos_token_id) j["forced_eos_token_id"] = *c.forced_eos_token_id;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  if (c.decoder_start_token_id) j["decoder_start_token_id"] = *c.decoder_start_token_id;
  return j.dump(2) + "\n";
}

// T5's config.json: Hugging Face's T5Config keys.
std::string t5_json(const Config& c) {
  nlohmann::ordered_json j;
  j["model_type"] = "t5";
  j["architectures"] = {"T5ForConditionalGeneration"};
  j["is_encoder_decoder"] = true;
  j["vocab_size"] = c.n_vocab;
  j["n_positions"] = c.n_ctx;
  j["d_model"] = c.n_embd;
  j["d_kv"] = c.head_dim();
  j["d_ff"] = c.n_inner;
  j["num_layers"] = c.n_encoder_layer;
  j["num_decoder_layers"] = c.n_layer;
  j["num_heads"] = c.n_head;
  j["relative_attention_num_buckets"] = c.relative_buckets;
  j["relative_attention_max_distance"] = c.relative_max_distance;
  j["layer_norm_epsilon"] = float_json(c.layer_norm_epsilon);
  const std::string act = activation_name(c.activation);
  j["feed_forward_proj"] = c.gated_mlp ? "gated-" + act : act;
  j["dense_act_fn"] = act;
  j["is_gated_act"] = c.gated_mlp;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["scale_decoder_outputs"] = c.output_scale != 1.0f;
  // null, not absent, for none: absent means T5's default, 1.
  j["eos_token_id"] = c.eos_token_id ? nlohmann::ordered_json(*c.eos_token_id) : nullptr;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  if (c.decoder_start_token_id) j["decoder_start_token_id"] = *c.decoder_start_token_id;
  return j.dump(2) + "\n";
}

}  // namespace

std::string config_json(const Config& c) {
  // Only T5's keys can say that the attention is not the model's width (d_kv).
  const bool t5 = c.family == Family::EncoderDecoder && c.relative_buckets;
  if (c.attn_width() != c.n_embd && !t5)
    throw std::invalid_argument("config_json: attention " + std::to_string(c.attn_width()) +
                                " wide in a model " + std::to_string(c.n_embd) +
                                " wide, which only T5's config.json (d_kv) can say");
  if (c.family == Family::Encoder) return bert_json(c);
  if (c.family == Family::EncoderDecoder)
    return c.relative_buckets ? t5_json(c) : marian_json(c);
  nlohmann::ordered_json j;
  j["model_type"] = "gpt2";
  j["architectures"] = {"GPT2LMHeadModel"};
  j["vocab_size"] = c.n_vocab;
  j["n_positions"] = c.n_ctx;
  j["n_ctx"] = c.n_ctx;
  j["n_embd"] = c.n_embd;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_inner"] = c.n_inner;
  j["layer_norm_epsilon"] = float_json(c.layer_norm_epsilon);
  j["activation_function"] = activation_name(c.activation);
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  j["norm_position"] = c.pre_norm ? "pre" : "post";
  j["final_norm"] = c.final_norm;
  j["position_embedding"] = position_name(c.positions);
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
  j["causal"] = c.causal;
  j["layer_norm_formula"] = c.layer_norm == model::LayerNormKind::Standard     ? "standard"
                            : c.layer_norm == model::LayerNormKind::StdPlusEps ? "std_plus_eps"
                                                                               : "rms";
  j["attention_only"] = c.attention_only;
  if (c.attention_scale != 0) j["attention_scale"] = float_json(c.attention_scale);
  j["tokenizer"] = tokenizer_name(c.tokenizer.kind);
  if (c.tokenizer.kind == TokenizerKind::Chars) j["chars"] = c.tokenizer.chars;
  return j.dump(2) + "\n";
}

Config marian_config(uint32_t n_embd, uint32_t n_layer, uint32_t n_head, uint32_t n_vocab) {
  // Through parse_marian, so that the derived fields are the ones a folder gets.
  return parse_config(nlohmann::json{{"model_type", "marian"},
                                     {"vocab_size", n_vocab},
                                     {"max_position_embeddings", 512},
                                     {"d_model", n_embd},
                                     {"encoder_layers", n_layer},
                                     {"decoder_layers", n_layer},
                                     {"encoder_attention_heads", n_head},
                                     {"decoder_attention_heads", n_head},
                                     {"encoder_ffn_dim", 4 * n_embd},
                                     {"decoder_ffn_dim", 4 * n_embd},
                                     {"activation_function", "swish"},
                                     {"scale_embedding", true},
                                     {"eos_token_id", 0},
                                     {"forced_eos_token_id", 0},
                                     {"pad_token_id", n_vocab - 1},
                                     {"decoder_start_token_id", n_vocab - 1}}
                          .dump(),
                      "marian_config");
}

Config t5_config(uint32_t n_embd, uint32_t n_inner, uint32_t n_layer, uint32_t n_head,
                 uint32_t n_vocab, bool gated, uint32_t d_kv) {
  // Through parse_t5, so that the derived fields are the ones a folder gets.
  return parse_config(nlohmann::json{{"model_type", "t5"},
                                     {"vocab_size", n_vocab},
                                     {"d_model", n_embd},
                                     {"d_kv", d_kv ? d_kv : n_embd / n_head},
                                     {"d_ff", n_inner},
                                     {"num_layers", n_layer},
                                     {"num_decoder_layers", n_layer},
                                     {"num_heads", n_head},
                                     {"feed_forward_proj", gated ? "gated-gelu" : "relu"},
                                     {"tie_word_embeddings", !gated},
                                     {"eos_token_id", 1},
                                     {"pad_token_id", 0},
                                     {"decoder_start_token_id", 0}}
                          .dump(),
                      "t5_config");
}

Config gpt2_config(uint32_t n_embd, uint32_t n_layer, uint32_t n_head) {
  Config c;
  c.n_vocab = 50257;
  c.n_ctx = 1024;
  c.n_embd = n_embd;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_inner = 4 * n_embd;
  c.eos_token_id = 50256;
  return c;
}

}  // namespace model
