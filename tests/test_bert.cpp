// BERT encoders against Hugging Face's own outputs: the folders in tests/data/hf were saved by
// transformers' save_pretrained and sentence-transformers' save, with what those libraries
// computed on fixed inputs (tests/data/hf/README.md). This is the layout check against an
// implementation nobody here wrote: the file's names, the nn.Linear layout, the fused query,
// key and value, the post-norm block, token types and each head.
//
// Tolerance: 1e-4 of the row's scale (its largest |value|, at least 1), for the hidden states
// and each head's logits, at fp32 weights, from the CPU reference and from the GPU under both
// kernel sets. The references are float64 runs of the saved float32 weights; the engine's fp32
// accumulations over C = 32 and F = 64 stay orders of magnitude inside it. Sentence embeddings
// (mean pooling, normalised): cosine to the reference >= 0.99999.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/formats/checkpoint.h"
#include "model/forward/cpu_model.h"
#include "model/forward/encoder.h"
#include "model/forward/gpu_model.h"
#include "tests/compare.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/hf_expected.h"
#include "model/formats/random_checkpoint.h"
#include "tests/model_fixture.h"

namespace {

// One input of a fixture: a sequence's ids and types without its padding, and where its rows
// sit in the expected arrays.
struct Input {
  std::vector<int32_t> ids, types;
  std::string ids_key;  // "input_ids" or "pair_input_ids"
  size_t row;           // its row of the batch
};

std::vector<Input> inputs(const std::map<std::string, test::Array>& e) {
  std::vector<Input> all;
  const test::Array &ids = e.at("input_ids"), &mask = e.at("attention_mask");
  // sentence-transformers passes no token types: all 0.
  const test::Array types = e.contains("token_type_ids")
                                ? e.at("token_type_ids")
                                : test::Array{ids.shape, std::vector<double>(ids.values.size())};
  for (size_t b = 0; b < ids.shape[0]; b++) {
    Input in{{}, {}, "input_ids", b};
    for (size_t t = 0; t < ids.shape[1]; t++)
      if (mask.row(b)[t] != 0) {
        in.ids.push_back(static_cast<int32_t>(ids.row(b)[t]));
        in.types.push_back(static_cast<int32_t>(types.row(b)[t]));
      }
    all.push_back(in);
  }
  if (e.contains("pair_input_ids")) {
    Input in{{}, {}, "pair_input_ids", 0};
    for (double v : e.at("pair_input_ids").values) in.ids.push_back(static_cast<int32_t>(v));
    for (double v : e.at("pair_token_type_ids").values) in.types.push_back(static_cast<int32_t>(v));
    all.push_back(in);
  }
  return all;
}

// The hidden states and head of every input, checked against the fixture's float64 outputs.
void check_fixture(model::Encoder& enc, const char* name) {
  const auto e = test::read_expected(test::hf(name) / "expected.safetensors");
  const model::Config& c = enc.config();
  for (const Input& in : inputs(e)) {
    CAPTURE(name);
    CAPTURE(in.ids_key);
    CAPTURE(in.row);
    CAPTURE(enc.device_name());
    const model::Encoded out = enc.encode(in.ids, in.types);
    const size_t T = in.ids.size(), C = c.n_embd;
    const bool pair = in.ids_key == "pair_input_ids";
    const test::Array& hidden = e.at(pair ? "pair_hidden" : "hidden");
    const std::vector<double> h = hidden.slice(in.row * hidden.shape[1] * C, T * C);
    REQUIRE(out.hidden.size() == T * C);
    CHECK(test::worst_scaled(out.hidden, h, C) < 1e-4);

    const test::Array& logits = e.at(pair ? "pair_logits" : "logits");
    const size_t W = c.head_width(), rows = c.head_rows(static_cast<uint32_t>(T));
    REQUIRE(W == logits.width());
    const size_t per_input = logits.shape.size() == 3 ? logits.shape[1] * W : W;
    const std::vector<double> l = logits.slice(in.row * per_input, rows * W);
    REQUIRE(out.logits.size() == rows * W);
    CHECK(test::worst_scaled(out.logits, l, W) < 1e-4);
  }
}

const char* const kFixtures[] = {"bert-mlm", "bert-seqcls", "bert-tokcls"};

}  // namespace

