// A model's hyper-parameters and block variant, read from the Hugging Face config.json of its
// folder. Keys are Hugging Face's GPT-2 keys where one exists; the variants GPT-2 does not have
// use plain keys of our own (documented in docs/usage.md, "config.json keys").
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/ops/types.h"


namespace model {

enum class TokenizerKind {
  Gpt2,   // byte-level BPE from vocab.json + merges.txt in the model's folder ("gpt2", default)
  Bytes,  // raw UTF-8 bytes, id = byte value, vocab 256 ("bytes")
  Chars,  // one token per character of a list given in config.json ("chars")
  WordPiece,  // BERT's: vocab.txt (or tokenizer.json) in the model's folder
  // Marian's: source.spm and target.spm (SentencePiece) with vocab.json in the model's folder
  MarianSpm,
  T5Spm,  // T5's: spiece.model (SentencePiece) in the model's folder
};

// Which stack a model is: a decoder (GPT-2: causal, a cache, a next-token head), an encoder
// (BERT: bidirectional, each sequence whole, hidden states and a task head out), or both, the
// decoder attending to the encoder's output (Marian, T5: a folder's config, whose two sides
// encoder_side() and decoder_side() give as the configs the backends run).
enum class Family { Decoder, Encoder, EncoderDecoder };

// An encoder's task head, from config.json's "architectures".
enum class EncoderHead {
  None,                    // BertModel: hidden states only (sentence embeddings)
  MaskedLm,                // BertForMaskedLM: dense, activation, LayerNorm, then wte + bias: [T, V]
  SequenceClassification,  // ...ForSequenceClassification: pooler (dense, tanh) on row 0, then
                           // the classifier: [1, labels]
  TokenClassification,     // ...ForTokenClassification: the classifier on every row: [T, labels]
};

struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::Gpt2;
  std::vector<std::string> chars;  // Chars: token i is the UTF-8 character chars[i]
  bool operator==(const TokenizerSpec&) const = default;
};

struct Config {
  uint32_t n_vocab = 0;   // vocab_size
  uint32_t n_ctx = 0;     // n_positions (or n_ctx): the longest sequence
  uint32_t n_embd = 0;    // C
  uint32_t n_layer = 0;
  uint32_t n_head = 0;    // H; attn_width() % n_head == 0
  uint32_t n_inner = 0;   // MLP width; n_inner, default 4 * n_embd
  float layer_norm_epsilon = 1e-5f;
  model::Activation activation = model::Activation::GeluTanh;  // activation_function
  bool tie_word_embeddings = true;  // head reads wte; false: a separate lm_head.weight [V, C]

  // Block variants. Defaults are GPT-2's.
  bool pre_norm = true;       // "norm_position": "pre" (GPT-2) | "post" (Add & Norm, 2017)
  bool final_norm = true;     // "final_norm": ln_f before the head
  model::PositionKind positions = model::PositionKind::Learned;  // "position_embedding"
  bool attention_bias = true;  // "attention_bias": c_attn / c_proj biases
  bool mlp_bias = true;        // "mlp_bias": c_fc / mlp.c_proj biases
  bool causal = true;          // "causal": false = bidirectional (encoder) attention
  model::LayerNormKind layer_norm = model::LayerNormKind::Standard;  // "layer_norm_formula"
  bool attention_only = false;  // "attention_only": blocks without MLP and without LayerNorm
  float attention_scale = 0;    // "attention_scale"; 0 = 1/sqrt(head_dim)
  std::optional<int32_t> eos_token_id;  // eos_token_id (GPT-2: 50256); ends generation

  TokenizerSpec tokenizer;  // "tokenizer": "gpt2" | "bytes" | "chars", with "chars"

  // Encoders (model_type "bert"; Hugging Face's keys in parentheses). An encoder is post-norm,
  // bidirectional, without ln_f, and reads its linear layers as nn.Linear [out, in]
  // (Checkpoint::load presents them as GPT-2's Conv1D names and layout).
  Family family = Family::Decoder;
  uint32_t n_types = 0;          // (type_vocab_size) token-type embeddings wtt [n_types, C]
  bool embedding_norm = false;   // ln_e over the embedding sum
  EncoderHead head = EncoderHead::None;
  std::vector<std::string> labels;     // (id2label) the classifiers' outputs, in id order
  std::optional<int32_t> pad_token_id;  // (pad_token_id)

