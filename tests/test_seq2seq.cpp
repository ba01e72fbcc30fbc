// Encoder-decoders against Hugging Face's own outputs: tests/data/hf/marian, t5-v1_0, t5-v1_1,
// t5-narrow and t5-wide were saved by transformers' save_pretrained (MarianMTModel,
// T5ForConditionalGeneration), with the encoder's output, the decoder's teacher-forced logits
// and generate()'s ids on fixed sources (tests/data/hf/README.md). The layout check against an
// implementation nobody here wrote: the file's names, the fused self-attention, the
// cross-attention over the encoder's output, Marian's scaled embeddings and sinusoids in halves,
// final_logits_bias, and generation's forced eos; T5's RMSNorm, relative position bias
// (bidirectional in the encoder, causal in the decoder), unscaled attention, gated GELU (v1.1),
// output scale (v1.0), and attention narrower or wider than the model (t5-narrow, t5-wide).
//
// Tolerance: 1e-4 of the row's scale (its largest |value|, at least 1) for the encoder's output
// and the logits, fp32 weights, from the CPU reference and from the GPU under both kernel sets:
// the references are float64 runs of the saved float32 weights, and the engine's fp32 sums over
// C = 32 or 64 and F = 64 stay far inside it. Generated ids: identical.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "model/formats/checkpoint.h"
#include "model/formats/dtype.h"
#include "model/formats/relative_bias.h"
#include "model/formats/safetensors.h"
#include "model/forward/cpu_model.h"
#include "model/forward/gpu_model.h"
#include "model/forward/seq2seq.h"
#include "model/forward/submissions.h"
#include "model/generation/seq2seq_generate.h"
#include "model/training/parameters.h"
#include "tests/compare.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/hf_expected.h"
#include "tests/model_fixture.h"
#include "model/formats/random_checkpoint.h"

