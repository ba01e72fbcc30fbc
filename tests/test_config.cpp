// config.json: the published GPT-2 configs read as they are, our variant keys, round trips
// through config_json, and every bad value rejected with "<file>: <key>: <problem>".
#include <doctest/doctest.h>

#include <string>

#include "model/formats/checkpoint.h"
#include "model/formats/config.h"
#include "tests/files.h"

namespace {

// openai-community/gpt2's config.json as published (n_embd, n_layer, n_head substituted for the
// larger sizes).
std::string published(int n_embd, int n_layer, int n_head) {
  return R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": )" +
         std::to_string(n_embd) + R"(,
  "n_head": )" +
         std::to_string(n_head) + R"(,
  "n_layer": )" +
         std::to_string(n_layer) + R"(,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";
}

// A small valid config with one key replaced (or added) by `key: value`; value "" drops it.
std::string with(const std::string& key, const std::string& value) {
  std::vector<std::pair<std::string, std::string>> keys = {{"vocab_size", "16"},
                                                           {"n_positions", "8"},
                                                           {"n_embd", "8"},
                                                           {"n_layer", "2"},
                                                           {"n_head", "2"}};
  std::erase_if(keys, [&](const auto& kv) { return kv.first == key; });
  if (!value.empty()) keys.emplace_back(key, value);
  std::string s = "{";
  for (const auto& [k, v] : keys) s += (s.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
  return s + "}";
}

model::Config parse(const std::string& text) {
  return model::parse_config(text, "cfg.json");
}

void rejects(const std::string& text, const std::string& message) {
  CAPTURE(text);
  CHECK_THROWS_WITH_AS(parse(text), doctest::Contains(message.c_str()), std::runtime_error);
}

}  // namespace

TEST_CASE("config: the published GPT-2 configs") {
  const model::Config c = parse(published(768, 12, 12));
  CHECK(c.n_vocab == 50257);
  CHECK(c.n_ctx == 1024);
  CHECK(c.n_embd == 768);
  CHECK(c.n_layer == 12);
  CHECK(c.n_head == 12);
  CHECK(c.head_dim() == 64);
  CHECK(c.n_inner == 3072);
  CHECK(c.layer_norm_epsilon == 1e-5f);
  CHECK(c.activation == model::Activation::GeluTanh);
  CHECK(c.tie_word_embeddings);
  CHECK(c.eos_token_id == 50256);
  CHECK(c == model::Config{50257, 1024, 768,   12,
                           12,    3072, 1e-5f, model::Activation::GeluTanh,
                           true,  true, true,  model::PositionKind::Learned,
                           true,  true, true,  model::LayerNormKind::Standard,
                           false, 0.0f, 50256, {}});
  // Published parameter counts of the four sizes (tied head, no mask buffers).
  CHECK(model::parameter_count(c) == 124439808);
  CHECK(model::parameter_count(parse(published(1024, 24, 16))) == 354823168);
  CHECK(model::parameter_count(parse(published(1280, 36, 20))) == 774030080);
  CHECK(model::parameter_count(parse(published(1600, 48, 25))) == 1557611200);
}

TEST_CASE("config: defaults and Hugging Face's spellings") {
  model::Config c = parse(with("n_inner", "null"));
  CHECK(c.n_inner == 32);
  CHECK(!c.eos_token_id);
  CHECK(c.layer_norm_epsilon == 1e-5f);
  CHECK(c.attention_scale == 0.0f);
  CHECK(c.tokenizer.kind == model::TokenizerKind::Gpt2);
  CHECK(parse(with("n_inner", "20")).n_inner == 20);
  // n_ctx is the older name: read only where n_positions is absent.
  CHECK(parse(with("n_positions", "").insert(1, "\"n_ctx\": 5, ")).n_ctx == 5);
  CHECK(parse(with("n_ctx", "5")).n_ctx == 8);
  CHECK(parse(with("activation_function", "\"gelu\"")).activation == model::Activation::GeluErf);
  CHECK(parse(with("activation_function", "\"gelu_pytorch_tanh\"")).activation ==
        model::Activation::GeluTanh);
  CHECK(parse(with("activation_function", "\"relu\"")).activation == model::Activation::Relu);
  CHECK(!parse(with("tie_word_embeddings", "false")).tie_word_embeddings);
  CHECK(parse(with("scale_attn_weights", "false")).attention_scale == 1.0f);
  CHECK(parse(with("scale_attn_weights", "true")).attention_scale == 0.0f);
  CHECK(parse(with("attention_scale", "0.125")).attention_scale == 0.125f);
  CHECK(parse(with("layer_norm_epsilon", "1")).layer_norm_epsilon == 1.0f);
  CHECK(parse(with("unknown_key", "[1, {\"x\": null}]")).n_embd == 8);  // ignored
}

