// The gpt2vk commands end to end, on the golden models of tests/data/models: what they print,
// what they write, and their exit codes, with the validation layer on.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/text/tokenizer.h"
#include "model/text/utf8.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"
#include "tests/process.h"

namespace {

std::string models(const char* name) {
  return (test::source_dir() / "tests/data/models" / name).string();
}

nlohmann::json golden(const char* name) {
  return nlohmann::json::parse(test::read_file(models(name) + "/goldens.json"));
}

// The text greedy generation must print: the prompt, then the golden ids' bytes (the bytes
// tokenizer), invalid UTF-8 replaced as the stream does.
std::string expected_text(const nlohmann::json& g, size_t n) {
  std::string bytes;
  for (size_t i = 0; i < n; i++) bytes.push_back(static_cast<char>(g["greedy_ids"][i].get<int>()));
  return g["greedy_prompt_text"].get<std::string>() + model::sanitize_utf8(bytes) + "\n";
}

}  // namespace

// Each model command on the GPU runs under both kernel sets (--kernels), and where it has one,
// on the CPU reference (--device cpu).
const char* const kGpuKernels[] = {"--kernels=gpu", "--kernels=cpu"};

TEST_CASE("cli: generate prints the prompt and the greedy continuation, on GPU and CPU") {
  GPU_TEST(g);
  const nlohmann::json gold = golden("gpt2-tiny");
  for (const char* where : {"--kernels=gpu", "--kernels=cpu", "--device=cpu"}) {
    CAPTURE(where);
    const std::vector<std::string> args = {
        "generate", "-m", models("gpt2-tiny"), "-p",  "Hello", "-n", "16",
        "--temp",   "0",  "--precision",       "f32", where};
    const test::CliResult r = test::gpt2vk(args);
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == expected_text(gold, 16));  // stdout: the text and nothing else
    CHECK(r.err.find("generated 16 tokens") != std::string::npos);
    CHECK(r.err.find("tok/s") != std::string::npos);
    CHECK(r.err.find("f32") != std::string::npos);
    CHECK(test::no_validation_messages(r));
  }
}

TEST_CASE("cli: sampling with a seed is reproducible") {
  GPU_TEST(g);
  std::vector<std::string> outs;
  for (const char* kernels : kGpuKernels) {
    CAPTURE(kernels);
    const std::vector<std::string> args = {"generate", "-m", models("tinygpt"), "-p", "Hello",
                                           "-n",       "24", "--seed",          "5",  kernels};
    const test::CliResult a = test::gpt2vk(args), b = test::gpt2vk(args);
    CHECK(a.exit_code == 0);
    CHECK(a.out == b.out);
    CHECK(a.out.rfind("Hello", 0) == 0);
    outs.push_back(a.out);
  }
  CHECK(outs[0] == outs[1]);  // the same draws from either kernel set's logits
}

TEST_CASE("cli: compare passes on a golden model") {
  GPU_TEST(g);
  for (const char* kernels : kGpuKernels) {
    const test::CliResult r =
        test::gpt2vk({"compare", "-m", models("post-norm"), "-p", "Hello, Vulkan", kernels});
    CAPTURE(r.out);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("OK: the GPU matches the CPU reference") != std::string::npos);
    CHECK(test::no_validation_messages(r));
  }
}

