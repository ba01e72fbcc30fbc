// `gpt2vk attention`: the hand-made aab model's heads as its README derives them (both kernel
// sets); the JSON of a GPT-2 block against the CPU reference; the text view; bad input; and the
// page rendered by headless Chromium with no script error. test_model.cpp checks the tap itself
// for every variant under both kernel sets; here a command that only has to carry the weights
// runs the GPU set, whose pipelines compile in seconds where the CPU set's take a minute cold.
//
// Tolerance: test_model.cpp's for the tap, |gpu - cpu| <= 1e-5 + 1e-4 * cpu on weights in
// [0, 1]; the JSON's shortest round-trip text reads back the exact floats.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/forward/cpu_model.h"
#include "tests/ci.h"
#include "tests/cli.h"
#include "tests/compare.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"
#include "tests/seq2seq_folder.h"

namespace {

constexpr test::Tolerance kTol{1e-5, 1e-4};

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

// `gpt2vk attention -m model -p text --precision f32 --json out` and `where`'s flags: the JSON.
nlohmann::json attention_json(const std::string& model, const std::string& text,
                              const std::vector<std::string>& where,
                              const std::filesystem::path& out) {
  std::vector<std::string> args = {"attention", "-m", model, "-p", text, "--precision", "f32",
                                   "--json", out.string()};
  args.insert(args.end(), where.begin(), where.end());
  const auto r = test::gpt2vk(args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(test::no_validation_messages(r));
  return nlohmann::json::parse(test::read_file(out));
}

}  // namespace

TEST_CASE("gpt2vk attention on aab: the heads its README derives") {
  // Query t >= 1 puts 1/2 on itself and 1/2 on the previous token (3e-9 leaks elsewhere, the
  // README's bound); query 0 sees only itself.
  test::TempDir dir;
  const std::string model = (test::source_dir() / "models" / "aab").string();
  for (const char* kernels : {"gpu", "cpu"}) {
    CAPTURE(kernels);
    const auto r = test::gpt2vk({"attention", "-m", model, "-p", "aabaa", "--kernels", kernels,
                                 "--precision", "f32", "--json", (dir / "aab.json").string()});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(test::no_validation_messages(r));
    const nlohmann::json j = nlohmann::json::parse(test::read_file(dir / "aab.json"));
    CHECK(j["tokens"] == nlohmann::json({"a", "a", "b", "a", "a"}));
    CHECK(j["layers"] == nlohmann::json({0}));
    CHECK(j["heads"] == nlohmann::json({0}));
    CHECK(j["summary"][0][0] == "itself 0.60, previous token 0.50");
    const auto& w = j["attention"][0][0];
    for (size_t t = 0; t < 5; t++)
      for (size_t k = 0; k < 5; k++) {
        const double want = t == 0 ? (k == 0 ? 1.0 : 0.0) : (k == t || k + 1 == t ? 0.5 : 0.0);
        CHECK_MESSAGE(std::fabs(w[t][k].get<double>() - want) < 1e-6,
                      "query " << t << ", key " << k << ": " << w[t][k]);
      }
    // The terminal view: the same head as shades, the summary on top.
    const auto text = test::gpt2vk({"attention", "-m", model, "-p", "aabaa", "--kernels", kernels});
    REQUIRE_MESSAGE(text.exit_code == 0, text.err);
    CHECK(text.out.find("layer 0, head 0 (of 1 x 1): itself 0.60, previous token 0.50") == 0);
    CHECK(text.out.find("   2 b            \u00b7\u2593\u2593\n") != std::string::npos);
  }
}

TEST_CASE("gpt2vk attention: the JSON of a GPT-2 block against the CPU reference") {
  model::Config c = test::tiny_config();
  test::TinyModel m(c);
  const std::string text = "Hello, attention!\n\tbye";
  auto cpu = model::make_cpu_model(*m.checkpoint, model::Precision::F32);
  std::vector<int32_t> ids(text.begin(), text.end());
  cpu->set_attention_taps(true);
  cpu->logits(ids);
  const auto& ref = cpu->attention_probs();
  test::TempDir out;
  {
    const auto r =
        test::gpt2vk({"attention", "-m", m.dir.path().string(), "-p", text, "--precision", "f32",
                      "--kernels", "gpu", "--json", (out / "a.json").string(), "--head", "2"});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(test::no_validation_messages(r));
    const nlohmann::json j = nlohmann::json::parse(test::read_file(out / "a.json"));
    CHECK(j["T"] == ids.size());
    CHECK(j["heads"] == nlohmann::json({2}));
    CHECK(j["layers"] == nlohmann::json({0, 1}));
    CHECK(j["tokens"][6] == "\u2423");  // the space after the comma
    CHECK(j["tokens"][17] == "\u21b5");
    CHECK(j["tokens"][18] == "\u2192");
    const size_t T = ids.size();
    for (uint32_t l = 0; l < c.n_layer; l++) {
      std::vector<float> got;
      for (const auto& row : j["attention"][l][0])
        for (const auto& w : row) got.push_back(w.get<float>());
      const std::vector<float> want(ref[l].data() + 2 * T * T, ref[l].data() + 3 * T * T);
      CHECK(test::close("layer " + std::to_string(l) + " head 2", got, want, kTol));
    }
  }
}

// An encoder's folder (transformers' own BertForMaskedLM save): [CLS] text [SEP] in WordPiece
// tokens, every query on every key, both kernel sets against the CPU reference's JSON; a layer
// past the model's is refused as for a decoder.
TEST_CASE("gpt2vk attention on a BERT folder: bidirectional, against the CPU reference") {
  test::TempDir dir;
  const std::string model = (test::source_dir() / "tests" / "data" / "hf" / "bert-mlm").string();
  const std::string text = "Paris is the capital of France.";
  auto weights = [&](const std::vector<std::string>& where, const std::string& name) {
    return attention_json(model, text, where, dir / name);
  };
  const nlohmann::json ref = weights({"--device", "cpu"}, "cpu.json");
  CHECK(ref["tokens"] == nlohmann::json({"[CLS]", "paris", "is", "the", "capital", "of",
                                         "france", ".", "[SEP]"}));
  CHECK(ref["causal"] == false);
  const size_t T = 9;
  const uint32_t L = ref["n_layer"], H = ref["n_head"];
  for (const char* kernels : {"gpu", "cpu"}) {
    CAPTURE(kernels);
    const nlohmann::json j = weights({"--kernels", kernels}, std::string(kernels) + ".json");
    CHECK(j["tokens"] == ref["tokens"]);
    for (uint32_t l = 0; l < L; l++)
      for (uint32_t h = 0; h < H; h++) {
        std::vector<float> got, want;
        for (size_t q = 0; q < T; q++)
          for (size_t k = 0; k < T; k++) {
            got.push_back(j["attention"][l][h][q][k].get<float>());
            want.push_back(ref["attention"][l][h][q][k].get<float>());
          }
        // A bidirectional query's last key (past it, a causal mask would leave 0).
        CHECK(got[T - 1] > 0.0f);
        CHECK(test::close("layer " + std::to_string(l) + " head " + std::to_string(h), got, want,
                          kTol));
      }
  }
  const auto r = test::gpt2vk({"attention", "-m", model, "-p", text, "--layer", "9"});
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.err.find("--layer 9: the model has") != std::string::npos, r.err);
}