TEST_CASE("config: variant keys") {
  std::string s = with("norm_position", "\"post\"");
  s.insert(1, R"("final_norm": false, "position_embedding": "sinusoidal", "attention_bias": false,
    "mlp_bias": false, "causal": false, "layer_norm_formula": "std_plus_eps",
    "attention_only": true, )");
  const model::Config c = parse(s);
  CHECK(!c.pre_norm);
  CHECK(!c.final_norm);
  CHECK(c.positions == model::PositionKind::Sinusoidal);
  CHECK(!c.attention_bias);
  CHECK(!c.mlp_bias);
  CHECK(!c.causal);
  CHECK(c.layer_norm == model::LayerNormKind::StdPlusEps);
  CHECK(c.attention_only);
  CHECK(parse(with("position_embedding", "\"none\"")).positions == model::PositionKind::None);
  CHECK(parse(with("position_embedding", "\"learned\"")).positions == model::PositionKind::Learned);
  CHECK(parse(with("norm_position", "\"pre\"")).pre_norm);
}

TEST_CASE("config: tokenizer kinds") {
  CHECK(parse(with("vocab_size", "256").insert(1, "\"tokenizer\": \"bytes\", ")).tokenizer.kind ==
        model::TokenizerKind::Bytes);
  rejects(with("tokenizer", "\"bytes\""),
          "cfg.json: vocab_size: 16 but the bytes tokenizer has 256 tokens");

  // A string of characters (multi-byte ones too) or an array of one-character strings.
  model::Config c =
      parse(with("vocab_size", "5")
                .insert(1, "\"tokenizer\": \"chars\", \"chars\": \"ab\u00e9\u20ac\\n\", "));
  CHECK(c.tokenizer.kind == model::TokenizerKind::Chars);
  CHECK(c.tokenizer.chars == std::vector<std::string>{"a", "b", "\u00e9", "\u20ac", "\n"});
  c = parse(
      with("vocab_size", "3")
          .insert(1, "\"tokenizer\": \"chars\", \"chars\": [\"x\", \" \", \"\U0001F600\"], "));
  CHECK(c.tokenizer.chars == std::vector<std::string>{"x", " ", "\U0001F600"});

  const std::string chars = "\"tokenizer\": \"chars\", ";
  rejects(with("vocab_size", "3").insert(1, chars + "\"chars\": \"abca\", "),
          "cfg.json: chars: character a repeats");
  rejects(with("vocab_size", "4").insert(1, chars + "\"chars\": \"abc\", "),
          "cfg.json: vocab_size: 4 but \"chars\" lists 3 characters");
  rejects(with("vocab_size", "2").insert(1, chars + "\"chars\": [\"a\", \"bc\"], "),
          "cfg.json: chars: element 1 is not a one-character string: string bc");
  rejects(with("vocab_size", "2").insert(1, chars + "\"chars\": [\"a\", 5], "),
          "chars: element 1 is not a one-character");
  rejects(with("vocab_size", "2").insert(1, chars + "\"chars\": 5, "),
          "chars: must be a string or an array");
  rejects(with("tokenizer", "\"chars\""), "cfg.json: chars: missing");
  rejects(with("chars", "\"ab\""), "cfg.json: chars: given, but \"tokenizer\" is not \"chars\"");
  rejects(with("tokenizer", "\"sentencepiece\""),
          "cfg.json: tokenizer: unknown value sentencepiece (expected one of: gpt2, bytes, chars)");
}

