// The demo model shipped in models/kjv (trained by tools/train_kjv): it loads, the GPU agrees with
// the CPU reference on it, and the engine scores the documented held-out perplexity.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/forward/cpu_model.h"
#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/text/tokenizer.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"

namespace {

std::filesystem::path kjv() {
  return test::source_dir() / "models/kjv";
}

}  // namespace

TEST_CASE("kjv: the shipped model loads cleanly as a byte-level TinyGPT") {
  auto ckpt = model::Checkpoint::load(kjv());
  CHECK(ckpt->warnings().empty());
  const model::Config& c = ckpt->config();
  CHECK(c.n_vocab == 256);
  CHECK(c.tokenizer.kind == model::TokenizerKind::Bytes);
  CHECK(c.activation == model::Activation::GeluErf);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.tie_word_embeddings);
}

TEST_CASE("kjv: GPU and CPU reference agree on the shipped model") {
  GPU_TEST(g);
  auto ckpt = model::Checkpoint::load(kjv());
  auto tok = model::load_tokenizer(kjv(), ckpt->config().tokenizer);
  const std::vector<int32_t> ids =
      tok->encode("And God said, Let there be light: and there was light.");
  for (auto [p, ks] : test::precisions_and_kernel_sets()) {
    auto gpu = test::gpu_model(g, *ckpt, p, ks);
    auto cpu = model::make_cpu_model(*ckpt, p);
    // The tolerance of tests/test_model.cpp: fp32 accumulation against double.
    CHECK(test::close_rows(
        std::string("kjv ") + model::precision_name(p) + ", " + test::kernels_name(ks),
        gpu->logits(ids), cpu->logits(ids), 256, 2e-5));
  }
}

TEST_CASE("kjv: the engine scores the documented held-out perplexity") {
  GPU_TEST(g);
  // heldout.json's ci_slice: the first four windows of heldout.txt, scored by the training
  // tools in float64 from the same fp32 weights (the whole file takes minutes on lavapipe).
  const nlohmann::json doc = nlohmann::json::parse(test::read_file(kjv() / "heldout.json"));
  const nlohmann::json& slice = doc["ci_slice"];
  const std::string text =
      test::read_file(kjv() / "heldout.txt").substr(0, slice["bytes"].get<size_t>());
  test::TempDir dir;
  test::write_file(dir / "slice.txt", text);
  for (vk::KernelSet ks : test::kKernelSets) {
    const test::CliResult r =
        test::gpt2vk({"perplexity", "-f", (dir / "slice.txt").string(), "--precision", "f32",
                      "--kernels", vk::kernel_set_name(ks)});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    double nll = 0, ppl = 0;
    unsigned count = 0;
    const size_t at = r.out.find("mean nll = ");
    REQUIRE(at != std::string::npos);
    REQUIRE(std::sscanf(r.out.c_str() + at, "mean nll = %lf\nppl = %lf over %u tokens", &nll, &ppl,
                        &count) == 3);
    CHECK(count == slice["tokens_scored"].get<unsigned>());
    // fp32 against float64 over 1024 predictions: the mean agrees to ~1e-7; 1e-5 leaves room.
    CHECK(std::fabs(nll - slice["mean_nll"].get<double>()) < 1e-5);
    CHECK(test::no_validation_messages(r));
  }
}

TEST_CASE("kjv: generate without --model runs the shipped model") {
  GPU_TEST(g);
  std::vector<std::string> outs;
  for (vk::KernelSet ks : test::kKernelSets) {
    const test::CliResult r = test::gpt2vk({"generate", "-p", "And God said", "-n", "40", "-s", "1",
                                            "--kernels", vk::kernel_set_name(ks)});
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.rfind("And God said", 0) == 0);
    CHECK(r.out.size() > std::string("And God said").size() + 20);
    CHECK(test::no_validation_messages(r));
    outs.push_back(r.out);
  }
  // The same seed samples the same text from either kernel set's logits.
  CHECK(outs[0] == outs[1]);
}