namespace {

// Row b of an id array, without the positions its mask (if given) leaves out.
std::vector<int32_t> ids_of(const test::Array& ids, size_t b, const test::Array* mask = nullptr) {
  std::vector<int32_t> out;
  for (size_t t = 0; t < ids.shape[1]; t++)
    if (!mask || mask->row(b)[t] != 0) out.push_back(static_cast<int32_t>(ids.row(b)[t]));
  return out;
}

// generate()'s ids without the start token, and up to the first eos: generate() pads a sequence
// that ended early to the batch's length, where the engine's ends at its eos.
std::vector<int32_t> generated(const nlohmann::json& row, const model::Config& c) {
  std::vector<int32_t> ids = row;
  ids.erase(ids.begin());
  const auto eos = std::find(ids.begin(), ids.end(), c.eos_token_id.value_or(-1));
  if (eos != ids.end()) ids.erase(eos + 1, ids.end());
  return ids;
}

nlohmann::json expected_json(const std::filesystem::path& dir) {
  std::ifstream in(dir / "expected.json");
  return nlohmann::json::parse(in);
}

// tests/data/t5-dkv/<name>: a T5 whose attention is not the model's width, with the float64
// reference's outputs (tools/reference/seq2seq_ref.py --write-dkv).
std::filesystem::path dkv(const char* name) {
  return test::source_dir() / "tests/data/t5-dkv" / name;
}

// The encoder's output, the teacher-forced logits (all at once, then one cached step at a time)
// and the greedy and beam ids of every source, against a fixture folder's expected outputs.
void check_fixture(model::Seq2Seq& m, const std::filesystem::path& dir, const std::string& device) {
  const std::string name = dir.filename().string();
  const auto e = test::read_expected(dir / "expected.safetensors");
  const nlohmann::json ids = expected_json(dir);
  const model::Config& c = m.config();
  const size_t C = c.n_embd, V = c.n_vocab;
  const test::Array &input = e.at("input_ids"), &mask = e.at("attention_mask");
  const test::Array &dec = e.at("decoder_input_ids"), &hidden = e.at("encoder_hidden");
  const test::Array& logits = e.at("logits");
  for (size_t b = 0; b < input.shape[0]; b++) {
    CAPTURE(name);
    CAPTURE(device);
    CAPTURE(b);
    const std::vector<int32_t> source = ids_of(input, b, &mask);
    const std::vector<float> h = m.set_source(source);
    REQUIRE(h.size() == source.size() * C);
    CHECK(test::worst_scaled(h, hidden.slice(b * input.shape[1] * C, source.size() * C), C) < 1e-4);

    const std::vector<int32_t> target = ids_of(dec, b);
    const std::vector<float> got = m.decoder().logits(target);
    REQUIRE(got.size() == target.size() * V);
    const auto ref = logits.slice(b * target.size() * V, target.size() * V);
    CHECK(test::worst_scaled(got, ref, V) < 1e-4);
    m.decoder().reset();
    for (size_t t = 0; t < target.size(); t++) {
      CAPTURE(t);
      const std::vector<float> row = m.decoder().next(std::span(&target[t], 1), 0).logits;
      CHECK(test::worst_scaled(row, std::span(ref).subspan(t * V, V), V) < 1e-4);
    }

    CHECK(model::greedy(m, source, ids["generate"]["max_new_tokens"]) == generated(ids["greedy"][b], c));

    // Beam search with the settings the fixture's generate() ran.
    for (const char* key : {"beams4", "beams4_ngram"}) {
      CAPTURE(key);
      const nlohmann::json& js = ids[std::string(key) == "beams4" ? "beam_settings" : "beam_ngram_settings"];
      model::BeamSettings s;
      s.beams = js["num_beams"];
      s.length_penalty = js["length_penalty"];
      s.early_stopping = js["early_stopping"] ? model::BeamSettings::Stop::Early
                                              : model::BeamSettings::Stop::Heuristic;
      s.no_repeat_ngram = js.value("no_repeat_ngram_size", 0u);
      s.max_new_tokens = ids["generate"]["max_new_tokens"];
      CHECK(model::beam(m, source, s) == generated(ids[key][b], c));
    }
  }
}

// check_fixture on the GPU under both kernel sets, with beams rerun from scratch (1 slot) and
// each in a slot of its own (4).
void check_fixture_on_gpu(test::Gpu& g, const std::filesystem::path& dir) {
  auto ck = model::Checkpoint::load(dir);
  for (vk::KernelSet set : test::kKernelSets)
    for (uint32_t slots : {1u, 4u}) {
      model::GpuModelOptions o;
      o.precision = model::Precision::F32;
      o.slots = slots;
      auto m = model::make_gpu_seq2seq(*ck, g.with_kernels(set), o);
      check_fixture(*m, dir, m->decoder().device_name() + ", slots " + std::to_string(slots));
    }
}

// A random checkpoint of config c in its library's file layout, std 1 / sqrt(C) (activations of
// order 1): an S-token source and T target tokens teacher-forced (`start` first) on the GPU
// under both kernel sets against the CPU reference, 1e-4 of the row's scale, for the encoder's
// output and the logits; then `steps` tokens one at a time from the cache, each the same
// logits as its teacher-forced row.
void check_width(test::Gpu& g, const model::Config& c, size_t S, size_t T, int32_t start,
                 size_t steps) {
  const test::TinyModel random(c, test::unit_scale(c));
  const auto& checkpoint = random.checkpoint;
  CHECK(checkpoint->warnings().empty());
  std::vector<int32_t> source(S), target(T);
  for (uint32_t t = 0; t < source.size(); t++) source[t] = static_cast<int32_t>((t * 7919u + 3) % 7999);
  for (uint32_t t = 0; t < target.size(); t++) target[t] = static_cast<int32_t>((t * 104729u + 5) % 7999);
  target[0] = start;
  auto cpu = model::make_cpu_seq2seq(*checkpoint, model::Precision::F32);
  const std::vector<float> hidden = cpu->set_source(source);
  const std::vector<float> logits = cpu->decoder().logits(target);
  for (vk::KernelSet set : test::kKernelSets) {
    CAPTURE(vk::kernel_set_name(set));
    model::GpuModelOptions o;
    o.precision = model::Precision::F32;
    auto gpu = model::make_gpu_seq2seq(*checkpoint, g.with_kernels(set), o);
    CHECK(test::close_rows("encoder output", gpu->set_source(source), hidden, c.n_embd, 1e-4));
    CHECK(test::close_rows("logits", gpu->decoder().logits(target), logits, c.n_vocab, 1e-4));
    gpu->decoder().reset();
    for (size_t t = 0; t < steps; t++) {
      const std::vector<float> row = gpu->decoder().next(std::span(&target[t], 1), 0).logits;
      CHECK(test::close_rows("decoded step", row,
                             std::span(logits).subspan(t * c.n_vocab, c.n_vocab), c.n_vocab, 1e-4));
    }
  }
}

}  // namespace