TEST_CASE("bert: the folders load with the config their architectures name") {
  auto mlm = model::Checkpoint::load(test::hf("bert-mlm"));
  CHECK(mlm->config().family == model::Family::Encoder);
  CHECK(mlm->config().head == model::EncoderHead::MaskedLm);
  CHECK(mlm->config().n_types == 2);
  CHECK(mlm->warnings().empty());
  auto cls = model::Checkpoint::load(test::hf("bert-seqcls"));
  CHECK(cls->config().labels == std::vector<std::string>{"NEG", "NEU", "POS"});
  // A sentence-transformers folder: BertModel with a pooler that mean pooling does not read.
  auto st = model::Checkpoint::load(test::hf("bert-st"));
  CHECK(st->config().head == model::EncoderHead::None);
  CHECK(st->warnings().empty());
  // Query, key and value fused as GPT-2's c_attn [C, 3C]: column C + j of row k is key's [j, k].
  const model::TensorView& qkv = mlm->tensor("h.1.attn.c_attn.weight");
  CHECK(qkv.shape == std::vector<uint64_t>{32, 96});
}

TEST_CASE("bert: the CPU reference matches Hugging Face's hidden states and heads") {
  for (const char* name : kFixtures) {
    auto ckpt = model::Checkpoint::load(test::hf(name));
    auto enc = model::make_cpu_encoder(*ckpt, model::Precision::F32);
    check_fixture(*enc, name);
  }
}

TEST_CASE("bert: the GPU matches Hugging Face's under both kernel sets") {
  GPU_TEST(g);
  for (const char* name : kFixtures) {
    auto ckpt = model::Checkpoint::load(test::hf(name));
    for (vk::KernelSet set : test::kKernelSets) {
      model::GpuModelOptions o;
      o.precision = model::Precision::F32;
      auto enc = model::make_gpu_encoder(*ckpt, g.with_kernels(set), o);
      check_fixture(*enc, name);
    }
  }
}

TEST_CASE("bert: sentence embeddings as sentence-transformers computes them") {
  GPU_TEST(g);
  const auto e = test::read_expected(test::hf("bert-st") / "expected.safetensors");
  auto ckpt = model::Checkpoint::load(test::hf("bert-st"));
  std::vector<std::unique_ptr<model::Encoder>> encoders;
  encoders.push_back(model::make_cpu_encoder(*ckpt, model::Precision::F32));
  for (vk::KernelSet set : test::kKernelSets) {
    model::GpuModelOptions o;
    o.precision = model::Precision::F32;
    encoders.push_back(model::make_gpu_encoder(*ckpt, g.with_kernels(set), o));
  }
  const size_t C = ckpt->config().n_embd;
  for (auto& enc : encoders) {
    for (const Input& in : inputs(e)) {
      CAPTURE(enc->device_name());
      CAPTURE(in.row);
      // Mean over the sequence's tokens, then unit length (modules.json: Pooling, Normalize).
      const model::Encoded out = enc->encode(in.ids, in.types, false);
      std::vector<double> mean(C, 0.0);
      for (size_t t = 0; t < in.ids.size(); t++)
        for (size_t i = 0; i < C; i++) mean[i] += double{out.hidden[t * C + i]} / double(in.ids.size());
      double norm = 0, dot = 0, ref_norm = 0;
      for (double v : mean) norm += v * v;
      const std::vector<double> ref = e.at("embeddings").row(in.row);
      for (size_t i = 0; i < C; i++) {
        dot += mean[i] / std::sqrt(norm) * ref[i];
        ref_norm += ref[i] * ref[i];
      }
      CHECK(dot / std::sqrt(ref_norm) >= 0.99999);
    }
  }
}

