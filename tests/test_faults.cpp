// Hostile input on the command line: every kind of broken model folder, run through the real
// binary, ends in exit code 1 and one line on stderr naming the file, the tensor or key, and the
// problem; NaN and infinite weights are a warning, not an error. The parsers' own tests
// (test_safetensors, test_config, test_checkpoint) cover each message in depth; these prove the
// command line reports them whole and cleanly.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/formats/checkpoint.h"
#include "model/formats/random_checkpoint.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/tensor_files.h"
#include "model/formats/safetensors_writer.h"

namespace {

using nlohmann::json;

// The smallest model the command line runs: wte [256, 8], wpe [8, 8], one attention-only block
// (c_attn [8, 24], c_proj [8, 8]), the bytes tokenizer, context 8.
model::Config small_config() {
  model::Config c;
  c.n_vocab = 256;
  c.n_ctx = 8;
  c.n_embd = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_inner = 32;
  c.attention_only = true;
  c.attention_bias = false;
  c.final_norm = false;
  c.tokenizer.kind = model::TokenizerKind::Bytes;
  return c;
}

void write_model(const std::filesystem::path& dir, const model::Config& c = small_config()) {
  model::write_random_checkpoint(dir, c, model::config_json(c), {});
}

// A safetensors file taken apart: its header as JSON and the data after it.
struct Parts {
  json header;
  std::string data;
};

Parts read_parts(const std::filesystem::path& file) {
  const std::string bytes = test::read_file(file);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

void write_parts(const std::filesystem::path& file, const Parts& p) {
  test::write_file(file, test::safetensors_bytes(p.header.dump(), p.data));
}

// The header of dir/model.safetensors, changed by `edit`.
std::function<void(const std::filesystem::path&)> edit_header(std::function<void(json&)> edit) {
  return [edit](const std::filesystem::path& dir) {
    Parts p = read_parts(dir / "model.safetensors");
    edit(p.header);
    write_parts(dir / "model.safetensors", p);
  };
}

// dir/config.json, changed by `edit`.
std::function<void(const std::filesystem::path&)> edit_config(std::function<void(json&)> edit) {
  return [edit](const std::filesystem::path& dir) {
    json c = json::parse(test::read_file(dir / "config.json"));
    edit(c);
    test::write_file(dir / "config.json", c.dump());
  };
}

// The bytes of dir/model.safetensors, changed by `edit`.
std::function<void(const std::filesystem::path&)> edit_bytes(
    std::function<void(std::string&)> edit) {
  return [edit](const std::filesystem::path& dir) {
    std::string bytes = test::read_file(dir / "model.safetensors");
    edit(bytes);
    test::write_file(dir / "model.safetensors", bytes);
  };
}

// An error exit: code 1, nothing on stdout, and exactly one line on stderr, the error.
void check_one_line_error(const test::CliResult& r, const std::string& where,
                          const std::string& problem) {
  CAPTURE(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK(r.err.starts_with("gpt2vk: error: "));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.ends_with("\n"));
  CHECK(r.err.find(where) != std::string::npos);
  CHECK(r.err.find(problem) != std::string::npos);
}

}  // namespace

TEST_CASE("faults: every malformed checkpoint is one error line naming file, tensor or key") {
  struct Case {
    const char* what;
    std::function<void(const std::filesystem::path&)> spoil;
    const char* file;     // the file the message must name
    std::string problem;  // and what it must say
  };
  const char* st = "model.safetensors";
  const char* cfg = "config.json";
  const Case cases[] = {
      {"file cut inside the length", edit_bytes([](std::string& b) { b.resize(5); }), st,
       "truncated: 5 bytes, too short for the 8-byte header length"},
      {"file cut inside the data", edit_bytes([](std::string& b) { b.resize(b.size() - 100); }), st,
       "h.0.attn.c_proj.weight: data_offsets [9216, 9472) out of range: the data area is 9372 "
       "bytes"},
      {"header length past the file",
       edit_bytes([](std::string& b) { b.replace(0, 8, test::le64(b.size())); }), st,
       "runs past the end of the file"},
      {"absurd header length",
       edit_bytes([](std::string& b) { b.replace(0, 8, test::le64(uint64_t{1} << 40)); }), st,
       "header length 1099511627776 is absurd"},
      {"header not JSON",
       [](const std::filesystem::path& dir) {
         test::write_file(dir / "model.safetensors",
                          test::safetensors_bytes("{\"wte.weight\": {", ""));
       },
       st, "header: invalid JSON at byte"},
      {"offsets past the data", edit_header([](json& h) {
         h["wte.weight"]["data_offsets"] = {9216, 17408};
       }),
       st, "wte.weight: data_offsets [9216, 17408) out of range: the data area is 9472 bytes"},
      {"overlapping tensors", edit_header([](json& h) {
         h["h.0.attn.c_proj.weight"]["data_offsets"] = {8196, 8452};
       }),
       st, "h.0.attn.c_proj.weight: data [8196, 8452) overlaps wpe.weight [8192, 8448)"},
      {"size not shape x dtype", edit_header([](json& h) {
         h["wte.weight"]["shape"] = {256, 9};
       }),
       st,
       "wte.weight: data_offsets [0, 8192) hold 8192 bytes but shape [256, 9] of F32 needs 9216"},
      {"unknown dtype", edit_header([](json& h) { h["wte.weight"]["dtype"] = "Q4_K"; }), st,
       "wte.weight: unsupported dtype Q4_K (supported: F32, F16, BF16)"},
      {"a dtype the engine does not read",
       edit_header([](json& h) { h["wte.weight"]["dtype"] = "I32"; }), st,
       "wte.weight: unsupported dtype I32 (supported: F32, F16, BF16)"},
      {"missing tensor", edit_header([](json& h) { h.erase("h.0.attn.c_proj.weight"); }), st,
       "1 tensor(s) do not match config.json: missing h.0.attn.c_proj.weight [8, 8]"},
      {"shape wrong for the config", edit_header([](json& h) {
         h["h.0.attn.c_proj.weight"]["shape"] = {4, 16};
       }),
       st, "h.0.attn.c_proj.weight: shape [4, 16] but the config implies [8, 8]"},
      {"config not JSON",
       [](const std::filesystem::path& dir) {
         test::write_file(dir / "config.json", "{\"n_embd\": 8,");
       },
       cfg, "invalid JSON at byte"},
      {"config key missing", edit_config([](json& c) { c.erase("n_embd"); }), cfg,
       "n_embd: missing"},
      {"config value zero", edit_config([](json& c) { c["n_embd"] = 0; }), cfg,
       "n_embd: must be at least 1, got 0"},
      {"config value negative", edit_config([](json& c) { c["n_layer"] = -1; }), cfg,
       "n_layer: must be at least 1, got -1"},
      {"n_embd not divisible by n_head", edit_config([](json& c) { c["n_head"] = 3; }), cfg,
       "n_head: n_embd 8 is not divisible by n_head 3"},
      {"config value huge", edit_config([](json& c) { c["vocab_size"] = 1ull << 40; }), cfg,
       "vocab_size: 1099511627776 is larger than the limit"},
      {"config values inconsistent with the tokenizer",
       edit_config([](json& c) { c["vocab_size"] = 300; }), cfg,
       "vocab_size: 300 but the bytes tokenizer has 256 tokens"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    test::TempDir dir;
    write_model(dir.path());
    c.spoil(dir.path());
    // The CPU reference: loading is all these exercise, and it needs no Vulkan device.
    const test::CliResult r = test::gpt2vk(
        {"generate", "-m", dir.path().string(), "-p", "a", "-n", "1", "--device", "cpu"});
    check_one_line_error(r, (dir / c.file).string() + ": ", c.problem);
  }
}

TEST_CASE("faults: the unbroken model of that table runs") {
  test::TempDir dir;
  write_model(dir.path());
  const test::CliResult r = test::gpt2vk(
      {"generate", "-m", dir.path().string(), "-p", "a", "-n", "1", "--device", "cpu"});
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("warning") == std::string::npos);
}

TEST_CASE("faults: NaN and infinite weights are a warning naming file, tensor and count") {
  test::TempDir dir;
  write_model(dir.path());
  // wpe's last row, which a one-token prompt never reads: NaN, +inf, -inf, and 1e6, which is
  // finite in the file's fp32 but infinite once rounded to fp16.
  Parts p = read_parts(dir / "model.safetensors");
  const uint64_t wpe = p.header["wpe.weight"]["data_offsets"][0];
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 1e6f};
  std::memcpy(p.data.data() + wpe + 7 * 8 * 4, bad, sizeof(bad));
  write_parts(dir / "model.safetensors", p);