TEST_CASE("seq2seq: a Marian folder loads as an encoder-decoder") {
  auto ck = model::Checkpoint::load(test::hf("marian"));
  const model::Config& c = ck->config();
  CHECK(c.family == model::Family::EncoderDecoder);
  CHECK(c.n_encoder_layer == 2);
  CHECK(c.activation == model::Activation::Silu);
  CHECK(c.embed_scale == doctest::Approx(std::sqrt(32.0)));
  CHECK(c.decoder_start_token_id == 63);
  CHECK(c.forced_eos_token_id == 0);
  CHECK(ck->warnings().empty());
  auto enc = ck->side(model::Family::Encoder);
  CHECK(enc->config().family == model::Family::Encoder);
  CHECK_FALSE(enc->config().causal);
  CHECK(enc->tensor("h.1.attn.c_attn.weight").shape == std::vector<uint64_t>{32, 96});
  auto dec = ck->side(model::Family::Decoder);
  CHECK(dec->config().cross_attention);
  CHECK(dec->tensor("h.0.cross.c_k.weight").shape == std::vector<uint64_t>{32, 32});
  CHECK(dec->tensor("head.bias").shape == std::vector<uint64_t>{64});
  // A decoder command or an encoder's is told what to use.
  CHECK_THROWS_WITH(model::make_cpu_model(*ck, model::Precision::F32),
                    doctest::Contains("an encoder-decoder (Marian): use seq2seq"));
  // A T5 folder is named as T5.
  const auto t5 = model::Checkpoint::load(test::source_dir() / "tests" / "data" / "hf" / "t5-v1_0");
  CHECK_THROWS_WITH(model::make_cpu_model(*t5, model::Precision::F32),
                    doctest::Contains("an encoder-decoder (T5): use seq2seq"));
}

TEST_CASE("seq2seq: the CPU reference matches Hugging Face's Marian") {
  auto ck = model::Checkpoint::load(test::hf("marian"));
  auto m = model::make_cpu_seq2seq(*ck, model::Precision::F32);
  check_fixture(*m, test::hf("marian"), "CPU reference");
}

TEST_CASE("seq2seq: the GPU matches Hugging Face's Marian under both kernel sets") {
  GPU_TEST(g);
  check_fixture_on_gpu(g, test::hf("marian"));
}

TEST_CASE("seq2seq: a decoder with cross-attention needs its source") {
  auto ck = model::Checkpoint::load(test::hf("marian"));
  auto m = model::make_cpu_seq2seq(*ck, model::Precision::F32);
  const std::vector<int32_t> start{63};
  CHECK_THROWS_WITH(m->decoder().logits(start), doctest::Contains("after set_source()"));
  CHECK_THROWS_WITH(m->set_source({}), doctest::Contains("an empty source"));
  CHECK_THROWS_WITH(m->set_source(std::vector<int32_t>(65, 5)),
                    doctest::Contains("65 tokens: the model takes at most 64"));
  CHECK_THROWS_WITH(m->set_source(std::vector<int32_t>{5, 64}),
                    doctest::Contains("token id 64 at position 1"));
}