TEST_CASE("cli: logits writes [T, V] float32 that matches the golden") {
  GPU_TEST(g);
  test::TempDir dir;
  const nlohmann::json gold = golden("gpt2-tiny");
  const std::vector<int32_t> ids = gold["ids"];
  test::write_file(dir / "ids.bin",
                   std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
  for (const char* kernels : kGpuKernels) {
    CAPTURE(kernels);
    const test::CliResult r =
        test::gpt2vk({"logits", "-m", models("gpt2-tiny"), "--ids", (dir / "ids.bin").string(),
                      "-o", (dir / "out.bin").string(), "--precision", "f32", kernels});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const std::string got = test::read_file(dir / "out.bin");
    const std::string ref = test::read_file(models("gpt2-tiny") + "/logits.bin");
    REQUIRE(got.size() == ref.size());
    std::vector<float> g32(got.size() / 4), r32(ref.size() / 4);
    std::memcpy(g32.data(), got.data(), got.size());
    std::memcpy(r32.data(), ref.data(), ref.size());
    CHECK(test::close_rows("logits command", g32, r32, 256, 2e-5));
    // With an fp16 KV cache: within the option's stated 5e-3 of the golden, and not the same.
    const test::CliResult h =
        test::gpt2vk({"logits", "-m", models("gpt2-tiny"), "--ids", (dir / "ids.bin").string(),
                      "-o", (dir / "out16.bin").string(), "--precision", "f32", "--kv-cache",
                      "f16", kernels});
    CAPTURE(h.err);
    REQUIRE(h.exit_code == 0);
    const std::string got16 = test::read_file(dir / "out16.bin");
    REQUIRE(got16.size() == ref.size());
    std::vector<float> h32(got16.size() / 4);
    std::memcpy(h32.data(), got16.data(), got16.size());
    CHECK(h32 != g32);
    CHECK(test::close_rows("logits command, fp16 KV cache", h32, r32, 256, 5e-3));
  }
}

TEST_CASE("cli: perplexity prints its result on the last line") {
  GPU_TEST(g);
  test::TempDir dir;
  const nlohmann::json gold = golden("gpt2-tiny");
  test::write_file(dir / "text.txt", gold["text"].get<std::string>());
  // The whole 20-byte text in one window of 19 predictions: the golden's mean NLL.
  for (const char* kernels : kGpuKernels) {
    CAPTURE(kernels);
    const test::CliResult r =
        test::gpt2vk({"perplexity", "-m", models("gpt2-tiny"), "-f", (dir / "text.txt").string(),
                      "--precision", "f32", kernels});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const size_t last = r.out.rfind("ppl = ");
    REQUIRE(last != std::string::npos);
    double ppl = 0;
    unsigned count = 0;
    REQUIRE(std::sscanf(r.out.c_str() + last, "ppl = %lf over %u tokens", &ppl, &count) == 2);
    CHECK(count == 19);
    CHECK(ppl == doctest::Approx(gold["perplexity"].get<double>()).epsilon(1e-5));
    // stderr is not a terminal here: no "\r" progress, one final line with the same figure.
    CHECK(r.err.find('\r') == std::string::npos);
    char figure[32];
    std::snprintf(figure, sizeof figure, "| ppl %.3f |", ppl);
    const size_t final_line = r.err.find("gpt2vk: 19/19 tokens scored ");
    REQUIRE(final_line != std::string::npos);
    CHECK(r.err.find(figure, final_line) != std::string::npos);
    CHECK(r.err.find(" took ", final_line) != std::string::npos);
  }
  // Windows of 5: 19 predictions in windows of 5, 5, 5, 4, each from its own short context.
  const test::CliResult w = test::gpt2vk(
      {"perplexity", "-m", models("gpt2-tiny"), "-f", (dir / "text.txt").string(), "--ctx", "5"});
  CHECK(w.exit_code == 0);
  CHECK(w.out.find("over 19 tokens") != std::string::npos);
}

TEST_CASE("cli: tokenize prints ids and writes int32") {
  test::TempDir dir;
  const std::string m = (test::source_dir() / "tests/data/models/chars").string();
  const test::CliResult r = test::gpt2vk({"tokenize", "-m", m, "-p", "hello"});
  CHECK(r.exit_code == 0);
  const test::CliResult w =
      test::gpt2vk({"tokenize", "-m", m, "-p", "hello", "-o", (dir / "ids.bin").string()});
  CHECK(w.exit_code == 0);
  const std::string bytes = test::read_file(dir / "ids.bin");
  REQUIRE(bytes.size() == 5 * 4);
  std::string printed;
  for (size_t i = 0; i < 5; i++) {
    int32_t id = 0;
    std::memcpy(&id, bytes.data() + i * 4, 4);
    if (i) printed += ' ';
    printed += std::to_string(id);
  }
  CHECK(r.out == printed + "\n");
}

TEST_CASE("cli: bad input gives a clear error and a non-zero exit") {
  test::TempDir dir;
  test::write_file(dir / "bad.txt", "ok \xff\xfe bad");
  test::write_file(dir / "ids.bin", "abc");
  const std::string m = models("gpt2-tiny");
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"generate", "-m", (dir / "nowhere").string(), "-p", "x"}, "nowhere"},
      {{"generate", "-m", m, "-p", ""}, "empty"},
      {{"generate", "-m", m, "-f", (dir / "bad.txt").string()}, "invalid UTF-8 at byte 3"},
      {{"generate", "-m", m, "-f", (dir / "missing.txt").string()}, "cannot open"},
      {{"generate", "-m", m, "-p", std::string(65, 'a')}, "longer than the model's context of 64"},
      {{"generate", "-m", m, "-p", "x", "--device", "no-such-gpu"}, "no-such-gpu"},
      {{"generate", "-m", m, "-p", "x", "--precision", "f8"}, "f8"},
      {{"generate", "-m", m, "-p", "x", "--kv-cache", "bf16"}, "bf16"},
      {{"logits", "-m", m, "--ids", (dir / "ids.bin").string(), "-o", (dir / "o.bin").string()},
       "not a non-empty list of int32"},
      {{"tokenize", "-m", models("chars"), "-p", "HELLO"}, "not in"},
  };
  for (const Case& c : cases) {
    const test::CliResult r = test::gpt2vk(c.args);
    CAPTURE(c.args[0]);
    CAPTURE(r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code < 128);  // an error exit, not a crash
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: --version names the revision and the Vulkan devices, or that there are none") {
  const test::CliResult r = test::gpt2vk({"--version"});
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("gpt2vk ", 0) == 0);
  CHECK((r.out.find("\ndevice 0: ") != std::string::npos ||
         r.out.find("no Vulkan device") != std::string::npos));
  // No loader at all: still the revision, and why there is no device, not an error.
  const test::CliResult none =
      test::gpt2vk({"--version"}, {{"GPT2VK_VULKAN_LOADER", "/nonexistent/libvulkan.so.1"}});
  CHECK(none.exit_code == 0);
  CHECK(none.out.rfind("gpt2vk ", 0) == 0);
  CHECK_MESSAGE(none.out.find("no Vulkan device: the Vulkan loader '/nonexistent/libvulkan.so.1'") !=
                    std::string::npos,
                none.out);
}