// An encoder-decoder (the Marian fixture with SentencePiece models trained here): the decoder's
// cross-attention over the source (target rows, source columns), its own causal
// self-attention, and the encoder's, each from the GPU under both kernel sets against the CPU
// reference; the cross page renders in Chromium where it is installed.
TEST_CASE("gpt2vk attention on an encoder-decoder: cross, decoder and encoder") {
  test::TempDir dir, folder;
  test::marian_folder(folder.path());
  const std::string model = folder.path().string();
  const std::string text = "the house is wonderful", target = "the house";
  auto weights = [&](const std::vector<std::string>& where, const std::string& name) {
    return attention_json(model, text, where, dir / name);
  };
  for (const char* part : {"cross", "decoder", "encoder"}) {
    CAPTURE(part);
    std::vector<std::string> what = {"--part", part};
    if (std::string(part) != "encoder") what.insert(what.end(), {"--target", target});
    std::vector<std::string> cpu = what;
    cpu.insert(cpu.end(), {"--device", "cpu"});
    const nlohmann::json ref = weights(cpu, "cpu.json");
    const size_t T = ref["T"], K = ref.value("K", T);
    const uint32_t L = ref["n_layer"], H = ref["n_head"];
    const bool cross = std::string(part) == "cross";
    CHECK(ref["causal"] == (std::string(part) == "decoder"));
    CHECK(ref.contains("key_tokens") == cross);
    if (cross) {
      CHECK(ref["key_tokens"].size() == K);
      CHECK(ref["key_tokens"].back() == "</s>");   // the source as the model reads it
      CHECK(ref["tokens"].front() == "<pad>");     // Marian's decoder starts from its pad
      CHECK(K != T);
    }
    for (const char* kernels : {"gpu", "cpu"}) {
      CAPTURE(kernels);
      std::vector<std::string> gpu = what;
      gpu.insert(gpu.end(), {"--kernels", kernels});
      const nlohmann::json j = weights(gpu, std::string(kernels) + ".json");
      CHECK(j["tokens"] == ref["tokens"]);
      for (uint32_t l = 0; l < L; l++)
        for (uint32_t h = 0; h < H; h++) {
          std::vector<float> got, want;
          for (size_t q = 0; q < T; q++) {
            double sum = 0;
            for (size_t k = 0; k < K; k++) {
              got.push_back(j["attention"][l][h][q][k].get<float>());
              want.push_back(ref["attention"][l][h][q][k].get<float>());
              sum += double{want.back()};
            }
            CHECK(std::fabs(sum - 1.0) < 1e-5);
          }
          CHECK(test::close("layer " + std::to_string(l) + " head " + std::to_string(h), got,
                            want, kTol));
        }
    }
  }
  // Without --target, the greedy translation: the start token, then what `gpt2vk seq2seq`
  // prints but its last token.
  const nlohmann::json greedy = weights({"--kernels", "gpu"}, "greedy.json");
  CHECK(greedy["tokens"].front() == "<pad>");
  CHECK(greedy["T"].get<size_t>() >= 2);
  const auto e = test::gpt2vk({"attention", "-m", model, "-p", text, "--part", "encoder", "--target", "x"});
  CHECK(e.exit_code == 1);
  CHECK(e.err.find("--target and -n are the decoder's") != std::string::npos);
  // A decoder's folder has no such parts.
  const auto r = test::gpt2vk({"attention", "-p", "hi", "--part", "cross"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("--part is an encoder-decoder's") != std::string::npos);

  if (std::system("test -x /usr/bin/chromium") != 0) {
    if (test::in_ci()) FAIL("no /usr/bin/chromium: scripts/setup.sh --tests installs Debian's chromium");
    return;
  }
  const std::string page = (dir / "cross.html").string();
  const auto p = test::gpt2vk({"attention", "-m", model, "-p", text, "--kernels", "gpu", "-o", page});
  REQUIRE_MESSAGE(p.exit_code == 0, p.err);
  const std::string dom = (dir / "dom.html").string(), log = (dir / "chromium.log").string();
  REQUIRE(std::system(("/usr/bin/chromium --headless --no-sandbox --disable-gpu "
                       "--virtual-time-budget=20000 --enable-logging=stderr --v=0 --dump-dom file://" +
                       page + " > " + dom + " 2> " + log)
                          .c_str()) == 0);
  const std::string html = test::read_file(dom), console = test::read_file(log);
  CHECK_MESSAGE(html.find("data-status=\"ok\"") != std::string::npos,
                "the page did not finish drawing: " << html.substr(0, 400));
  const size_t maps = greedy["n_layer"].get<size_t>() * greedy["n_head"].get<size_t>();
  CHECK(html.find("data-heatmaps=\"" + std::to_string(maps) + "\"") != std::string::npos);
  CHECK_MESSAGE(console.find("CONSOLE") == std::string::npos, "console output: " << console);
}

TEST_CASE("gpt2vk attention refuses what it cannot show") {
  model::Config c = test::tiny_config();
  c.n_ctx = 1024;
  c.n_layer = 12;
  c.n_head = 12;
  test::TinyModel m(c);
  const std::string dir = m.dir.path().string();
  auto fails = [&](std::vector<std::string> args, const std::string& message) {
    args.insert(args.begin(), {"attention", "-m", dir});
    const auto r = test::gpt2vk(args);
    CHECK_MESSAGE(r.exit_code == 1, r.err);
    CHECK_MESSAGE(r.err.find(message) != std::string::npos, quoted(r.err)
                                                                << " lacks " << quoted(message));
    CHECK(r.out.empty());
  };
  fails({"-p", "hi", "--layer", "12"}, "--layer 12: the model has 12 layers (0..11)");
  fails({"-p", "hi", "--head", "99"}, "--head 99: the model has 12 heads (0..11)");
  fails({"-p", ""}, "the prompt is empty");
  fails({"-p", std::string(1025, 'x')}, "longer than the model's context of 1024");
  // 12 x 12 heads over 1000 tokens: 144 M weights, too many for one page.
  fails({"-p", std::string(1000, 'x'), "-o", "/nonexistent/a.html"},
        "144000000 weights, over the 33554432 a page or JSON file takes: choose one with "
        "--layer and/or --head");
  fails({"-p", "hi", "--kernels", "gpu", "-o", "/nonexistent/dir/a.html"},
        "/nonexistent/dir/a.html: cannot write");
}

TEST_CASE("gpt2vk attention: the page of 12 x 12 heads over 256 tokens renders in Chromium") {
  const char* chromium = "/usr/bin/chromium";
  if (std::system("test -x /usr/bin/chromium") != 0) {
    if (test::in_ci()) FAIL("no /usr/bin/chromium: scripts/setup.sh --tests installs Debian's chromium");
    MESSAGE("SKIPPED: no /usr/bin/chromium (scripts/setup.sh --tests installs it)");
    return;
  }
  model::Config c = test::tiny_config();
  c.n_ctx = 256;
  c.n_embd = 96;
  c.n_inner = 4 * 96;
  c.n_layer = 12;
  c.n_head = 12;
  test::TinyModel m(c);
  std::string text;
  const std::string verse = "In the beginning God created the heaven and the earth. ";
  while (text.size() < 256) text += verse;
  text.resize(256);
  // The screenshot stays in the build tree as the test's artifact.
  const std::filesystem::path artifacts = std::filesystem::current_path() / "artifacts";
  std::filesystem::create_directories(artifacts);
  const std::filesystem::path page = artifacts / "attention_12x12x256.html",
                              shot = artifacts / "attention_12x12x256.png";
  std::filesystem::remove(shot);
  const auto r = test::gpt2vk({"attention", "-m", m.dir.path().string(), "-p", text, "--kernels",
                               "gpu", "-o", page.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(test::no_validation_messages(r));

  const std::string flags = std::string(chromium) +
                            " --headless --no-sandbox --disable-gpu --hide-scrollbars "
                            "--virtual-time-budget=20000 --enable-logging=stderr --v=0 ";
  const std::string log = (artifacts / "chromium.log").string();
  const std::string dom = (artifacts / "attention_dom.html").string();
  REQUIRE(std::system((flags + "--dump-dom file://" + page.string() + " > " + dom + " 2> " + log)
                          .c_str()) == 0);
  const std::string html = test::read_file(dom), console = test::read_file(log);
  CHECK_MESSAGE(html.find("data-status=\"ok\"") != std::string::npos,
                "the page did not finish drawing: " << html.substr(0, 400));
  CHECK(html.find("data-heatmaps=\"144\"") != std::string::npos);
  CHECK_MESSAGE(console.find("CONSOLE") == std::string::npos, "console output: " << console);
  REQUIRE(std::system((flags + "--window-size=1400,1000 --screenshot=" + shot.string() +
                       " file://" + page.string() + " 2>> " + log)
                          .c_str()) == 0);
  CHECK(std::filesystem::file_size(shot) > 10000);
  MESSAGE("screenshot: " << shot.string());
}