TEST_CASE("seq2seq: the config round-trips through config.json") {
  const model::Config c = model::marian_config(64, 2, 4, 100);
  CHECK(model::parse_config(model::config_json(c), "x") == c);
  const auto file = model::parse_config(
      test::read_file(test::hf("marian") / "config.json"), "marian/config.json");
  CHECK(model::parse_config(model::config_json(file), "x") == file);
}

// The shapes users run: opus-mt's width (C = 512, 8 heads of 64, F = 2048, swish), one layer a
// side, a 200-token source and 64 target tokens teacher-forced (so cross-attention's 64 queries
// read 200 keys, and the causal self-attention 64), an 8,000-token vocabulary. Random weights in
// Marian's own file layout with std 1 / sqrt(C) (activations of order 1); the GPU under both
// kernel sets against the CPU reference, 1e-4 of the row's scale as above, for the encoder's
// output and the logits.
TEST_CASE("seq2seq: opus-mt's width, GPU against the CPU reference" *
          doctest::test_suite("shapes")) {
  GPU_TEST(g);
  check_width(g, model::marian_config(512, 1, 8, 8000), 200, 64, 7999, 8);  // start: pad, V - 1
}

// The attention taps of an encoder-decoder (`gpt2vk attention` on a Marian or T5 folder): the
// encoder's self-attention [H, S, S], the decoder's causal self-attention [H, T, T] and its
// cross-attention over the source [H, T, S], every layer, from the GPU's own kernels under both
// kernel sets against the CPU reference's, test_model.cpp's tap tolerance (|gpu - cpu| <= 1e-5 +
// 1e-4 * cpu). Each cross-attention row sums to 1 over all S source tokens and is far from
// uniform (else a transposed or shifted map would pass too). A Marian of 8 heads of 32.
TEST_CASE("seq2seq: the attention taps, self and cross, GPU against the CPU reference") {
  GPU_TEST(g);
  const model::Config c = model::marian_config(256, 2, 8, 1000);
  const uint32_t S = 40, T = 24, H = c.n_head;
  const test::TinyModel random(c, test::unit_scale(c));
  const auto& checkpoint = random.checkpoint;
  std::vector<int32_t> source(S), target(T);
  for (uint32_t t = 0; t < S; t++) source[t] = static_cast<int32_t>((t * 7919u + 3) % 999);
  for (uint32_t t = 0; t < T; t++) target[t] = static_cast<int32_t>((t * 104729u + 5) % 999);
  // [layer] of the encoder's, the decoder's and the cross maps.
  struct Maps {
    std::vector<std::vector<float>> encoder, decoder, cross;
  };
  const auto run = [&](model::Seq2Seq& m) {
    m.encoder().set_attention_taps(true);
    m.decoder().set_attention_taps(true);
    m.set_source(source);
    const std::vector<std::vector<float>> enc = m.encoder().attention_probs();
    m.decoder().logits(target);
    return Maps{enc, m.decoder().attention_probs(), m.decoder().cross_attention_probs()};
  };
  auto cpu = model::make_cpu_seq2seq(*checkpoint, model::Precision::F32);
  const Maps ref = run(*cpu);
  REQUIRE(ref.cross.size() == c.n_layer);
  for (uint32_t l = 0; l < c.n_layer; l++) {
    CHECK(ref.encoder[l].size() == size_t{H} * S * S);
    CHECK(ref.decoder[l].size() == size_t{H} * T * T);
    REQUIRE(ref.cross[l].size() == size_t{H} * T * S);
    for (size_t row = 0; row < size_t{H} * T; row++) {
      double sum = 0;
      for (uint32_t j = 0; j < S; j++) sum += double{ref.cross[l][row * S + j]};
      CHECK(std::fabs(sum - 1.0) < 1e-5);
    }
    CHECK(*std::max_element(ref.cross[l].begin(), ref.cross[l].end()) > 4.0f / S);
  }
  const test::Tolerance tap{1e-5, 1e-4};
  for (vk::KernelSet set : test::kKernelSets) {
    const std::string kernels = vk::kernel_set_name(set);
    CAPTURE(kernels);
    model::GpuModelOptions o;
    o.precision = model::Precision::F32;
    auto gpu = model::make_gpu_seq2seq(*checkpoint, g.with_kernels(set), o);
    const Maps got = run(*gpu);
    REQUIRE(got.cross.size() == c.n_layer);
    for (uint32_t l = 0; l < c.n_layer; l++) {
      CAPTURE(l);
      CHECK(test::close("encoder self-attention", got.encoder[l], ref.encoder[l], tap));
      CHECK(test::close("decoder self-attention", got.decoder[l], ref.decoder[l], tap));
      CHECK(test::close("cross-attention", got.cross[l], ref.cross[l], tap));
    }
    // One layer alone (the same target from position 0 again): the other's maps stay empty.
    gpu->decoder().set_attention_taps(true, 1);
    gpu->decoder().reset();
    gpu->decoder().logits(target);
    CHECK(gpu->decoder().cross_attention_probs()[0].empty());
    CHECK(test::close("layer 1 alone", gpu->decoder().cross_attention_probs()[1], ref.cross[1], tap));
    // Off: no maps.
    gpu->decoder().set_attention_taps(false);
    gpu->decoder().reset();
    gpu->decoder().logits(target);
    CHECK(gpu->decoder().cross_attention_probs().empty());
  }
}

