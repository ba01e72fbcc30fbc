// gpt2vk bench, logits and compare on encoder-decoder folders (Marian, T5), end to end through
// the binary: bench's encoder (enc<P>) and greedy decoding (tg<N> @ src<P>) tests on random tiny
// folders from make-model, logits' teacher-forced decoder logits against what transformers
// computed for tests/data/hf/t5-v1_1, and compare's GPU against the CPU reference.
//
// Tolerance for logits: 1e-4 of the row's scale (its largest |value|, at least 1), fp32 weights,
// as tests/test_seq2seq.cpp holds the same model to through the API: the reference is a float64
// run of the saved float32 weights, and the command writes the engine's floats unchanged.
#include <doctest/doctest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/hf_expected.h"

namespace {

// A random folder from make-model (--arch marian | t5) in `dir`.
std::string make_folder(const test::TempDir& dir, const char* arch, const char* shape) {
  const std::string out = (dir / arch).string();
  const test::CliResult r = test::gpt2vk({"make-model", "--arch", arch, "--shape", shape, "-o", out});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return out;
}

void write_ids(const std::filesystem::path& file, const std::vector<int32_t>& ids) {
  test::write_file(file, std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
}

std::vector<float> read_floats(const std::filesystem::path& file) {
  const std::string data = test::read_file(file);
  std::vector<float> v(data.size() / 4);
  std::memcpy(v.data(), data.data(), v.size() * 4);
  return v;
}

// Row b of an id array, without the positions its mask (if given) leaves out.
std::vector<int32_t> ids_of(const test::Array& ids, size_t b, const test::Array* mask = nullptr) {
  std::vector<int32_t> out;
  for (size_t t = 0; t < ids.shape[1]; t++)
    if (!mask || mask->row(b)[t] != 0) out.push_back(static_cast<int32_t>(ids.row(b)[t]));
  return out;
}

// bench --json on `folder`: enc6, then tg4 after it, each with two positive samples.
void check_bench_json(const std::string& folder, const std::vector<std::string>& device) {
  std::vector<std::string> args = {"bench", "-m", folder, "-p", "6", "-n", "4", "-r", "2", "--json"};
  args.insert(args.end(), device.begin(), device.end());
  const test::CliResult r = test::gpt2vk(args);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(test::no_validation_messages(r));
  const nlohmann::json j = nlohmann::json::parse(r.out);  // stdout is the JSON and nothing else
  REQUIRE(j.size() == 2);
  CHECK(j[0]["test"] == "enc6");
  CHECK(j[0]["n_prompt"] == 6);
  CHECK(j[0]["n_gen"] == 0);
  CHECK(j[1]["test"] == "tg4 @ src6");
  CHECK(j[1]["n_prompt"] == 6);
  CHECK(j[1]["n_gen"] == 4);
  for (const nlohmann::json& e : j) {
    CAPTURE(e.dump());
    CHECK(e["params"].get<uint64_t>() > 0);
    CHECK(e["size"].get<uint64_t>() > 0);
    REQUIRE(e["samples_ts"].size() == 2);
    for (const nlohmann::json& s : e["samples_ts"]) CHECK(s.get<double>() > 0);
    CHECK(e["avg_ts"].get<double>() > 0);
  }
}

}  // namespace

TEST_CASE("bench: an encoder-decoder's encoder and greedy decoding, on the CPU reference") {
  test::TempDir dir;
  for (const auto& [arch, shape] : {std::pair{"t5", "tiny-gated"}, std::pair{"marian", "tiny"}}) {
    CAPTURE(arch);
    const std::string folder = make_folder(dir, arch, shape);
    check_bench_json(folder, {"--device", "cpu"});
    // The table: a row per test, the source length in the decoding test's name.
    const test::CliResult t = test::gpt2vk(
        {"bench", "-m", folder, "-p", "5,7", "-n", "3", "-r", "1", "--device", "cpu"});
    CAPTURE(t.err);
    REQUIRE(t.exit_code == 0);
    CAPTURE(t.out);
    for (const char* test : {"enc5", "enc7", "tg3 @ src5", "tg3 @ src7"})
      CHECK(std::regex_search(t.out, std::regex(std::string(R"(\| CPU +\|.*\| +)") + test +
                                                R"( \| +[0-9.]+ ± [0-9.]+ \|)")));
  }
}

TEST_CASE("bench: an encoder-decoder's encoder and greedy decoding, on the GPU") {
  GPU_TEST(g);
  test::TempDir dir;
  for (const auto& [arch, shape] : {std::pair{"t5", "tiny-gated"}, std::pair{"marian", "tiny"}}) {
    CAPTURE(arch);
    check_bench_json(make_folder(dir, arch, shape), {"--precision", "f32"});
  }
}

// --profile: the source pass (the encoder's dispatches and the decoder's projections of its
// output, as one pass) and the mean decoder step, each op kind's GPU time, on an instance with
// timestamps; the CPU reference has none, which is said.
TEST_CASE("bench --profile: an encoder-decoder's source pass and decoder step") {
  GPU_TEST(g);
  test::TempDir dir;
  const std::string folder = make_folder(dir, "marian", "tiny");
  const test::CliResult r =
      test::gpt2vk({"bench", "-m", folder, "-p", "32", "-n", "4", "-r", "1", "--profile"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(test::no_validation_messages(r));
  const size_t source = r.out.find("profile: the source pass of 32 tokens");
  const size_t step = r.out.find("profile: decoder step, mean of 4 after a source of 32 tokens");
  REQUIRE(source != std::string::npos);
  REQUIRE(step != std::string::npos);
  // Each table names the matmuls and the attention, and both sides' dispatches: the source pass
  // has the encoder's layers and the decoder's projections (2 + 2 layers here).
  for (size_t at : {source, step}) {
    const std::string table = r.out.substr(at, r.out.find("| counter", at) - at);
    CHECK(table.find("| matmul") != std::string::npos);
    CHECK(table.find("| attention") != std::string::npos);
    CHECK(table.find("| all (GPU)") != std::string::npos);
  }
  const test::CliResult cpu = test::gpt2vk(
      {"bench", "-m", folder, "-p", "8", "-n", "2", "-r", "1", "--profile", "--device", "cpu"});
  CHECK(cpu.exit_code == 0);
  CHECK(cpu.err.find("--profile needs a Vulkan device") != std::string::npos);
}

TEST_CASE("bench: what an encoder-decoder's bench refuses") {
  test::TempDir dir;
  const std::string folder = make_folder(dir, "t5", "tiny-gated");
  const auto refused = [&](std::vector<std::string> extra, const std::string& why) {
    std::vector<std::string> args = {"bench", "-m", folder, "--device", "cpu", "-r", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const test::CliResult r = test::gpt2vk(args);
    CAPTURE(extra);
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(why) != std::string::npos);
    CHECK(r.out.empty());
  };
  refused({"--parallel", "2"}, "--parallel: an encoder-decoder's bench decodes one sequence");
  refused({"--kv-cache", "f16"}, "--kv-cache f16: an encoder-decoder's caches are fp32");
  refused({"-p", "0", "-n", "0"}, "nothing to run");
  refused({"-p", "100000"}, "-p 100000: a source longer than the model's");
  refused({"-p", "4", "-n", "100000"}, "-n 100000: more decoder steps than its context");
}

TEST_CASE("logits: an encoder-decoder's teacher-forced logits match Hugging Face's T5 v1.1") {
  const auto e = test::read_expected(test::hf("t5-v1_1") / "expected.safetensors");
  const test::Array &input = e.at("input_ids"), &mask = e.at("attention_mask");
  const test::Array &dec = e.at("decoder_input_ids"), &hidden = e.at("encoder_hidden");
  const test::Array& logits = e.at("logits");
  const size_t V = logits.width(), C = hidden.width();
  const std::string folder = test::hf("t5-v1_1").string();
  test::TempDir dir;
  // The CPU reference, and the tests' GPU where there is one.
  std::vector<std::vector<std::string>> devices = {{"--device", "cpu"}};
  if (test::gpu()) devices.push_back({});
  for (const std::vector<std::string>& device : devices) {
    CAPTURE(device);
    for (size_t b = 0; b < input.shape[0]; b++) {
      CAPTURE(b);
      const std::vector<int32_t> source = ids_of(input, b, &mask), target = ids_of(dec, b);
      write_ids(dir / "source.bin", source);
      write_ids(dir / "ids.bin", target);
      std::vector<std::string> args = {
          "logits", "-m", folder, "--precision", "f32", "--source", (dir / "source.bin").string(),
          "--ids", (dir / "ids.bin").string(), "-o", (dir / "logits.bin").string(),
          "--hidden-out", (dir / "hidden.bin").string()};
      args.insert(args.end(), device.begin(), device.end());
      const test::CliResult r = test::gpt2vk(args);
      CAPTURE(r.err);
      REQUIRE(r.exit_code == 0);
      CHECK(test::no_validation_messages(r));
      const std::vector<float> got = read_floats(dir / "logits.bin");
      REQUIRE(got.size() == target.size() * V);
      CHECK(test::worst_scaled(got, logits.slice(b * target.size() * V, target.size() * V), V) <
            1e-4);
      const std::vector<float> h = read_floats(dir / "hidden.bin");
      REQUIRE(h.size() == source.size() * C);
      CHECK(test::worst_scaled(h, hidden.slice(b * input.shape[1] * C, source.size() * C), C) <
            1e-4);
    }
  }
}

TEST_CASE("logits: an encoder-decoder's bad input is an error") {
  const std::string folder = test::hf("t5-v1_1").string();
  test::TempDir dir;
  write_ids(dir / "ok.bin", {0, 5, 7});
  write_ids(dir / "big.bin", {0, 5, 100000});
  write_ids(dir / "long.bin", std::vector<int32_t>(100000, 3));
  const auto run = [&](const char* source, const char* ids) {
    std::vector<std::string> args = {"logits", "-m", folder, "--device", "cpu", "--ids",
                                     (dir / ids).string(), "-o", (dir / "out.bin").string()};
    if (source) args.insert(args.end(), {"--source", (dir / source).string()});
    return test::gpt2vk(args);
  };
  const auto refused = [](const test::CliResult& r, const std::string& why) {
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(why) != std::string::npos);
  };
  refused(run(nullptr, "ok.bin"), "an encoder-decoder needs --source");
  // Each message names the file at fault.
  refused(run("big.bin", "ok.bin"), "big.bin: token id 100000 at position 2 is outside");
  refused(run("ok.bin", "big.bin"), "big.bin: token id 100000 at position 2 is outside");
  refused(run("long.bin", "ok.bin"), "long.bin: 100000 ids, more than the model's context");
  refused(run("ok.bin", "long.bin"), "long.bin: 100000 ids, more than the model's context");
  // --source for a decoder's folder.
  const test::CliResult d = test::gpt2vk(
      {"logits", "-m", (test::source_dir() / "tests/data/models/gpt2-tiny").string(), "--device",
       "cpu", "--ids", (dir / "ok.bin").string(), "-o", (dir / "out.bin").string(), "--source",
       (dir / "ok.bin").string()});
  refused(d, "--source: only for an encoder-decoder");
}

// compare on an encoder-decoder: the encoder's output and the decoder's logits over the CPU
// reference's greedy target, both kernel sets, at compare's own tolerance (1e-4 of a row's
// scale; measured ~1e-5 here); a tolerance below fp32's rounding fails, so the command measures.
TEST_CASE("compare: an encoder-decoder's GPU against the CPU reference") {
  GPU_TEST(g);
  test::TempDir dir;
  for (const auto& [arch, shape] : {std::pair{"marian", "tiny"}, std::pair{"t5", "tiny-narrow"}}) {
    CAPTURE(arch);
    const std::string m = make_folder(dir, arch, shape);
    const std::string text = "translate English to German: The house is wonderful.";
    for (const char* kernels : {"gpu", "cpu"}) {
      CAPTURE(kernels);
      const test::CliResult r = test::gpt2vk({"compare", "-m", m, "-p", text, "--kernels", kernels});
      CHECK_MESSAGE(r.exit_code == 0, r.out << r.err);
      CHECK(test::no_validation_messages(r));
      CHECK(r.out.find("encoder output [") != std::string::npos);
      CHECK(r.out.find("target tokens (the reference's greedy)") != std::string::npos);
      CHECK(r.out.find("OK: the GPU matches the CPU reference") != std::string::npos);
    }
    const test::CliResult tight =
        test::gpt2vk({"compare", "-m", m, "-p", text, "--kernels", "gpu", "--tolerance", "1e-12"});
    CHECK(tight.exit_code == 2);
    CHECK(tight.out.find("FAIL: the GPU differs") != std::string::npos);
  }
}