  // Encoder-decoders (model_type "marian", "t5"). Both stacks share n_embd, n_head, n_attn,
  // n_inner, the vocabulary and its embedding; n_layer is the decoder's.
  uint32_t n_encoder_layer = 0;  // (encoder_layers)
  bool cross_attention = false;  // a decoder whose blocks attend to an encoder's output
  float embed_scale = 1.0f;      // (scale_embedding: sqrt(n_embd)) multiplies wte's rows
  bool logits_bias = false;      // (final_logits_bias) added to the head's logits
  std::optional<int32_t> decoder_start_token_id;
  // (forced_eos_token_id) the token generation must end with when it reaches its length limit
  std::optional<int32_t> forced_eos_token_id;
  // T5 (Hugging Face's T5Config keys): a learned bias per head on each attention score of a
  // stack's self-attention, by the bucket of the relative position (key - query): 0 buckets =
  // none. Block 0's table ("rel_bias.weight" [buckets, H]) serves every layer of its stack.
  uint32_t relative_buckets = 0;       // (relative_attention_num_buckets)
  uint32_t relative_max_distance = 0;  // (relative_attention_max_distance)
  // (feed_forward_proj "gated-*") the MLP's input projection is [C, 2F]: act(first F) * second F
  bool gated_mlp = false;
  // (d_kv x num_heads) the attention's width A where it is not the model's: q, k and v project
  // [C] -> [A], H heads of A / H, and the output [A] -> [C]. 0 (every other family, and a T5
  // whose d_kv x num_heads is d_model): A = C. attn_width() is the one to read.
  uint32_t n_attn = 0;
  // (scale_decoder_outputs, or a tied head before transformers 5) multiplies the decoder's
  // output before the head: d_model^-0.5. Applied to ln_f.weight as it loads (seq2seq_tensors).
  float output_scale = 1.0f;

  uint32_t attn_width() const { return n_attn ? n_attn : n_embd; }  // A
  uint32_t head_dim() const { return attn_width() / n_head; }
  // Floats per row of the head's output: the vocabulary (a decoder, masked LM), the labels (a
  // classifier), or 0 (an encoder without a head).
  uint32_t head_width() const;
  // Rows of the head's output for a sequence of T tokens (a sequence classifier's: 1).
  uint32_t head_rows(uint32_t T) const;
  bool operator==(const Config&) const = default;
};

// The two stacks of an encoder-decoder's config: the encoder (Family::Encoder, no head) and the
// decoder (Family::Decoder with cross_attention). The config's tensors carry the encoder's under
// "enc." (expected_tensors), the shared wte without it.
Config encoder_side(const Config& c);
Config decoder_side(const Config& c);

// "BertForMaskedLM" and the others that name an EncoderHead.
const char* encoder_head_name(EncoderHead h);

// Parses and validates config.json text; `file` names the source in error messages.
// Throws std::runtime_error "<file>: <key>: <problem>" for a missing, mistyped, zero, negative,
// inconsistent or absurdly large value, or an unknown enumeration value.
Config parse_config(std::string_view json_text, const std::string& file);
Config load_config(const std::filesystem::path& file);

// config.json text for a Config: Hugging Face's GPT-2 keys plus ours for the variants, such that
// parse_config(config_json(c)) == c.
std::string config_json(const Config& config);

// GPT-2's block at a given size, with its vocabulary (50257, <|endoftext|> = 50256) and context
// (1024): small is (768, 12, 12), medium (1024, 24, 16), large (1280, 36, 20), XL (1600, 48, 25).
Config gpt2_config(uint32_t n_embd, uint32_t n_layer, uint32_t n_head);

// A Marian encoder-decoder as OPUS-MT's are made: n_layer layers a side, F = 4 C, swish, scaled
// embeddings, 512 positions, eos 0, and pad = the decoder's start = V - 1 (opus-mt-en-de is
// (512, 6, 8) with 58,101 tokens).
Config marian_config(uint32_t n_embd, uint32_t n_layer, uint32_t n_head, uint32_t n_vocab);

// A T5 as Google's are made: n_layer layers a side, 32 buckets up to 128 apart, eps 1e-6, pad =
// the decoder's start = 0, eos 1, 512 positions. v1.0 (t5-small is (512, 2048, 6, 8) with
// 32,128 tokens): ReLU, a tied head scaled by d_model^-0.5; v1.1 (gated): gated GELU (tanh), an
// untied head. d_kv: each head's width, 0 for n_embd / n_head (t5-v1_1-small and flan-t5-small
// are (512, 1024, 8, 6) with d_kv 64: attention 384 wide in a 512-wide model).
Config t5_config(uint32_t n_embd, uint32_t n_inner, uint32_t n_layer, uint32_t n_head,
                 uint32_t n_vocab, bool gated, uint32_t d_kv = 0);

}  // namespace model