  const std::string where = (dir / "model.safetensors").string() + ": wpe.weight: ";
  struct Run {
    std::vector<std::string> options;
    std::string warning;
    bool gpu;
  };
  const Run runs[] = {
      {{"--device", "cpu", "--precision", "f32"}, "3 of 64 values are NaN or infinite\n", false},
      {{"--device", "cpu"}, "4 of 64 values are NaN or infinite as f16\n", false},
      {{"--precision", "f32"}, "3 of 64 values are NaN or infinite\n", true},
      {{}, "4 of 64 values are NaN or infinite as f16\n", true},
  };
  for (const Run& run : runs) {
    if (run.gpu && !test::gpu()) continue;
    std::vector<std::string> args = {"generate", "-m", dir.path().string(), "-p", "a", "-n", "1"};
    args.insert(args.end(), run.options.begin(), run.options.end());
    const test::CliResult r = test::gpt2vk(args);
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);  // a warning: the model still runs
    CHECK(r.err.find("gpt2vk: warning: " + where + run.warning) != std::string::npos);
    CHECK(r.err.find("generated 1 tokens") != std::string::npos);
    CHECK(test::no_validation_messages(r));
  }
}

TEST_CASE("faults: bad runtime input is one error line and exit code 1") {
  test::TempDir dir;
  write_model(dir.path());
  const std::string m = dir.path().string();
  test::write_file(dir / "bad.txt", "ok \xff\xfe bad");
  test::write_file(dir / "empty.txt", "");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"generate", "-m", m, "-p", "ok \xc3("}, "the prompt: invalid UTF-8 at byte 3"},
      {{"generate", "-m", m, "-f", (dir / "bad.txt").string()},
       (dir / "bad.txt").string() + ": invalid UTF-8 at byte 3"},
      {{"generate", "-m", m, "-p", ""}, "the prompt is empty"},
      {{"generate", "-m", m, "-f", (dir / "empty.txt").string()},
       (dir / "empty.txt").string() + " is empty"},
      {{"generate", "-m", m, "-p", "123456789"},
       "the prompt is 9 tokens, longer than the model's context of 8 tokens"},
      {{"perplexity", "-m", m, "-f", (dir / "bad.txt").string(), "--ctx", "9"},
       "invalid UTF-8 at byte 3"},
      {{"compare", "-m", m, "-p", "a", "--device", "cpu"}, "--device cpu makes no sense here"},
      {{"bench", "-m", m, "-p", "9", "-n", "0"},
       "-p 9: longer than the model's context of 8 tokens"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    if (args[0] != "compare") args.insert(args.end(), {"--device", "cpu"});
    CAPTURE(args[0]);
    check_one_line_error(test::gpt2vk(args), "", c.message);
  }
  test::write_file(dir / "text.txt", "abcdefghijk");
  check_one_line_error(test::gpt2vk({"perplexity", "-m", m, "-f", (dir / "text.txt").string(),
                                     "--ctx", "9", "--device", "cpu"}),
                       "", "--ctx 9 is longer than the model's context of 8");
}