TEST_CASE("cli: an unknown command or option says what was likely meant") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string m = models("gpt2-tiny");
  const Case cases[] = {
      {{"gen", "-p", "hi"}, "gpt2vk: unknown command 'gen': did you mean 'generate'?\ncommands: "
                            "devices, opbench, bench, tokenize, generate, chat, compare, logits, "
                            "perplexity, attention, embed, fill-mask, classify, seq2seq, serve, "
                            "make-model, train\n"},
      {{"tokenise", "-p", "hi"}, "unknown command 'tokenise': did you mean 'tokenize'?"},
      {{"frobnicate"}, "gpt2vk: unknown command 'frobnicate'\ncommands: devices,"},
      {{"--verison"}, "gpt2vk: unknown option '--verison': did you mean '--version'?"},
      {{"generate", "-m", m, "-p", "hi", "--tempp", "0.5"},
       "gpt2vk generate: unknown option '--tempp': did you mean '--temp'?\n"
       "Run 'gpt2vk generate --help' for its options."},
      {{"generate", "-m", m, "-p", "hi", "--top=5"},
       "unknown option '--top': did you mean '--top-k' or '--top-p'?"},
      {{"train", "--resume", "x", "--overwite"},
       "gpt2vk train: unknown option '--overwite': did you mean '--overwrite'?"},
      {{"tokenize", "-m", m, "-p", "hi", "extra"}, "gpt2vk tokenize: unexpected argument 'extra'"},
  };
  for (const Case& c : cases) {
    const test::CliResult r = test::gpt2vk(c.args);
    CAPTURE(c.args[0]);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code < 128);
    CHECK_MESSAGE(r.err.find(c.message) != std::string::npos, r.err);
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: a number out of range says what the option takes") {
  const std::string m = models("gpt2-tiny");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"serve", "-m", m, "--port", "99999"},
       "--port: must be a whole number from 0 to 65535 (0: any free port), got 99999"},
      {{"serve", "-m", m, "--port", "-1"}, "--port: must be a whole number from 0 to 65535"},
      {{"generate", "-m", m, "-p", "hi", "-n", "-5"},
       "--n-predict: must be a whole number from -1 to 1000000 (-1: until the end of text or a "
       "full context), got -5"},
      {{"generate", "-m", m, "-p", "hi", "--top-k", "ten"},
       "--top-k: must be a whole number from 0 to 4294967295, got ten"},
      {{"train", "--resume", "x", "--batch", "-2"}, "--batch: must be a whole number from 0 to"},
      {{"train", "--resume", "x", "--steps", "0"}, "--steps: must be a whole number from 1 to"},
      {{"bench", "-m", m, "-p", "128,x"}, "--n-prompt: must be a whole number from 0 to 1048576, got x"},
  };
  for (const Case& c : cases) {
    const test::CliResult r = test::gpt2vk(c.args);
    CAPTURE(c.args[0]);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code < 128);
    CHECK_MESSAGE(r.err.find(c.message) != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("Could not convert") == std::string::npos, r.err);
  }
}