TEST_CASE("bert: a decoder is not an encoder, nor the other way round") {
  auto bert = model::Checkpoint::load(test::hf("bert-mlm"));
  CHECK_THROWS_WITH(model::make_cpu_model(*bert, model::Precision::F32),
                    doctest::Contains("a BERT encoder (BertForMaskedLM): it has no next-token head"));
  auto gpt2 = model::Checkpoint::load(test::source_dir() / "tests/data/models/gpt2-tiny");
  CHECK_THROWS_WITH(model::make_cpu_encoder(*gpt2, model::Precision::F32),
                    doctest::Contains("a GPT-2 decoder, not an encoder"));
  auto enc = model::make_cpu_encoder(*bert, model::Precision::F32);
  const std::vector<int32_t> ids{2, 60, 3};
  CHECK_THROWS_WITH(enc->encode({}), "no tokens to encode");
  CHECK_THROWS_WITH(enc->encode(std::vector<int32_t>(65, 2)),
                    doctest::Contains("65 tokens: the model takes at most 64"));
  CHECK_THROWS_WITH(enc->encode(ids, std::vector<int32_t>{0, 2, 0}),
                    doctest::Contains("token type 2 at position 1 is outside [0, 2)"));
  CHECK_THROWS_WITH(enc->encode(std::vector<int32_t>{2, 111}),
                    doctest::Contains("token id 111 at position 1"));
}

namespace {

// An encoder config in BERT's layout (what make-model --arch bert writes).
model::Config bert_config(uint32_t C, uint32_t layers, uint32_t heads, uint32_t V,
                          model::EncoderHead head) {
  model::Config c;
  c.family = model::Family::Encoder;
  c.n_vocab = V, c.n_ctx = 512, c.n_embd = C, c.n_layer = layers, c.n_head = heads;
  c.n_inner = 4 * C;
  c.layer_norm_epsilon = 1e-12f;
  c.activation = model::Activation::GeluErf;
  c.pre_norm = false, c.final_norm = false, c.causal = false, c.embedding_norm = true;
  c.n_types = 2;
  c.head = head;
  if (head == model::EncoderHead::SequenceClassification) c.labels = {"a", "b", "c"};
  c.tokenizer.kind = model::TokenizerKind::WordPiece;
  return c;
}

}  // namespace

TEST_CASE("bert: the config round-trips through config.json") {
  for (auto head : {model::EncoderHead::None, model::EncoderHead::MaskedLm,
                    model::EncoderHead::SequenceClassification})
    CHECK(model::parse_config(model::config_json(bert_config(64, 2, 4, 100, head)), "x") ==
          bert_config(64, 2, 4, 100, head));
}

// The shapes users run: MiniLM-L6 (C = 384, 12 heads of 32, 6 layers) with BERT's 30,522-token
// masked-LM head over 128 tokens, and BERT-base's blocks (C = 768, 12 heads of 64) over 384
// tokens, two of its twelve layers, with the classification head. Random weights in BERT's own
// file layout, drawn with std 1 / sqrt(C) so that every layer's activations stay of order 1 as
// a trained model's do (TinyModel's fixed 0.2 would make C = 768's sums ~5x that, and its
// softmax nearly one-hot); the GPU under both kernel sets against the CPU reference, 1e-4 of
// the row's scale as above.
TEST_CASE("bert: MiniLM's and BERT-base's shapes, GPU against the CPU reference" *
          doctest::test_suite("shapes")) {
  GPU_TEST(g);
  struct Shape {
    model::Config config;
    uint32_t T;
  };
  const Shape shapes[] = {
      {bert_config(384, 6, 12, 30522, model::EncoderHead::MaskedLm), 128},
      {bert_config(768, 2, 12, 1000, model::EncoderHead::SequenceClassification), 384},
  };
  for (const Shape& s : shapes) {
    const test::TinyModel random(s.config, test::unit_scale(s.config));
    const auto& checkpoint = random.checkpoint;
    std::vector<int32_t> ids(s.T), types(s.T);
    for (uint32_t t = 0; t < s.T; t++) {
      ids[t] = static_cast<int32_t>((t * 7919u + 3) % s.config.n_vocab);
      types[t] = t >= s.T / 2 ? 1 : 0;  // a pair: the second half is text B
    }
    const model::Encoded ref =
        model::make_cpu_encoder(*checkpoint, model::Precision::F32)->encode(ids, types);
    for (vk::KernelSet set : test::kKernelSets) {
      CAPTURE(s.config.n_embd);
      CAPTURE(vk::kernel_set_name(set));
      model::GpuModelOptions o;
      o.precision = model::Precision::F32;
      const model::Encoded got =
          model::make_gpu_encoder(*checkpoint, g.with_kernels(set), o)->encode(ids, types);
      CHECK(test::close_rows("hidden", got.hidden, ref.hidden, s.config.n_embd, 1e-4));
      CHECK(test::close_rows("head", got.logits, ref.logits, s.config.head_width(), 1e-4));
    }
  }
}

