// Prompt-prefix reuse (issue 42): a slot keeps its cache after its request, and a request whose
// prompt starts with what a free slot holds computes only the rest. Checked where it matters:
// the model keeps a slot's first tokens and rewrites the rest (Model::slot_truncate), and the
// server answers every request with the bits it gives that request computed whole.
#include <doctest/doctest.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <regex>

#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"
#include "tests/process.h"

namespace {

using json = nlohmann::json;

std::vector<int32_t> some_ids(size_t n, uint32_t V, uint32_t seed) {
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; i++) ids[i] = static_cast<int32_t>((i * 7919 + seed * 104729 + 13) % V);
  return ids;
}

// ids[from, to) into slot in the engine's chunks (Engine::kPrefillChunk: at multiples of 64);
// the last chunk's last row's logits.
std::vector<float> prefill(model::Model& m, uint32_t slot, std::span<const int32_t> ids,
                           size_t from, size_t to) {
  std::vector<float> out;
  for (size_t at = from; at < to;) {
    const size_t end = std::min(to, (at / 64 + 1) * 64);
    out = m.slot_prefill(slot, ids.subspan(at, end - at), false);
    at = end;
  }
  return out;
}

}  // namespace

TEST_CASE("slot_truncate: a kept prefix and the rest computed give a whole prompt's bits") {
  // Slot 1 runs another sequence (the same first 100 ids, then others) and decodes past it,
  // keeps its first 64 tokens, and runs the prompt's rest; slot 0 runs the prompt whole. The
  // rest's chunks are the whole prompt's, over the same cached keys: the same bits, then and
  // for the tokens decoded after, under both kernel sets (what lies past the kept tokens is
  // never read).
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_ctx = 200;
  test::TinyModel tiny(c);
  const std::vector<int32_t> prompt = some_ids(170, c.n_vocab, 1);
  std::vector<int32_t> other = some_ids(190, c.n_vocab, 2);
  std::copy(prompt.begin(), prompt.begin() + 100, other.begin());
  for (auto [p, ks] : test::precisions_and_kernel_sets()) {
    CAPTURE(test::kernels_name(ks));
    CAPTURE(std::string(model::precision_name(p)));
    model::GpuModelOptions o;
    o.precision = p;
    o.slots = 2;
    o.slot_context = c.n_ctx;
    auto m = model::make_gpu_model(*tiny.checkpoint, g.with_kernels(ks), o);
    const std::vector<float> whole = prefill(*m, 0, prompt, 0, prompt.size());
    prefill(*m, 1, other, 0, other.size());
    CHECK_THROWS_WITH(m->slot_truncate(1, 191), "a slot holding 190 tokens cannot keep 191");
    m->slot_truncate(1, 64);
    CHECK(m->slot_length(1) == 64);
    CHECK(prefill(*m, 1, prompt, 64, prompt.size()) == whole);
    for (int32_t step = 0; step < 4; step++) {
      const model::Model::SlotToken rows[] = {{0, step}, {1, step}};
      const std::vector<float> out = m->slot_decode(rows);
      CHECK(std::equal(out.begin(), out.begin() + c.n_vocab, out.begin() + c.n_vocab));
    }
  }
}

TEST_CASE("serve: prompt-prefix reuse answers with the bits of the prompt computed whole") {
  // Five prompts sharing prefixes, each sent with cache_prompt false (computed whole) and then
  // again with reuse (on by default) after the others: one equal to a slot's prompt, one equal
  // to a slot's whole text (its prompt and the tokens it generated), one a prefix of a slot's
  // text, one that diverges from a slot's text mid-way, one shorter than what the slot holds.
  // Greedy with log-probabilities: the reused answers must be the whole ones' to the bit (JSON
  // carries doubles exactly), and the tokens they reused the whole 64-token chunks of the
  // longest common prefix a free slot held. Two slots under each kernel set; one slot on the
  // kernels the device picks (what `gpt2vk serve` runs by default).
  const std::string B =
      "In the beginning God created the heaven and the earth. And the earth was without form, "
      "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon "
      "the face of the waters.";
  REQUIRE(B.size() >= 150);
  const std::string A = B.substr(0, 150);
  struct Run {
    std::vector<std::string> args;
    std::vector<int> cached;  // the reused requests' cached tokens, worked out in the comments
  };
  // One slot: it holds the last request's text. Two: each request takes the free slot with the
  // longest reusable prefix, then the one holding fewer tokens, then the first.
  const Run runs[] = {{{"--parallel", "2", "--kernels", "gpu"}, {128, 128, 64, 128, 64}},
                      {{"--parallel", "2", "--kernels", "cpu"}, {128, 128, 64, 128, 64}},
                      {{}, {64, 128, 64, 64, 64}}};
  for (const Run& run : runs) {
    CAPTURE(run.args.size() > 1 ? run.args[3] : "auto");
    test::Server server(run.args);
    auto ask = [&](const std::string& prompt, bool reuse) {
      const json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0},
                         {"logprobs", 2}, {"cache_prompt", reuse}};
      const test::HttpReply r = test::post(server.url() + "/v1/completions", body.dump());
      INFO(r.body);
      REQUIRE(r.status == 200);
      return json::parse(r.body);
    };
    const json a = ask(A, false);
    const std::string generated = a["choices"][0]["text"];
    REQUIRE(generated.size() == 8);  // a byte-level model, 8 ASCII tokens
    // A, what its slot then holds (its prompt and 7 of the 8 tokens: the last is never run), a
    // prefix of A, A diverging at 130 and A's first 70.
    const std::vector<std::string> prompts = {
        A, A + generated.substr(0, 7), A.substr(0, 100),
        A.substr(0, 130) + " and the LORD God formed man of the dust of the ground.",
        A.substr(0, 70)};
    std::vector<json> whole = {a};
    for (size_t i = 1; i < prompts.size(); i++) whole.push_back(ask(prompts[i], false));
    int total = 0;
    for (size_t i = 0; i < prompts.size(); i++) {
      CAPTURE(i);
      const json reused = ask(prompts[i], true);
      CHECK(whole[i]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
      CHECK(reused["usage"]["prompt_tokens_details"]["cached_tokens"] == run.cached[i]);
      CHECK(reused["usage"]["prompt_tokens"] == prompts[i].size());
      CHECK(reused["choices"][0]["text"] == whole[i]["choices"][0]["text"]);
      CHECK(reused["choices"][0]["logprobs"] == whole[i]["choices"][0]["logprobs"]);
      total += run.cached[i];
    }
    const std::string metrics = test::get(server.url() + "/metrics").body;
    std::smatch m;
    const std::regex counter(R"(gpt2vk_prompt_tokens_cached_total (\d+))");
    REQUIRE(std::regex_search(metrics, m, counter));
    CHECK(std::stoi(m[1]) == total);
    CHECK(server.stop(SIGTERM) == 0);
    CHECK(test::no_validation_messages({0, "", server.err()}));
  }
}

TEST_CASE("serve --no-prefix-reuse computes every prompt whole") {
  test::Server server({"--no-prefix-reuse"});
  const json body = {{"prompt", std::string(100, 'a')}, {"max_tokens", 2}, {"temperature", 0}};
  for (int i = 0; i < 2; i++) {
    const test::HttpReply r = test::post(server.url() + "/v1/completions", body.dump());
    REQUIRE(r.status == 200);
    CHECK(json::parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  }
  CHECK(test::get(server.url() + "/metrics").body.find("gpt2vk_prompt_tokens_cached_total 0\n") !=
        std::string::npos);
  CHECK(server.stop(SIGTERM) == 0);
}