TEST_CASE("cli: generate takes the prompt as its argument, and -n -1 fills the context") {
  // The CPU reference: no Vulkan needed, the same tokens as the GPU's (the first test case).
  const nlohmann::json gold = golden("gpt2-tiny");
  const std::string m = models("gpt2-tiny");
  const std::string prompt = gold["greedy_prompt_text"].get<std::string>();
  const std::vector<std::string> common = {"-m", m, "-n", "16", "--temp", "0", "--precision",
                                           "f32", "--device", "cpu"};
  std::vector<std::string> positional = {"generate", prompt};
  positional.insert(positional.end(), common.begin(), common.end());
  const test::CliResult r = test::gpt2vk(positional);
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == expected_text(gold, 16));
  // Both ways at once: which one was meant is unclear.
  std::vector<std::string> both = positional;
  both.insert(both.end(), {"-p", "Hi"});
  const test::CliResult twice = test::gpt2vk(both);
  CHECK(twice.exit_code == 1);
  CHECK_MESSAGE(twice.err.find("the prompt is given twice: as \"" + prompt + "\" and as -p; give one") !=
                    std::string::npos,
                twice.err);
  CHECK(twice.out.empty());
  // -n -1: until the prompt and the text fill the context (64 tokens; this model has no
  // end-of-text token), without sliding the window.
  const test::CliResult full = test::gpt2vk(
      {"generate", "-m", m, "-p", prompt, "-n", "-1", "--temp", "0", "--device", "cpu"});
  CAPTURE(full.err);
  CHECK(full.exit_code == 0);
  const size_t prompt_tokens = gold["greedy_prompt"].size();
  CHECK(full.err.find("generated " + std::to_string(64 - prompt_tokens) + " tokens") !=
        std::string::npos);
  CHECK(full.err.find("stop: context full") != std::string::npos);
  CHECK(full.err.find("sliding") == std::string::npos);
}