// A batch of sequences of different lengths (Encoder::encode_batch, `embed --batch`): on the GPU
// they run several to a pass, each padded to its pass's longest, each query over its own
// sequence's keys only. At MiniLM's width and heads (2 of its 6 layers), lengths from 1 to the
// full 128 tokens, pairs among them, four to a pass: every sequence's hidden states against the
// CPU reference's encode() of it alone, at the row-scale tolerance above, under both kernel sets.
// A query that saw another sequence's keys or a padding row would be far outside it. The passes
// are counted (2, not 9), a batch of one is encode() to the bit, and a bad sequence is named.
TEST_CASE("bert: a batch of different lengths in shared passes, against each alone") {
  GPU_TEST(g);
  const model::Config c = bert_config(384, 2, 12, 1000, model::EncoderHead::MaskedLm);
  const test::TinyModel random(c, test::unit_scale(c));
  const auto& checkpoint = random.checkpoint;
  const uint32_t lengths[] = {77, 128, 1, 100, 5, 128, 64, 33, 2};
  std::vector<std::vector<int32_t>> ids, types;
  for (size_t i = 0; i < std::size(lengths); i++) {
    const uint32_t T = lengths[i];
    ids.emplace_back(T);
    types.emplace_back(T, 0);
    for (uint32_t t = 0; t < T; t++) {
      ids[i][t] = static_cast<int32_t>((t * 7919u + 31 * i + 3) % c.n_vocab);
      if (i % 2 && t >= T / 2) types[i][t] = 1;  // odd ones are pairs
    }
  }
  std::vector<model::EncoderInput> inputs;
  for (size_t i = 0; i < ids.size(); i++)
    inputs.push_back({ids[i], i == 4 ? std::span<const int32_t>{} : std::span<const int32_t>(types[i])});
  auto cpu = model::make_cpu_encoder(*checkpoint, model::Precision::F32);
  std::vector<std::vector<float>> ref;
  for (const model::EncoderInput& in : inputs) ref.push_back(cpu->encode(in.ids, in.types, false).hidden);
  const std::vector<std::vector<float>> cpu_batch = cpu->encode_batch(inputs);
  REQUIRE(cpu_batch.size() == ref.size());
  for (size_t i = 0; i < ref.size(); i++) CHECK(cpu_batch[i] == ref[i]);

  for (vk::KernelSet set : test::kKernelSets) {
    CAPTURE(vk::kernel_set_name(set));
    model::GpuModelOptions o;
    o.precision = model::Precision::F32;
    o.encoder_batch = 4;
    auto gpu = model::make_gpu_encoder(*checkpoint, g.with_kernels(set), o);
    const std::vector<std::vector<float>> got = gpu->encode_batch(inputs);
    // Longest first: 128 128 100 77 | 64 33 5 2 | 1 (a pass of one).
    CHECK(model::gpu_stats(*gpu).submits == 3);
    REQUIRE(got.size() == ref.size());
    for (size_t i = 0; i < ref.size(); i++) {
      CAPTURE(i);
      REQUIRE(got[i].size() == size_t{lengths[i]} * c.n_embd);
      CHECK(test::close_rows("hidden", got[i], ref[i], c.n_embd, 1e-4));
    }
    const model::EncoderInput one[] = {inputs[3]};
    CHECK(gpu->encode_batch(one)[0] == gpu->encode(inputs[3].ids, inputs[3].types, false).hidden);
    const std::vector<int32_t> none;
    std::vector<model::EncoderInput> bad = inputs;
    bad[2] = {none, {}};
    CHECK_THROWS_WITH(gpu->encode_batch(bad), "sequence 2 of the batch: no tokens to encode");
  }
}