TEST_CASE("seq2seq: T5 folders load as encoder-decoders") {
  for (const char* name : {"t5-v1_0", "t5-v1_1"}) {
    CAPTURE(name);
    auto ck = model::Checkpoint::load(test::hf(name));
    const model::Config& c = ck->config();
    const bool gated = std::string(name) == "t5-v1_1";
    CHECK(c.family == model::Family::EncoderDecoder);
    CHECK(c.layer_norm == model::LayerNormKind::Rms);
    CHECK(c.relative_buckets == 8);
    CHECK(c.relative_max_distance == 20);
    CHECK(c.attention_scale == 1.0f);
    CHECK(c.gated_mlp == gated);
    CHECK(c.activation == (gated ? model::Activation::GeluTanh : model::Activation::Relu));
    // v1.0's config says scale_decoder_outputs, v1.1's does not.
    CHECK(c.output_scale == doctest::Approx(gated ? 1.0 : 1.0 / std::sqrt(32.0)));
    CHECK(c.decoder_start_token_id == 0);
    CHECK(c.eos_token_id == 1);
    CHECK(ck->warnings().empty());
    auto enc = ck->side(model::Family::Encoder);
    CHECK_FALSE(enc->config().causal);
    // Each side's table presented as the attention op reads it, [H, 2 n_ctx - 1]: the file's
    // [buckets, H] expanded in the side's direction (the encoder's bidirectional).
    auto dec = ck->side(model::Family::Decoder);
    auto file = model::SafeTensors::open(test::hf(name) / "model.safetensors");
    for (auto [side, stack] : {std::pair{enc.get(), "encoder"}, {dec.get(), "decoder"}}) {
      CAPTURE(stack);
      const model::TensorView& t = side->tensor("rel_bias.weight");
      CHECK(t.shape == std::vector<uint64_t>{4, 2 * uint64_t{c.n_ctx} - 1});
      const std::string table =
          std::string(stack) + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight";
      CHECK(model::to_f32(t) ==
            model::relative_bias_rows(side->config(), model::to_f32(*file->find(table))));
    }
    std::vector<float> distinct(8 * 4);
    for (size_t i = 0; i < distinct.size(); i++) distinct[i] = static_cast<float>(i);
    CHECK(model::relative_bias_rows(enc->config(), distinct) !=
          model::relative_bias_rows(dec->config(), distinct));
    // Parameters counted as learned: the tables, not their expansions.
    uint64_t params = 0;
    for (const model::TensorView& v : file->tensors())
      if (v.name != "lm_head.weight" && !v.name.ends_with("embed_tokens.weight")) params += v.elements();
    CHECK(model::parameter_count(c) == params);
    CHECK(enc->tensor("ln_f.weight").shape == std::vector<uint64_t>{32});
    CHECK(dec->tensor("h.1.mlp.c_fc.weight").shape == std::vector<uint64_t>{32, gated ? 128u : 64u});
    CHECK(dec->tensor("h.0.cross.c_v.weight").shape == std::vector<uint64_t>{32, 32});
    CHECK(model::parse_config(model::config_json(c), "x") == c);
  }
  for (bool gated : {false, true}) {
    const model::Config c = model::t5_config(64, 128, 2, 4, 100, gated);
    CHECK(model::parse_config(model::config_json(c), "x") == c);
  }
}