TEST_CASE("cli: the demo model is found in the install's data folder, not at a build path") {
  // A copy of the binary in a folder of its own: nothing of the source tree is where it looks.
  test::TempDir dir;
  const std::filesystem::path bin = dir / "bin" / "gpt2vk";
  std::filesystem::create_directories(bin.parent_path());
  std::filesystem::copy_file(GPT2VK_BINARY, bin);
  const std::vector<std::string> args = {bin.string(), "generate", "And God said", "-n", "4",
                                         "--temp", "0", "--device", "cpu"};
  const test::CliResult alone = test::run(args, test::with_validation({}));
  CHECK(alone.exit_code == 1);
  CHECK_MESSAGE(alone.err.find("the demo model is not found (models/kjv is in none of: " +
                               (dir.path() / "share" / "gpt2vk").string()) != std::string::npos,
                alone.err);
  CHECK(alone.err.find("pass --model DIR") != std::string::npos);
  CHECK(alone.out.empty());
  // Laid out as cmake --install lays it out: <prefix>/bin/gpt2vk, <prefix>/share/gpt2vk/models.
  const std::filesystem::path share = dir / "share" / "gpt2vk" / "models";
  std::filesystem::create_directories(share);
  std::filesystem::copy(test::source_dir() / "models" / "kjv", share / "kjv",
                        std::filesystem::copy_options::recursive);
  const test::CliResult installed = test::run(args, test::with_validation({}));
  CAPTURE(installed.err);
  CHECK(installed.exit_code == 0);
  CHECK(installed.out.rfind("And God said", 0) == 0);
  CHECK(installed.out.size() > std::string("And God said\n").size());
}

TEST_CASE("cli: Ctrl-C or SIGTERM ends generate's text with a newline and the summary") {
  for (const int signal : {SIGINT, SIGTERM}) {
    CAPTURE(signal);
    // Far more tokens than the context: it slides the window until it is stopped. The demo
    // model reads bytes, 256 in its context: 400 bytes of text are past a slide.
    test::Background gen({"generate", "And God said", "-n", "1000000", "--device", "cpu",
                          "--seed", "7"});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (gen.out().size() < 400 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE_MESSAGE(gen.out().size() >= 400, gen.err());
    const int code = gen.stop(signal);
    CHECK(code == 128 + signal);
    const std::string out = gen.out(), err = gen.err();
    CAPTURE(err);
    CHECK(out.rfind("And God said", 0) == 0);
    CHECK(out.back() == '\n');
    CHECK(err.find(std::string("seed 7 | stop: interrupted (") +
                   (signal == SIGINT ? "SIGINT" : "SIGTERM") + ")") != std::string::npos);
    // The window's notes come after the text, never inside its line, each slide counted.
    CHECK(("\n" + err).find("\ngpt2vk: context full (256 tokens): sliding the window") !=
          std::string::npos);
    CHECK(err.find(" times)\n") != std::string::npos);
  }
}

TEST_CASE("cli: tokenize --text prints each token's bytes beside its id") {
  // The bytes tokenizer: "é" is two tokens, each half of its UTF-8 encoding.
  const std::string m = models("gpt2-tiny");
  const std::string text = "a \"b\"\t\xc3\xa9";
  const test::CliResult r = test::gpt2vk({"tokenize", "-m", m, "-p", text, "--text"});
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  const test::CliResult ids = test::gpt2vk({"tokenize", "-m", m, "-p", text});
  std::string expected;
  const char* const pieces[] = {"\"a\"", "\" \"", "\"\\\"\"", "\"b\"", "\"\\\"\"",
                                "\"\\t\"", "\"\\xc3\"", "\"\\xa9\""};
  size_t at = 0, i = 0;
  for (const char* piece : pieces) {
    const size_t end = ids.out.find_first_of(" \n", at);
    expected += ids.out.substr(at, end - at) + "\t" + piece + "\n";
    at = end + 1, i++;
  }
  CHECK(i == 8);
  CHECK(r.out == expected);
  const test::CliResult both =
      test::gpt2vk({"tokenize", "-m", m, "-p", "a", "--text", "-o", "/tmp/never-written.bin"});
  CHECK(both.exit_code == 1);
  CHECK(both.err.find("--text prints the tokens and -o writes their ids; give one") !=
        std::string::npos);
}