// What lets the server batch requests together (apps/serve/encode_queue.h): a sequence's hidden
// states from encode_batch are the same bits alone and in any batch, both kernel sets, at
// MiniLM's width, 1 to 64 tokens. Short sequences are the ones at risk (alone, a pass of up to
// 8 rows would take the decoding kernels, which reduce in another order: the CPU set's differed
// in ~95% of the values before encode_batch padded such passes), and so are starts off any tile
// (the three of 13 tokens sit at rows 0, 13 and 26).
TEST_CASE("bert: a sequence's hidden states are the same bits alone and in any batch") {
  GPU_TEST(g);
  const model::Config c = bert_config(384, 2, 12, 1000, model::EncoderHead::None);
  const test::TinyModel random(c, test::unit_scale(c));
  const auto& checkpoint = random.checkpoint;
  const uint32_t lengths[] = {1, 2, 5, 8, 9, 13, 13, 13, 64};
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < std::size(lengths); i++) {
    ids.emplace_back(lengths[i]);
    for (uint32_t t = 0; t < lengths[i]; t++)
      ids[i][t] = static_cast<int32_t>((t * 7919u + 131 * i + 5) % c.n_vocab);
  }
  const auto input = [&](size_t i) { return model::EncoderInput{ids[i], {}}; };
  for (vk::KernelSet set : test::kKernelSets) {
    const std::string kernels = vk::kernel_set_name(set);
    CAPTURE(kernels);
    model::GpuModelOptions o;
    o.precision = model::Precision::F32;
    o.encoder_batch = 4;
    auto gpu = model::make_gpu_encoder(*checkpoint, g.with_kernels(set), o);
    std::vector<std::vector<float>> alone;
    for (size_t i = 0; i < ids.size(); i++) {
      const model::EncoderInput one[] = {input(i)};
      alone.push_back(gpu->encode_batch(one)[0]);
    }
    // All of them (passes of 4), the short ones together, the three of 13 together, and each
    // short one with a long one.
    std::vector<std::vector<size_t>> batches{{0, 1, 2, 3, 4, 5, 6, 7, 8}, {3, 2, 1, 0}, {5, 6, 7}};
    for (size_t i = 0; i < 5; i++) batches.push_back({i, 8});
    for (const std::vector<size_t>& batch : batches) {
      std::vector<model::EncoderInput> inputs;
      for (size_t i : batch) inputs.push_back(input(i));
      const std::vector<std::vector<float>> got = gpu->encode_batch(inputs);
      for (size_t b = 0; b < batch.size(); b++) {
        CAPTURE(batch.size());
        CAPTURE(lengths[batch[b]]);
        CHECK(got[b] == alone[batch[b]]);
      }
    }
  }
}

