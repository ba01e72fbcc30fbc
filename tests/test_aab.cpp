// The hand-made aab model (models/aab; its README.md derives every weight): the logits the
// README derives, 100% greedy accuracy on aab x 10 from every window the generation loop can
// leave, the command line, and recovery from prompts off the pattern, on the GPU (fp32, fp16)
// and the CPU reference.
//
// Logit tolerance: 1e-5 absolute. The README bounds what the attention leaks onto other
// positions by 3e-9 of weight (under 1e-7 of logit); the weights are exact in fp16 and the
// logits are sums of a few terms no larger than 8, so only fp32 rounding (~1e-6) remains. A
// wrong weight or position moves a logit by at least 1.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "model/forward/cpu_model.h"
#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/generation/generate.h"
#include "model/text/tokenizer.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"

namespace {

constexpr double kTol = 1e-5;
const model::Precision kPrecisions[] = {model::Precision::F32, model::Precision::F16};

std::filesystem::path aab_dir() {
  return test::source_dir() / "models" / "aab";
}

struct Aab {
  std::unique_ptr<model::Checkpoint> checkpoint = model::Checkpoint::load(aab_dir());
  std::unique_ptr<model::Tokenizer> tokenizer =
      model::load_tokenizer(aab_dir(), checkpoint->config().tokenizer);
};

// The README's logits (a, b) at the last position of `text`, from its formulas:
// logit_a = [x_t = a] + 4, logit_b = [x_t = b] + 8s, s the mean of +-1 over the last two tokens.
std::array<double, 2> readme_logits(std::string_view text) {
  auto sign = [](char ch) { return ch == 'a' ? 1.0 : -1.0; };
  const size_t t = text.size() - 1;
  const double s = t == 0 ? sign(text[0]) : (sign(text[t - 1]) + sign(text[t])) / 2;
  return {(text[t] == 'a' ? 1.0 : 0.0) + 4.0, (text[t] == 'b' ? 1.0 : 0.0) + 8.0 * s};
}

// True when s continues (aab)^infinity from some offset: a rotation of aab, repeated.
bool in_cycle(std::string_view s) {
  std::string cycle;
  while (cycle.size() < s.size() + 3) cycle += "aab";
  for (size_t r = 0; r < 3; r++)
    if (std::string_view(cycle).substr(r, s.size()) == s) return true;
  return false;
}

void check_logits(model::Model& m, const model::Tokenizer& tok) {
  // Every case of the README's table, and longer windows where other positions are visible.
  for (const char* text :
       {"a", "b", "aa", "ab", "ba", "bb", "aab", "abba", "baaba", "bbbbb", "ababa", "aaaab"}) {
    CAPTURE(text);
    m.reset();
    const model::Candidates c = m.next(tok.encode(text), 0);  // all V logits
    const std::array<double, 2> want = readme_logits(text);
    REQUIRE(c.logits.size() == 2);
    CHECK(std::abs(double{c.logits[0]} - want[0]) <= kTol);
    CHECK(std::abs(double{c.logits[1]} - want[1]) <= kTol);
  }
}

// The greedy prediction of ids[t] for every t >= 2 of aab x 10, from the last w tokens for
// every w from 2 to min(5, t): the crops a 5-token window and its slides can leave.
void check_accuracy(model::Model& m, const model::Tokenizer& tok) {
  std::string text;
  for (int i = 0; i < 10; i++) text += "aab";
  const std::vector<int32_t> ids = tok.encode(text);
  REQUIRE(ids.size() == 30);
  size_t total = 0, correct = 0;
  for (size_t t = 2; t < ids.size(); t++) {
    for (size_t w = 2; w <= std::min<size_t>(5, t); w++) {
      m.reset();
      const model::Candidates c = m.next(std::span(ids).subspan(t - w, w), 1);
      total++;
      if (c.ids.at(0) == ids[t]) {
        correct++;
      } else {
        CAPTURE(t);
        CAPTURE(w);
        CHECK(tok.token_bytes(c.ids[0]) == text.substr(t, 1));
      }
    }
  }
  CHECK(total == 106);  // t = 2, 3, 4 give 1, 2, 3 windows; t = 5..29 give 4 each
  CHECK(correct == total);
}

// Greedy generation from prompts off the pattern: 14 tokens, through several window slides.
void check_recovery(model::Model& m, const model::Tokenizer& tok) {
  for (const char* prompt : {"bbbbb", "abba", "b", "bab", "bbbab", "a"}) {
    CAPTURE(prompt);
    model::GenerateOptions o;
    o.max_new = 14;
    o.sampling.temperature = 0;
    const model::GenerateResult r = model::generate(m, tok.encode(prompt), o, [](int32_t) {});
    const std::string out = tok.decode(r.tokens);
    CAPTURE(out);
    REQUIRE(out.size() == 14);
    CHECK(in_cycle(std::string_view(out).substr(out.size() - 9)));
    CHECK(in_cycle(out));  // the README: the first generated token already continues the cycle
    CHECK(r.slides >= 2);
  }
}

}  // namespace

TEST_CASE("aab: the folder loads as the README describes it") {
  Aab aab;
  const model::Config& c = aab.checkpoint->config();
  CHECK(aab.checkpoint->warnings().empty());
  CHECK(c.n_vocab == 2);
  CHECK(c.n_ctx == 5);
  CHECK(c.n_embd == 8);
  CHECK(c.n_layer == 1);
  CHECK(c.n_head == 1);
  CHECK(c.attention_only);
  CHECK_FALSE(c.final_norm);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.tie_word_embeddings);
  CHECK(c.attention_scale == 20.0f);
  CHECK(aab.tokenizer->encode("ab") == std::vector<int32_t>{0, 1});
  CHECK(in_cycle("baabaa"));  // the helper itself
  CHECK_FALSE(in_cycle("abba"));
}

TEST_CASE("aab: CPU reference: the README's logits, 100% on aab x 10, recovery") {
  Aab aab;
  for (model::Precision p : kPrecisions) {
    CAPTURE(std::string(model::precision_name(p)));
    auto cpu = model::make_cpu_model(*aab.checkpoint, p);
    check_logits(*cpu, *aab.tokenizer);
    check_accuracy(*cpu, *aab.tokenizer);
    check_recovery(*cpu, *aab.tokenizer);
  }
}

TEST_CASE("aab: GPU: the README's logits, 100% on aab x 10, recovery") {
  GPU_TEST(g);
  Aab aab;
  for (auto [p, ks] : test::precisions_and_kernel_sets()) {
    CAPTURE(std::string(model::precision_name(p)));
    CAPTURE(test::kernels_name(ks));
    auto gpu = test::gpu_model(g, *aab.checkpoint, p, ks);
    check_logits(*gpu, *aab.tokenizer);
    check_accuracy(*gpu, *aab.tokenizer);
    check_recovery(*gpu, *aab.tokenizer);
  }
}

TEST_CASE("aab: gpt2vk generate continues aab with either kernel set and with --device cpu") {
  GPU_TEST(g);
  for (const char* device : {"--kernels=gpu", "--kernels=cpu", "--device=cpu"}) {
    CAPTURE(device);
    const std::vector<std::string> args = {
        "generate", "--model", aab_dir().string(), "--prompt", "aab",
        "-n",       "10",      "--temp",           "0",        device};
    const test::CliResult r = test::gpt2vk(args);
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out ==
          "aab"
          "aabaabaaba"
          "\n");
    CHECK(r.err.find("context full") != std::string::npos);  // 3 + 10 tokens slid the window
    CHECK(test::no_validation_messages(r));
  }
}
