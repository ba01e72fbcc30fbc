// Checkpoints: random model folders in the published layout load and give back exactly the values
// written (rounded as an independent reference rounds them), and every folder that does not fit
// its config fails with one message that lists what is wrong.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "model/formats/checkpoint.h"
#include "model/formats/random_checkpoint.h"
#include "tests/files.h"
#include "tests/tensor_files.h"
#include "model/formats/safetensors_writer.h"

using model::TensorDType;

namespace {

model::Config small_config() {
  model::Config c;
  c.n_vocab = 11;
  c.n_ctx = 5;
  c.n_embd = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_inner = 12;
  c.eos_token_id = 10;
  return c;
}

// The fewest tensors a config can ask for: wte [11, 8], h.0.attn.c_attn [8, 24], c_proj [8, 8].
model::Config bare_config() {
  model::Config c = small_config();
  c.n_layer = 1;
  c.attention_only = true;
  c.attention_bias = false;
  c.final_norm = false;
  c.positions = model::PositionKind::None;
  return c;
}

void write(const std::filesystem::path& dir, const model::Config& c,
           const model::RandomCheckpointOptions& o = {}) {
  model::write_random_checkpoint(dir, c, model::config_json(c), o);
}

// The value a file of `dtype` holds for fp32 value v, by the test's own rounding.
float stored(float v, TensorDType dtype) {
  if (dtype == TensorDType::F16) return static_cast<float>(test::f16_value(test::nearest_f16(v)));
  if (dtype == TensorDType::BF16)
    return std::bit_cast<float>(uint32_t{test::nearest_bf16(v)} << 16);
  return v;
}

// Every tensor the config implies is there, with its shape and the values drawn for it.
void check_values(const model::Checkpoint& ck, const model::RandomCheckpointOptions& o) {
  for (const model::ExpectedTensor& e : model::expected_tensors(ck.config())) {
    CAPTURE(e.name);
    const model::TensorView& t = ck.tensor(e.name);
    REQUIRE(t.shape == e.shape);
    REQUIRE(t.dtype == o.dtype);
    const std::vector<float> got = model::to_f32(t);
    std::vector<float> drawn(got.size());
    model::random_tensor_values(e.name, ck.config(), o, drawn.data(), 0, drawn.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += got[i] != stored(drawn[i], o.dtype);
    CHECK(bad == 0);
  }
}

std::string load_error(const std::filesystem::path& dir) {
  try {
    model::Checkpoint::load(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST_CASE("expected tensors of GPT-2 small: the published names and shapes") {
  model::Config c = small_config();
  c.n_vocab = 50257, c.n_ctx = 1024, c.n_embd = 768, c.n_layer = 12, c.n_head = 12,
  c.n_inner = 3072;
  const auto e = model::expected_tensors(c);
  CHECK(e.size() == 2 + 12 * 12 + 2);
  CHECK(e[0].name == "wte.weight");
  CHECK(e[0].shape == std::vector<uint64_t>{50257, 768});
  CHECK(e[1].name == "wpe.weight");
  CHECK(e[1].shape == std::vector<uint64_t>{1024, 768});
  CHECK(e[2].name == "h.0.ln_1.weight");
  CHECK(e[4].name == "h.0.attn.c_attn.weight");
  CHECK(e[4].shape == std::vector<uint64_t>{768, 2304});
  CHECK(e[10].name == "h.0.mlp.c_fc.weight");
  CHECK(e[10].shape == std::vector<uint64_t>{768, 3072});
  CHECK(e[12].name == "h.0.mlp.c_proj.weight");
  CHECK(e[12].shape == std::vector<uint64_t>{3072, 768});
  CHECK(e.back().name == "ln_f.bias");
  // The published parameter count of GPT-2 small (124M).
  CHECK(model::parameter_count(c) == 124439808);
}

TEST_CASE("expected tensors follow the variants") {
  model::Config c = small_config();
  auto names = [](const model::Config& cfg) {
    std::vector<std::string> n;
    for (const auto& e : model::expected_tensors(cfg)) n.push_back(e.name);
    return n;
  };
  auto has = [](const std::vector<std::string>& n, const std::string& x) {
    return std::find(n.begin(), n.end(), x) != n.end();
  };
  c.positions = model::PositionKind::Sinusoidal;
  c.attention_bias = false;
  c.tie_word_embeddings = false;
  auto n = names(c);
  CHECK(!has(n, "wpe.weight"));
  CHECK(!has(n, "h.0.attn.c_attn.bias"));
  CHECK(!has(n, "h.1.attn.c_proj.bias"));
  CHECK(has(n, "h.1.mlp.c_proj.bias"));
  CHECK(has(n, "lm_head.weight"));
  c.mlp_bias = false;
  c.final_norm = false;
  n = names(c);
  CHECK(!has(n, "h.0.mlp.c_fc.bias"));
  CHECK(has(n, "h.0.mlp.c_fc.weight"));
  CHECK(!has(n, "ln_f.weight"));
  c.attention_only = true;
  n = names(c);
  CHECK(n == std::vector<std::string>{"wte.weight", "h.0.attn.c_attn.weight",
                                      "h.0.attn.c_proj.weight", "h.1.attn.c_attn.weight",
                                      "h.1.attn.c_proj.weight", "lm_head.weight"});
}

TEST_CASE("random checkpoints in the published layout load with the values written") {
  for (TensorDType dt : {TensorDType::F32, TensorDType::F16, TensorDType::BF16}) {
    for (int variant = 0; variant < 4; ++variant) {
      model::RandomCheckpointOptions o;
      o.dtype = dt;
      o.seed = 5 + static_cast<uint64_t>(variant);
      o.prefix = variant & 1;
      o.mask_buffers = variant & 2;
      model::Config c = small_config();
      c.tie_word_embeddings = variant != 3;
      CAPTURE(std::string(model::dtype_name(dt)));
      CAPTURE(variant);
      test::TempDir dir;
      write(dir.path(), c, o);

      // The file as written: prefixed names, mask buffers, lm_head never prefixed.
      const auto st = model::SafeTensors::open(dir / "model.safetensors");
      CHECK((st->find("transformer.h.1.mlp.c_fc.weight") != nullptr) == o.prefix);
      CHECK((st->find("h.1.mlp.c_fc.weight") != nullptr) == !o.prefix);
      const std::string h0 = o.prefix ? "transformer.h.0." : "h.0.";
      CHECK((st->find(h0 + "attn.bias") != nullptr) == o.mask_buffers);
      CHECK((st->find("lm_head.weight") != nullptr) == !c.tie_word_embeddings);
      if (o.mask_buffers) {
        const std::vector<float> mask = model::to_f32(*st->find(h0 + "attn.bias"));
        CHECK(st->find(h0 + "attn.bias")->shape == std::vector<uint64_t>{1, 1, 5, 5});
        CHECK(mask[0 * 5 + 0] == 1.0f);
        CHECK(mask[0 * 5 + 1] == 0.0f);
        CHECK(mask[4 * 5 + 3] == 1.0f);
        CHECK(mask[3 * 5 + 4] == 0.0f);
        CHECK(model::to_f32(*st->find(h0 + "attn.masked_bias")) ==
              std::vector<float>{stored(-1e4f, dt)});
      }

      const auto ck = model::Checkpoint::load(dir.path());
      CHECK(ck->config() == c);
      CHECK(ck->warnings().empty());  // mask buffers are skipped silently
      check_values(*ck, o);
      uint64_t bytes = 0;
      for (const auto& e : model::expected_tensors(c))
        bytes += model::to_f32(ck->tensor(e.name)).size() * model::dtype_size(dt);
      CHECK(ck->weight_bytes() == bytes);
      CHECK(ck->find("h.0.attn.bias") == nullptr);
    }
  }
}

TEST_CASE("random checkpoints of the variants load") {
  model::Config c = small_config();
  c.positions = model::PositionKind::None;
  c.attention_bias = false;
  c.final_norm = false;
  c.pre_norm = false;
  model::Config only = small_config();
  only.attention_only = true;
  only.mlp_bias = false;
  only.positions = model::PositionKind::Sinusoidal;
  for (const model::Config& cfg : {c, only}) {
    test::TempDir dir;
    model::RandomCheckpointOptions o;
    o.dtype = TensorDType::F16;
    o.prefix = true;
    write(dir.path(), cfg, o);
    const auto ck = model::Checkpoint::load(dir.path());
    CHECK(ck->config() == cfg);
    CHECK(ck->find("wpe.weight") == nullptr);
    check_values(*ck, o);
  }
}

TEST_CASE("random checkpoint values: seeded, dtype-independent, shaped like weights") {
  const model::Config c = small_config();
  model::RandomCheckpointOptions o;
  std::vector<float> a(4000), b(4000), d(4000), part(100);
  model::random_tensor_values("h.0.mlp.c_fc.weight", c, o, a.data(), 0, a.size());
  model::random_tensor_values("h.0.mlp.c_fc.weight", c, o, part.data(), 1234, part.size());
  CHECK(std::equal(part.begin(), part.end(), a.begin() + 1234));  // chunking does not matter
  model::random_tensor_values("h.0.mlp.c_proj.weight", c, o, b.data(), 0, b.size());
  CHECK(a != b);
  o.seed = 2;
  model::random_tensor_values("h.0.mlp.c_fc.weight", c, o, d.data(), 0, d.size());
  CHECK(a != d);
  double sum = 0, sq = 0;
  for (float v : a)
    sum += static_cast<double>(v), sq += static_cast<double>(v) * static_cast<double>(v);
  const auto n = static_cast<double>(a.size());
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  CHECK(std::fabs(mean) < 0.002);
  CHECK(sd == doctest::Approx(0.02).epsilon(0.05));
  model::random_tensor_values("h.1.ln_2.weight", c, o, a.data(), 0, 8);
  for (int i = 0; i < 8; ++i) CHECK(std::fabs(a[size_t(i)] - 1.0f) < 0.1f);

  // The same seed writes the same bytes; the f32 and bf16 files hold the same values rounded.
  test::TempDir one, two;
  write(one.path(), c);
  write(two.path(), c);
  CHECK(test::read_file(one / "model.safetensors") == test::read_file(two / "model.safetensors"));
  o.seed = 1;
  o.dtype = TensorDType::BF16;
  test::TempDir three;
  write(three.path(), c, o);
  const auto f32 = model::SafeTensors::open(one / "model.safetensors");
  const auto bf16 = model::SafeTensors::open(three / "model.safetensors");
  const std::vector<float> x = model::to_f32(*f32->find("h.1.attn.c_attn.weight"));
  const std::vector<float> y = model::to_f32(*bf16->find("h.1.attn.c_attn.weight"));
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == stored(x[i], TensorDType::BF16));
}

TEST_CASE("checkpoint: missing tensors and wrong shapes are listed together") {
  test::TempDir dir;
  model::Config c = small_config();
  write(dir.path(), c);
  model::Config other = c;
  other.n_layer = 3;
  other.n_inner = 16;
  test::write_file(dir / "config.json", model::config_json(other));
  const std::string msg = load_error(dir.path());
  CHECK(msg.find("model.safetensors: 18 tensor(s) do not match config.json: ") !=
        std::string::npos);
  CHECK(msg.find("h.0.mlp.c_fc.weight: shape [8, 12] but the config implies [8, 16]") !=
        std::string::npos);
  CHECK(msg.find("h.1.mlp.c_proj.weight: shape [12, 8] but the config implies [16, 8]") !=
        std::string::npos);
  CHECK(msg.find("missing h.2.ln_1.weight [8]") != std::string::npos);
  CHECK(msg.find("missing h.2.attn.c_attn.weight [8, 24]") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);

  other = c;
  other.n_layer = 40;  // 38 layers of 12 missing tensors: past 20, the rest are counted
  test::write_file(dir / "config.json", model::config_json(other));
  CHECK(load_error(dir.path()).find("456 tensor(s)") != std::string::npos);
  CHECK(load_error(dir.path()).ends_with("; and 436 more"));

  other = c;
  other.tie_word_embeddings = false;
  test::write_file(dir / "config.json", model::config_json(other));
  CHECK(load_error(dir.path()).find("missing lm_head.weight [11, 8]") != std::string::npos);
}

TEST_CASE("checkpoint: unused tensors become warnings") {
  test::TempDir dir;
  model::Config untied = small_config();
  untied.tie_word_embeddings = false;
  write(dir.path(), untied);
  // The same file read with a tied config: lm_head.weight is there but unused.
  test::write_file(dir / "config.json", model::config_json(small_config()));
  auto ck = model::Checkpoint::load(dir.path());
  REQUIRE(ck->warnings().size() == 1);
  CHECK(ck->warnings()[0].find("lm_head.weight ignored: tie_word_embeddings is true") !=
        std::string::npos);
  CHECK(ck->find("lm_head.weight") == nullptr);

  // A variant without biases reading a file with them: each one is named.
  model::Config nobias = small_config();
  nobias.mlp_bias = false;
  test::write_file(dir / "config.json", model::config_json(nobias));
  ck = model::Checkpoint::load(dir.path());
  CHECK(ck->warnings().size() == 1 + 2 * 2);
  CHECK(ck->warnings()[0].find(
            "model.safetensors: h.0.mlp.c_fc.bias: not used by this config, ignored") !=
        std::string::npos);
  CHECK(ck->warnings()[3].find("h.1.mlp.c_proj.bias: not used") != std::string::npos);
  CHECK_THROWS_WITH_AS(ck->tensor("h.0.mlp.c_fc.bias"),
                       doctest::Contains("h.0.mlp.c_fc.bias: not a tensor this config uses"),
                       std::runtime_error);
}

TEST_CASE("checkpoint: folders that are not model folders") {
  test::TempDir dir;
  CHECK(load_error(dir / "nowhere").find("nowhere: not a folder") != std::string::npos);
  CHECK(load_error(dir.path()).find(dir.path().string() + ": no config.json in this folder") !=
        std::string::npos);
  write(dir.path(), small_config());
  std::filesystem::remove(dir / "model.safetensors");
  CHECK(
      load_error(dir.path()).find(dir.path().string() + ": no model.safetensors in this folder") !=
      std::string::npos);
  test::write_file(dir / "pytorch_model.bin", "");
  CHECK(load_error(dir.path()).find("pytorch_model.bin is not read") != std::string::npos);
  test::write_file(dir / "model.safetensors", "12345");
  CHECK(load_error(dir.path()).find("model.safetensors: truncated: 5 bytes") != std::string::npos);
  test::write_file(dir / "config.json", "{\"n_embd\": 8}");
  CHECK(load_error(dir.path()).find("config.json: vocab_size: missing") != std::string::npos);
}

TEST_CASE("checkpoint: a tensor the model needs in a dtype it cannot read") {
  test::TempDir dir;
  const model::Config c = bare_config();
  test::write_file(dir / "config.json", model::config_json(c));
  const std::string header =
      R"({"wte.weight":{"dtype":"F64","shape":[11,8],"data_offsets":[0,704]},)"
      R"("h.0.attn.c_attn.weight":{"dtype":"F32","shape":[8,24],"data_offsets":[704,1472]},)"
      R"("h.0.attn.c_proj.weight":{"dtype":"F32","shape":[8,8],"data_offsets":[1472,1728]},)"
      R"("h.0.attn.bias":{"dtype":"BOOL","shape":[1,1,5,5],"data_offsets":[1728,1753]},)"
      R"("extra":{"dtype":"I64","shape":[1],"data_offsets":[1753,1761]}})";
  test::write_file(dir / "model.safetensors",
                   test::safetensors_bytes(header, std::string(1761, '\0')));
  CHECK(load_error(dir.path())
            .find("1 tensor(s) do not match config.json: wte.weight: unsupported dtype F64 "
                  "(supported: F32, F16, BF16)") != std::string::npos);
  // The same file with wte as F32: the BOOL mask is skipped silently, "extra" is a warning.
  std::string fixed = header;
  fixed.replace(fixed.find("F64"), 3, "F32");
  fixed.replace(fixed.find("[0,704]"), 7, "[0,352]");
  test::write_file(dir / "model.safetensors",
                   test::safetensors_bytes(fixed, std::string(1761, '\0')));
  const auto ck = model::Checkpoint::load(dir.path());
  REQUIRE(ck->warnings().size() == 1);
  CHECK(ck->warnings()[0].find("extra: not used by this config, ignored (I64)") !=
        std::string::npos);
}

TEST_CASE("checkpoint: one tensor stored with and without the prefix") {
  test::TempDir dir;
  const model::Config c = bare_config();
  test::write_file(dir / "config.json", model::config_json(c));
  const std::vector<float> w(88, 0.5f), a(192, 0.25f), p(64, 0.125f);
  model::write_safetensors(
      dir / "model.safetensors",
      {model::make_tensor("wte.weight", TensorDType::F32, {11, 8}, w),
       model::make_tensor("transformer.wte.weight", TensorDType::F32, {11, 8}, w),
       model::make_tensor("h.0.attn.c_attn.weight", TensorDType::F32, {8, 24}, a),
       model::make_tensor("h.0.attn.c_proj.weight", TensorDType::F32, {8, 8}, p)});
  CHECK(load_error(dir.path())
            .find("wte.weight: stored twice, with and without the \"transformer.\" prefix") !=
        std::string::npos);
}