// t5-narrow and t5-wide: tests/data/t5-dkv's shapes (attention narrower and wider than the
// model), as transformers saves them.
TEST_CASE("seq2seq: the CPU reference matches Hugging Face's T5 (v1.0, v1.1, d_kv)") {
  for (const char* name : {"t5-v1_0", "t5-v1_1", "t5-narrow", "t5-wide"}) {
    auto ck = model::Checkpoint::load(test::hf(name));
    auto m = model::make_cpu_seq2seq(*ck, model::Precision::F32);
    check_fixture(*m, test::hf(name), "CPU reference");
  }
}

TEST_CASE("seq2seq: the GPU matches Hugging Face's T5 under both kernel sets") {
  GPU_TEST(g);
  for (const char* name : {"t5-v1_0", "t5-v1_1", "t5-narrow", "t5-wide"})
    check_fixture_on_gpu(g, test::hf(name));
}

// The shapes users run: t5-small's width (C = 512, 8 heads of 64, F = 2048; v1.0's ReLU and
// v1.1's gated GELU), 32 buckets up to 128 apart, one layer a side, a 300-token source (so the
// encoder's bias spans every bucket, the logarithmic ones and the saturated last) and 140 target
// tokens teacher-forced, an 8,000-token vocabulary. GPU under both kernel sets against the CPU
// reference, 1e-4 of the row's scale, then decoding step by step from the cache.
TEST_CASE("seq2seq: t5-small's width, GPU against the CPU reference" *
          doctest::test_suite("shapes")) {
  GPU_TEST(g);
  for (bool gated : {false, true}) {
    CAPTURE(gated);
    check_width(g, model::t5_config(512, 2048, 1, 8, 8000, gated), 300, 140, 0, 6);
  }
}

TEST_CASE("seq2seq: a T5 config the engine cannot run is a clear error") {
  auto parse = [](nlohmann::json j = nlohmann::json::object()) {
    nlohmann::json base = {{"model_type", "t5"}, {"vocab_size", 100}, {"d_model", 512},
                           {"d_kv", 64}, {"d_ff", 1024}, {"num_layers", 2}, {"num_heads", 8}};
    base.update(j);
    return model::parse_config(base.dump(), "config.json");
  };
  CHECK(parse().relative_buckets == 32);  // T5Config's defaults
  CHECK(parse().relative_max_distance == 128);
  CHECK(parse().eos_token_id == 1);
  CHECK_FALSE(parse({{"eos_token_id", nullptr}}).eos_token_id);  // null: none
  CHECK_THROWS_WITH(parse({{"d_kv", 65536}}),
                    doctest::Contains("d_kv: 65536 x num_heads 8 is more than 65536 wide"));
  CHECK_THROWS_WITH(parse({{"feed_forward_proj", "gated-gelu-x"}}),
                    doctest::Contains("feed_forward_proj: gated-gelu-x is not ACT or gated-ACT"));
  CHECK_THROWS_WITH(parse({{"feed_forward_proj", "tanh"}}),
                    doctest::Contains("activation tanh is not supported"));
  CHECK_THROWS_WITH(parse({{"relative_attention_num_buckets", 2}}),
                    doctest::Contains("relative_attention_num_buckets: must be at least 4"));
  CHECK_THROWS_WITH(parse({{"vocab_size", 0}}), doctest::Contains("vocab_size: must be at least 1"));
}