TEST_CASE("faults: an error says what to do next") {
  test::TempDir dir;
  const std::string absent = (dir / "gpt2").string();
  // No folder yet: the two ways to get one, at the path given.
  check_one_line_error(test::gpt2vk({"generate", "-m", absent, "-p", "a", "--device", "cpu"}),
                       absent + ": not a folder",
                       "scripts/download_gpt2.sh gpt2 " + absent + " fetches GPT-2");
  check_one_line_error(test::gpt2vk({"generate", "-m", absent, "-p", "a", "--device", "cpu"}), "",
                       "gpt2vk make-model --shape small -o " + absent + " writes one");
  // GPT-2's tokenizer missing beside the weights: what the file is, and where a copy is.
  model::Config gpt2 = small_config();
  gpt2.tokenizer.kind = model::TokenizerKind::Gpt2;
  const std::filesystem::path bare = dir / "bare";
  write_model(bare, gpt2);
  check_one_line_error(
      test::gpt2vk({"generate", "-m", bare.string(), "-p", "a", "--device", "cpu"}),
      (bare / "vocab.json").string() + ": no such file: GPT-2's tokenizer (vocab.json and merges.txt)",
      "data/gpt2 holds a copy");
  // A download cut short.
  const std::filesystem::path cut = dir / "cut";
  write_model(cut);
  edit_bytes([](std::string& b) { b.resize(b.size() - 100); })(cut);
  check_one_line_error(test::gpt2vk({"generate", "-m", cut.string(), "-p", "a", "--device", "cpu"}),
                       "model.safetensors", "it is incomplete (an interrupted download?)");
  // perplexity has no --prompt to suggest.
  test::write_file(dir / "empty.txt", "");
  write_model(dir / "ok");
  const test::CliResult r = test::gpt2vk(
      {"perplexity", "-m", (dir / "ok").string(), "-f", (dir / "empty.txt").string(), "--device", "cpu"});
  check_one_line_error(r, "empty.txt is empty", "it holds no text to read");
  CHECK(r.err.find("--prompt") == std::string::npos);
}

