// gpt2vk generate's llama.cpp-style flags end to end on the shipped model (models/kjv, byte-level:
// a token is a byte of the text): --stop, the penalties, -c, and their errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/cli.h"
#include "tests/gpu.h"

namespace {

const std::string kPrompt = "And God said";  // 12 tokens

// `gpt2vk generate -p PROMPT --temp 0 -n N` and `extra`, on `where`; it must succeed.
test::CliResult greedy(const std::vector<std::string>& extra,
                       const std::string& where = "--device=cpu", int n = 64,
                       const std::string& prompt = kPrompt) {
  std::vector<std::string> args = {"generate", "-p", prompt, "--temp", "0",
                                   "-n", std::to_string(n)};
  if (!where.empty()) args.push_back(where);
  args.insert(args.end(), extra.begin(), extra.end());
  test::CliResult r = test::gpt2vk(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(test::no_validation_messages(r));
  REQUIRE(r.out.size() > 0);
  r.out.pop_back();  // the newline after the text
  return r;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("generate --stop: the text ends right before the first stop string") {
  // The CPU reference, and the GPU where there is one: the same greedy text.
  std::vector<std::string> places = {"--device=cpu"};
  if (test::gpu()) places.push_back("");
  for (const std::string& where : places) {
    CAPTURE(where);
    const std::string plain = greedy({}, where).out;  // "And God said unto him, The LORD said ..."
    const size_t at = plain.find("GOD", kPrompt.size());
    REQUIRE(at != std::string::npos);
    const test::CliResult r = greedy({"--stop", "GOD"}, where);
    CHECK(r.out == plain.substr(0, at));
    CHECK_MESSAGE(has(r.err, "stop: stop string"), r.err);
    // Generation ended at the token that completed it: the last of its 3 bytes.
    CHECK_MESSAGE(has(r.err, "generated " + std::to_string(at + 3 - kPrompt.size()) + " tokens"),
                  r.err);
    // The prompt is not searched ("said" is in it): the text stops at the generated "said".
    const size_t said = plain.find("said", kPrompt.size());
    REQUIRE(said != std::string::npos);
    CHECK(greedy({"--stop", "said"}, where).out == plain.substr(0, said));
    // Several: whichever comes first in the text.
    CHECK(greedy({"--stop", "hosts", "--stop", "GOD", "--stop", "LORD"}, where).out ==
          plain.substr(0, plain.find("LORD", kPrompt.size())));
    // Text held back as the beginning of a stop string that then does not come is printed in
    // full: "The LORD " waits for an "X", and the last "b" for a "!" that the end cuts off.
    REQUIRE(plain.back() == 'b');
    const test::CliResult held = greedy({"--stop", "The LORD X", "--stop", "b!"}, where);
    CHECK(held.out == plain);
    CHECK_MESSAGE(has(held.err, "stop: length"), held.err);
  }
}

TEST_CASE("generate: the penalties change greedy text, the GPU's as the CPU's") {
  const std::string plain = greedy({}).out;
  const std::vector<std::string> penalties = {"--repeat-penalty", "1.5", "--repeat-last-n", "16",
                                              "--presence-penalty", "0.5", "--frequency-penalty",
                                              "0.25"};
  const std::string penalized = greedy(penalties).out;
  CHECK(penalized != plain);
  CHECK(penalized.rfind(kPrompt, 0) == 0);
  // Each one alone changes it too, and a window of none turns them all off.
  CHECK(greedy({"--repeat-penalty", "1.5"}).out != plain);
  CHECK(greedy({"--presence-penalty", "1"}).out != plain);
  CHECK(greedy({"--frequency-penalty", "1"}).out != plain);
  std::vector<std::string> none = penalties;
  none[3] = "0";
  CHECK(greedy(none).out == plain);
  if (test::gpu()) CHECK(greedy(penalties, "").out == penalized);  // all V logits from the GPU
}

TEST_CASE("generate -c: a shorter window slides at N, as the model's does at n_ctx") {
  // -c 32 over a 12-token prompt: the window fills after 21 new tokens and slides to its last 16
  // (the text's bytes 17..32), recomputed from position 0; it fills again after 17 more.
  const test::CliResult r = greedy({"-c", "32"}, "--device=cpu", 40);
  const std::string& text = r.out;
  REQUIRE(text.size() == 12 + 40);
  CHECK_MESSAGE(has(r.err, "context full (32 tokens): sliding the window to the last 16 tokens "
                           "and recomputing them (2 times)"),
                r.err);
  // Before the slide, the model's own window's text; after each, what those 16 bytes continue
  // with as a prompt of their own.
  const std::string plain = greedy({}, "--device=cpu", 40).out;
  CHECK(text.substr(0, 33) == plain.substr(0, 33));
  CHECK(greedy({}, "--device=cpu", 17, text.substr(17, 16)).out == text.substr(17, 33));
  CHECK(greedy({}, "--device=cpu", 2, text.substr(34, 16)).out == text.substr(34, 18));
  // The GPU's passes in the shorter window: the same text.
  if (test::gpu()) CHECK(greedy({"-c", "32"}, "", 40).out == text);
  // -n -1: until the window is full, without sliding.
  const test::CliResult full = greedy({"-c", "32"}, "--device=cpu", -1);
  CHECK(full.out.size() == 32);
  CHECK_MESSAGE(has(full.err, "generated 20 tokens"), full.err);
  CHECK_MESSAGE(has(full.err, "stop: context full"), full.err);
  CHECK_FALSE(has(full.err, "sliding"));
}

TEST_CASE("generate: penalties, stops and windows out of range say what is wrong") {
  struct Case {
    std::vector<std::string> args;
    int exit_code;  // 105: CLI11's for a value its check refused; 1: refused after loading
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--presence-penalty", "2.5"}, 105,
       "--presence-penalty: must be a number from -2 to 2, got 2.5"},
      {{"--frequency-penalty", "-3"}, 105,
       "--frequency-penalty: must be a number from -2 to 2, got -3"},
      {{"--frequency-penalty", "lots"}, 105,
       "--frequency-penalty: must be a number from -2 to 2, got lots"},
      {{"--repeat-penalty", "0"}, 105, "--repeat-penalty: must be a number greater than 0, got 0"},
      {{"--repeat-penalty", "-1.1"}, 105,
       "--repeat-penalty: must be a number greater than 0, got -1.1"},
      {{"--repeat-last-n", "-2"}, 105,
       "--repeat-last-n: must be a whole number from -1 to 2147483647 (0: none, -1: the whole "
       "context), got -2"},
      {{"--stop", ""}, 105, "--stop: a stop string may not be empty"},
      {{"--stop", "\xa9"}, 105, "--stop: a stop string must be valid UTF-8 (byte 0 is not)"},
      {{"--stop", "a", "--stop", "b", "--stop", "c", "--stop", "d", "--stop", "e"}, 105,
       "--stop: at most 4 stop strings"},
      {{"-c", "0"}, 105, "must be a whole number from 1 to 4294967295, got 0"},
      {{"-c", "300"}, 1, "a context of 300 tokens was asked for, longer than the model's 256"},
      {{"-c", "8"}, 1,
       "the prompt is 12 tokens, longer than the context of 8 tokens asked for (the model's is "
       "256)"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"generate", "-p", kPrompt, "--device", "cpu"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const test::CliResult r = test::gpt2vk(args);
    CAPTURE(c.args[0]);
    CHECK(r.exit_code == c.exit_code);
    CHECK_MESSAGE(has(r.err, c.message), r.err);
    CHECK(r.out.empty());
  }
}