TEST_CASE("config: config_json writes what parse_config reads back") {
  model::Config a = parse(published(768, 12, 12));
  model::Config b = a;
  b.n_vocab = 7;
  b.n_ctx = 33;
  b.n_inner = 100;
  b.layer_norm_epsilon = 3.7e-6f;
  b.activation = model::Activation::Relu;
  b.tie_word_embeddings = false;
  b.eos_token_id.reset();
  b.pre_norm = false;
  b.final_norm = false;
  b.positions = model::PositionKind::Sinusoidal;
  b.attention_bias = false;
  b.mlp_bias = false;
  b.causal = false;
  b.layer_norm = model::LayerNormKind::StdPlusEps;
  b.attention_only = true;
  b.attention_scale = 0.3f;
  b.tokenizer = {model::TokenizerKind::Chars, {"a", "\"", "\\", "\u00e9", " ", "\t", "\U0001F600"}};
  model::Config d = a;
  d.activation = model::Activation::GeluErf;
  d.positions = model::PositionKind::None;
  d.n_vocab = 256;
  d.eos_token_id = 0;
  d.tokenizer.kind = model::TokenizerKind::Bytes;
  d.layer_norm = model::LayerNormKind::Rms;
  for (const model::Config& c : {a, b, d}) {
    const std::string text = model::config_json(c);
    CAPTURE(text);
    CHECK(parse(text) == c);
  }
  CHECK(model::config_json(a).find("\"layer_norm_epsilon\": 1e-05") != std::string::npos);
  CHECK(model::config_json(a).find("\"n_positions\": 1024") != std::string::npos);
  model::Config none = a;
  none.activation = model::Activation::None;
  CHECK_THROWS_AS(model::config_json(none), std::invalid_argument);
}