TEST_CASE("faults: -n past the context slides the window (causal) or crops (bidirectional)") {
  model::Config bidirectional = small_config();
  bidirectional.causal = false;
  struct Run {
    model::Config config;
    const char* note;
    bool gpu;
  };
  const Run runs[] = {
      {small_config(), "context full (8 tokens): sliding the window to the last 4 tokens", false},
      {small_config(), "context full (8 tokens): sliding the window to the last 4 tokens", true},
      {bidirectional, "context full (8 tokens): each step now reads only the last 8 tokens", false},
  };
  for (const Run& run : runs) {
    if (run.gpu && !test::gpu()) continue;
    test::TempDir dir;
    write_model(dir.path(), run.config);
    std::vector<std::string> args = {"generate", "-m", dir.path().string(), "-p", "ab", "-n", "20",
                                     "--temp",   "0"};
    if (!run.gpu) args.insert(args.end(), {"--device", "cpu"});
    const test::CliResult r = test::gpt2vk(args);
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find(run.note) != std::string::npos);
    CHECK(r.err.find("generated 20 tokens") != std::string::npos);
    CHECK(test::no_validation_messages(r));
  }
}

TEST_CASE("faults: the conversions count NaN and infinite values, in any range") {
  // 10000 values (more than one of the copy's 4096-value chunks, not a multiple), with NaN,
  // infinities and a value past fp16's range at chosen places, in every dtype.
  std::vector<float> v(10000);
  for (size_t i = 0; i < v.size(); i++) v[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;
  const size_t nan_at = 5, inf_at = 4095, minus_inf_at = 4096, big_at = 9999;
  v[nan_at] = std::numeric_limits<float>::quiet_NaN();
  v[inf_at] = INFINITY;
  v[minus_inf_at] = -INFINITY;
  v[big_at] = 1e6f;  // infinite as fp16, finite as fp32 and bf16
  for (model::TensorDType dt :
       {model::TensorDType::F32, model::TensorDType::F16, model::TensorDType::BF16}) {
    CAPTURE(model::dtype_name(dt));
    const model::TensorData d = model::make_tensor("t", dt, {v.size()}, v);
    const model::TensorView t{"t", dt, d.shape, d.bytes};
    const bool f16_file = dt == model::TensorDType::F16;
    std::vector<float> f(v.size());
    std::vector<uint16_t> h(v.size());
    CHECK(model::to_f32(t, f.data(), 0, v.size()) == (f16_file ? 4u : 3u));
    CHECK(model::to_f16(t, h.data(), 0, v.size()) == 4u);
    CHECK(model::to_f32(t, f.data(), 6, 4089) == 0u);     // [6, 4095): none
    CHECK(model::to_f16(t, h.data(), 4095, 2) == 2u);     // the two infinities
    CHECK(model::to_f16(t, h.data(), 4097, 5902) == 0u);  // [4097, 9999)
    CHECK(model::to_f16(t, h.data(), 9999, 1) == 1u);     // 1e6 as fp16
    CHECK(model::to_f32(t, f.data(), 0, 0) == 0u);
  }
}