// Attention whose width A = d_kv x num_heads is not d_model (C): t5-v1_1-small's and
// flan-t5-small's 6 heads of 64 in 512 (A < C, and C no multiple of H), t5-3b's 32 heads of 128
// in 1024 (A > C). The config keeps A where it differs, and writes it back as d_kv.
TEST_CASE("seq2seq: T5 configs whose attention is not d_model wide") {
  auto parse = [](nlohmann::json j) {
    nlohmann::json base = {{"model_type", "t5"}, {"vocab_size", 100}, {"d_ff", 1024}, {"num_layers", 2}};
    base.update(j);
    return model::parse_config(base.dump(), "config.json");
  };
  const model::Config small = parse({{"d_model", 512}, {"num_heads", 6}, {"d_kv", 64}});
  CHECK(small.n_attn == 384);
  CHECK(small.attn_width() == 384);
  CHECK(small.head_dim() == 64);
  const model::Config t5_3b = parse({{"d_model", 1024}, {"num_heads", 32}, {"d_kv", 128}});
  CHECK(t5_3b.attn_width() == 4096);
  CHECK(t5_3b.head_dim() == 128);
  const model::Config same = parse({{"d_model", 512}, {"num_heads", 8}, {"d_kv", 64}});
  CHECK(same.n_attn == 0);  // A = C: kept as 0, as every other family has it
  CHECK(same.attn_width() == 512);
  for (const model::Config& c : {small, t5_3b, same}) {
    CHECK(model::parse_config(model::config_json(c), "x") == c);
    for (const model::Config& side : {model::encoder_side(c), model::decoder_side(c)})
      CHECK(side.attn_width() == c.attn_width());
  }
  CHECK(nlohmann::json::parse(model::config_json(small))["d_kv"] == 64);
  CHECK(model::t5_config(512, 1024, 8, 6, 100, true, 64) ==
        parse({{"d_model", 512}, {"num_heads", 6}, {"d_kv", 64}, {"d_ff", 1024}, {"num_layers", 8},
               {"num_decoder_layers", 8}, {"feed_forward_proj", "gated-gelu"},
               {"tie_word_embeddings", false}, {"eos_token_id", 1}, {"pad_token_id", 0},
               {"decoder_start_token_id", 0}}));
  // Only T5's keys can say so: another family's config.json would drop it.
  model::Config gpt2 = model::gpt2_config(768, 12, 12);
  gpt2.n_attn = 384;
  CHECK_THROWS_WITH(model::config_json(gpt2),
                    doctest::Contains("attention 384 wide in a model 768 wide"));
  // Training's buffers are the model's width throughout: it says so rather than misread.
  CHECK_THROWS_WITH(model::training::Parameters{gpt2},
                    doctest::Contains("training needs attention as wide as the model"));
  // The planner's cost of a block follows A: a wider attention costs more.
  const model::SubmissionRates rates;
  CHECK(model::block_seconds(model::decoder_side(t5_3b), 64, 64, model::DType::F16, rates) >
        model::block_seconds(model::decoder_side(parse({{"d_model", 1024}, {"num_heads", 32},
                                                        {"d_kv", 32}})),
                             64, 64, model::DType::F16, rates));
}