// The attention tap of an encoder (`gpt2vk attention` on a BERT folder) at MiniLM's heads
// (12 of 32) over 128 tokens of a pair: every layer's [H, T, T] and one layer's alone, from the
// GPU under both kernel sets against the CPU reference's, test_model.cpp's tap tolerance
// (|gpu - cpu| <= 1e-5 + 1e-4 * cpu, weights in [0, 1]). Each query sees every key: its row sums
// to 1 over all 128 keys, and the weights are far from uniform (else a transposed or shifted
// map would pass too).
TEST_CASE("bert: the attention tap, GPU against the CPU reference") {
  GPU_TEST(g);
  const model::Config c = bert_config(384, 2, 12, 1000, model::EncoderHead::None);
  const uint32_t T = 128, H = c.n_head;
  const test::TinyModel random(c, test::unit_scale(c));
  const auto& checkpoint = random.checkpoint;
  std::vector<int32_t> ids(T), types(T);
  for (uint32_t t = 0; t < T; t++) {
    ids[t] = static_cast<int32_t>((t * 7919u + 3) % c.n_vocab);
    types[t] = t >= T / 2 ? 1 : 0;
  }
  auto cpu = model::make_cpu_encoder(*checkpoint, model::Precision::F32);
  cpu->set_attention_taps(true);
  cpu->encode(ids, types, false);
  const std::vector<std::vector<float>> ref = cpu->attention_probs();
  REQUIRE(ref.size() == c.n_layer);
  for (const std::vector<float>& layer : ref) {
    REQUIRE(layer.size() == size_t{H} * T * T);
    for (size_t row = 0; row < size_t{H} * T; row++) {
      double sum = 0;
      for (uint32_t j = 0; j < T; j++) sum += double{layer[row * T + j]};
      CHECK(std::fabs(sum - 1.0) < 1e-5);
    }
    CHECK(*std::max_element(layer.begin(), layer.end()) > 4.0f / T);
  }
  for (vk::KernelSet set : test::kKernelSets) {
    CAPTURE(vk::kernel_set_name(set));
    model::GpuModelOptions o;
    o.precision = model::Precision::F32;
    auto gpu = model::make_gpu_encoder(*checkpoint, g.with_kernels(set), o);
    gpu->set_attention_taps(true);
    gpu->encode(ids, types, false);
    REQUIRE(gpu->attention_probs().size() == c.n_layer);
    for (uint32_t l = 0; l < c.n_layer; l++)
      CHECK(test::close("layer " + std::to_string(l), gpu->attention_probs()[l], ref[l],
                        {1e-5, 1e-4}));
    gpu->set_attention_taps(true, 1);
    gpu->encode(ids, types, false);
    CHECK(gpu->attention_probs()[0].empty());
    CHECK(test::close("layer 1 alone", gpu->attention_probs()[1], ref[1], {1e-5, 1e-4}));
    gpu->set_attention_taps(false);
    gpu->encode(ids, types, false);
    CHECK(gpu->attention_probs().empty());
  }
}

// Files stored in fp16 and bf16, and fp16 weights on the device: the GPU (both kernel sets, f16
// weights) against the CPU reference given the same fp16-rounded weights, at the row-scale
// tolerance above; and the f32 run of a bf16 file against the file's own values.
TEST_CASE("bert: fp16 and bf16 files, fp16 weights on the GPU") {
  GPU_TEST(g);
  const model::Config c = bert_config(128, 2, 2, 500, model::EncoderHead::TokenClassification);
  model::Config labelled = c;
  labelled.labels = {"O", "B", "I"};
  std::vector<int32_t> ids(100);
  for (size_t t = 0; t < ids.size(); t++) ids[t] = static_cast<int32_t>((t * 31 + 7) % 500);
  for (model::TensorDType dtype : {model::TensorDType::F16, model::TensorDType::BF16}) {
    CAPTURE(static_cast<int>(dtype));
    test::TempDir dir;
    model::RandomCheckpointOptions options;
    options.dtype = dtype;
    options.scale = 1.0f / std::sqrt(128.0f);
    model::write_random_checkpoint(dir.path(), labelled, model::config_json(labelled), options);
    const auto checkpoint = model::Checkpoint::load(dir.path());
    for (model::Precision precision : {model::Precision::F16, model::Precision::F32}) {
      const model::Encoded ref = model::make_cpu_encoder(*checkpoint, precision)->encode(ids);
      for (vk::KernelSet set : test::kKernelSets) {
        CAPTURE(vk::kernel_set_name(set));
        CAPTURE(model::precision_name(precision));
        model::GpuModelOptions o;
        o.precision = precision;
        const model::Encoded got =
            model::make_gpu_encoder(*checkpoint, g.with_kernels(set), o)->encode(ids);
        CHECK(test::close_rows("hidden", got.hidden, ref.hidden, 128, 1e-4));
        CHECK(test::close_rows("head", got.logits, ref.logits, 3, 1e-4));
      }
    }
  }
}