TEST_CASE("config: bad values name the file, the key and the problem") {
  rejects(with("n_embd", "0"), "cfg.json: n_embd: must be at least 1, got 0");
  rejects(with("n_layer", "-3"), "cfg.json: n_layer: must be at least 1, got -3");
  rejects(with("n_head", "2.5"), "cfg.json: n_head: must be an integer, got 2.5");
  rejects(with("n_head", "2.0"), "cfg.json: n_head: must be an integer, got 2.0");
  rejects(with("n_embd", "\"768\""), "cfg.json: n_embd: must be an integer, got string 768");
  rejects(with("n_embd", "[8]"), "cfg.json: n_embd: must be an integer, got an array");
  rejects(with("n_embd", "true"), "n_embd: must be an integer, got true");
  rejects(with("n_embd", "65537"), "cfg.json: n_embd: 65537 is larger than the limit 65536");
  rejects(with("n_layer", "1025"), "n_layer: 1025 is larger than the limit 1024");
  rejects(with("n_positions", "1048577"), "n_positions: 1048577 is larger than the limit 1048576");
  rejects(with("vocab_size", "16777217"), "vocab_size: 16777217 is larger than the limit 16777216");
  rejects(with("vocab_size", "18446744073709551615"), "vocab_size: 18446744073709551615 is larger");
  rejects(with("n_inner", "4294967296"), "n_inner: 4294967296 is larger than the limit 1048576");
  rejects(with("vocab_size", ""), "cfg.json: vocab_size: missing");
  rejects(with("n_positions", ""), "cfg.json: n_ctx: missing");
  rejects(with("n_head", "3"), "cfg.json: n_head: n_embd 8 is not divisible by n_head 3");
  rejects(with("n_head", "16"), "n_embd 8 is not divisible by n_head 16");
  rejects(with("layer_norm_epsilon", "0"),
          "cfg.json: layer_norm_epsilon: must be a finite number > 0 (as a float), got 0");
  rejects(with("layer_norm_epsilon", "-1e-5"), "layer_norm_epsilon: must be a finite number > 0");
  rejects(with("layer_norm_epsilon", "1e-50"),
          "layer_norm_epsilon: must be a finite number > 0 (as a float), got 1e-50");
  rejects(with("layer_norm_epsilon", "1e300"), "layer_norm_epsilon: must be a finite number > 0");
  rejects(with("layer_norm_epsilon", "\"1e-5\""),
          "cfg.json: layer_norm_epsilon: must be a number, got string 1e-5");
  rejects(with("activation_function", "\"mish\""),
          "cfg.json: activation_function: unknown value mish (expected one of: gelu_new, "
          "gelu_pytorch_tanh, gelu, relu, silu, swish)");
  rejects(with("activation_function", "1"), "activation_function: must be a string, got 1");
  rejects(with("tie_word_embeddings", "\"yes\""),
          "cfg.json: tie_word_embeddings: must be true or false, got string yes");
  rejects(with("causal", "1"), "cfg.json: causal: must be true or false, got 1");
  rejects(with("norm_position", "\"middle\""),
          "norm_position: unknown value middle (expected one of: pre, post)");
  rejects(with("position_embedding", "\"rotary\""), "position_embedding: unknown value rotary");
  rejects(with("layer_norm_formula", "\"rmsnorm\""), "layer_norm_formula: unknown value rmsnorm");
  rejects(R"({"vocab_size": 16, "n_positions": 8, "n_embd": 1, "n_layer": 2, "n_head": 1,
              "layer_norm_formula": "std_plus_eps"})",
          "cfg.json: layer_norm_formula: std_plus_eps (unbiased std) needs n_embd >= 2");
  rejects(with("attention_scale", "0"), "cfg.json: attention_scale: must be a finite number > 0");
  rejects(with("attention_scale", "0.5").insert(1, "\"scale_attn_weights\": false, "),
          "attention_scale: conflicts with scale_attn_weights false");
  rejects(with("scale_attn_by_inverse_layer_idx", "true"),
          "scale_attn_by_inverse_layer_idx: true is not supported");
  rejects(with("eos_token_id", "16"),
          "cfg.json: eos_token_id: 16 is not a token id (vocab_size 16)");
  rejects(with("eos_token_id", "-1"), "eos_token_id: -1 is not a token id");
  rejects(with("eos_token_id", "[1]"), "eos_token_id: must be an integer, got an array");
  rejects(with("model_type", "\"llama\""),
          "cfg.json: model_type: llama is not supported (gpt2, bert, marian, t5)");
}

TEST_CASE("config: text that is not a JSON object") {
  rejects("{\"n_embd\": 8,\n \"n_head\": }",
          "cfg.json: invalid JSON at byte 26: parse error at line 2, column 12");
  rejects("", "cfg.json: invalid JSON at byte 1");
  rejects("{\"a\": 1e999}", "cfg.json: invalid JSON");
  rejects("[1, 2]", "cfg.json: a JSON array, not an object");
  rejects("{\"vocab_size\": 16} trailing",
          "cfg.json: invalid JSON at byte 22: parse error at line 1, column 22");
  std::string deep(100000, '[');
  rejects(deep, "cfg.json: invalid JSON at byte 100001");
}

TEST_CASE("config: load_config reads a file and names it") {
  test::TempDir dir;
  test::write_file(dir / "config.json", published(768, 12, 12));
  CHECK(model::load_config(dir / "config.json").n_embd == 768);
  CHECK_THROWS_WITH_AS(model::load_config(dir / "absent.json"),
                       doctest::Contains("absent.json: no such file"), std::runtime_error);
  test::write_file(dir / "bad.json", with("n_embd", "0"));
  const std::string message = (dir / "bad.json").string() + ": n_embd: must be at least 1";
  CHECK_THROWS_WITH_AS(model::load_config(dir / "bad.json"), doctest::Contains(message.c_str()),
                       std::runtime_error);
}