// tests/data/t5-dkv: narrow (3 heads of 16 in 64, gated GELU, untied, one decoder layer to the
// encoder's two) and wide (4 heads of 16 in 32, ReLU, tied and scaled): the file's q, k, v
// [A, C] and o [C, A] presented as c_attn [C, 3A], c_proj [A, C], cross-attention's [C, A] and
// [A, C]; nothing left over, every parameter counted.
TEST_CASE("seq2seq: T5 folders whose attention is not d_model wide load") {
  for (auto [name, C, A] : {std::tuple{"narrow", 64u, 48u}, {"wide", 32u, 64u}}) {
    CAPTURE(name);
    auto ck = model::Checkpoint::load(dkv(name));
    const model::Config& c = ck->config();
    CHECK(c.n_embd == C);
    CHECK(c.attn_width() == A);
    CHECK(c.head_dim() == 16);
    CHECK(ck->warnings().empty());
    auto dec = ck->side(model::Family::Decoder);
    auto enc = ck->side(model::Family::Encoder);
    using Shape = std::vector<uint64_t>;
    CHECK(enc->tensor("h.1.attn.c_attn.weight").shape == Shape{C, 3 * A});
    CHECK(enc->tensor("h.1.attn.c_proj.weight").shape == Shape{A, C});
    CHECK(dec->tensor("h.0.attn.c_attn.weight").shape == Shape{C, 3 * A});
    for (const char* t : {"h.0.cross.c_q.weight", "h.0.cross.c_k.weight", "h.0.cross.c_v.weight"})
      CHECK(dec->tensor(t).shape == Shape{C, A});
    CHECK(dec->tensor("h.0.cross.c_proj.weight").shape == Shape{A, C});
    auto file = model::SafeTensors::open(dkv(name) / "model.safetensors");
    uint64_t params = 0;  // the file has lm_head.weight only where the head is untied
    for (const model::TensorView& v : file->tensors()) params += v.elements();
    CHECK(model::parameter_count(c) == params);
    CHECK(model::parse_config(model::config_json(c), "x") == c);
  }
}

// The engine against the float64 reference (tools/reference/seq2seq_ref.py, written from
// transformers' T5 definition: q, k, v Linear(d_model, d_kv x heads), o the reverse): encoder
// output, teacher-forced logits and each cached step's, 1e-4 of the row's scale as above (sums
// over C = 64 or 32, A = 48 or 64, F = 64); greedy and beam ids identical.
TEST_CASE("seq2seq: the CPU reference matches the float64 reference where d_kv x heads != d_model") {
  for (const char* name : {"narrow", "wide"}) {
    auto ck = model::Checkpoint::load(dkv(name));
    auto m = model::make_cpu_seq2seq(*ck, model::Precision::F32);
    check_fixture(*m, dkv(name), "CPU reference");
  }
}

TEST_CASE("seq2seq: the GPU matches the float64 reference where d_kv x heads != d_model") {
  GPU_TEST(g);
  for (const char* name : {"narrow", "wide"}) check_fixture_on_gpu(g, dkv(name));
}

// The shapes users run: t5-v1_1-small's and flan-t5-small's width (C = 512, 6 heads of 64, F =
// 1024, gated GELU) and t5-3b's heads (128 wide; here 4 of them in C = 256, A = 512), one layer
// a side, an 80-token source and 24 target tokens, GPU under both kernel sets against the CPU
// reference, 1e-4 of the row's scale, then decoding step by step from the cache.
TEST_CASE("seq2seq: t5-v1_1-small's and t5-3b's attention, GPU against the CPU reference" *
          doctest::test_suite("shapes")) {
  GPU_TEST(g);
  check_width(g, model::t5_config(512, 1024, 1, 6, 8000, true, 64), 80, 24, 0, 3);
  check_width(g, model::t5_config(256, 512, 1, 4, 8000, false, 128), 80, 24, 0, 3);
}
