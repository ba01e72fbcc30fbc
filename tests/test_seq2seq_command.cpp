// gpt2vk seq2seq from text to text: the Marian fixture saved by transformers given tokenizer
// files (tests/seq2seq_folder.h), on the CPU reference and the tests' GPU; and every bad input a
// clear error with exit 1.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/formats/checkpoint.h"
#include "model/forward/cpu_model.h"
#include "model/forward/seq2seq.h"
#include "model/generation/seq2seq_generate.h"
#include "model/text/sentencepiece.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/seq2seq_folder.h"

namespace {

std::filesystem::path source(const char* path) {
  return test::source_dir() / path;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("seq2seq command: text in, the library's translation out, CPU and GPU alike") {
  test::TempDir dir;
  test::marian_folder(dir.path());
  const std::string m = dir.path().string();
  const std::string text = "Hello world, this is a test.";

  // What the library gives for the same text: the command adds only the text around it.
  auto ck = model::Checkpoint::load(dir.path());
  auto s2s = model::make_cpu_seq2seq(*ck, model::Precision::F32);
  const auto src = model::load_sentencepiece(dir.path(), model::SpmFlavor::Marian);
  const auto tgt =
      model::load_sentencepiece(dir.path(), model::SpmFlavor::Marian, model::SpmSide::Target);
  const std::vector<int32_t> ids = src->encode(text);
  const std::string greedy = tgt->decode(model::greedy(*s2s, ids, 12));
  model::BeamSettings b;
  b.beams = 4, b.max_new_tokens = 12, b.early_stopping = model::BeamSettings::Stop::Heuristic;
  const std::string beams = tgt->decode(model::beam(*s2s, ids, b));
  const std::vector<std::string> texts{text, "Another line.",
                                       "A third, longer line of text to translate."};
  std::vector<std::vector<int32_t>> sources;
  for (const std::string& t : texts) sources.push_back(src->encode(t));
  model::SamplerOptions o;
  o.temperature = 2.0f, o.top_k = 50, o.top_p = 1.0f, o.seed = 3, o.temperature_first = true;
  std::string sampled;
  for (const auto& out : model::decode_batch(*s2s, sources, std::vector<uint32_t>{12}, 1, &o))
    sampled += tgt->decode_generated(out, ck->config().n_vocab) + "\n";

  std::vector<std::string> devices{"cpu"};
  if (test::gpu()) devices.push_back("");  // the tests' GPU: the default device
  for (const std::string& device : devices) {
    CAPTURE(device);
    std::vector<std::string> base{"seq2seq", "-m", m, "--precision", "f32", "-n", "12"};
    if (!device.empty()) base.insert(base.end(), {"--device", device});
    auto with = [&](std::vector<std::string> more) {
      std::vector<std::string> a = base;
      a.insert(a.end(), more.begin(), more.end());
      return a;
    };
    const test::CliResult g = test::gpt2vk(with({"-p", text}));
    REQUIRE_MESSAGE(g.exit_code == 0, g.err);
    CHECK(g.out == greedy + "\n");
    CHECK(g.err.find("1 source(s)") != std::string::npos);
    CHECK(test::no_validation_messages(g));
    const test::CliResult bs = test::gpt2vk(with({"-p", text, "--beams", "4"}));
    REQUIRE_MESSAGE(bs.exit_code == 0, bs.err);
    CHECK(bs.out == beams + "\n");
    CHECK(bs.err.find("(4 beams)") != std::string::npos);
    // A file: one output line per source line, in the file's order. On a GPU its sources decode
    // together, a slot each (and with --batch 2, two at a time): the same lines.
    const std::string file = (dir.path() / "sources.txt").string();
    test::write_file(file, text + "\nAnother line.\nA third, longer line of text to translate.\n");
    const test::CliResult f = test::gpt2vk(with({"-f", file}));
    REQUIRE_MESSAGE(f.exit_code == 0, f.err);
    REQUIRE(lines(f.out).size() == 3);
    CHECK(lines(f.out)[0] == greedy);
    CHECK(lines(f.out)[1] == tgt->decode(model::greedy(*s2s, src->encode("Another line."), 12)));
    CHECK(lines(f.out)[2] ==
          tgt->decode(
              model::greedy(*s2s, src->encode("A third, longer line of text to translate."), 12)));
    CHECK(test::no_validation_messages(f));
    CHECK(f.err.find(device.empty() ? "(greedy, 3 sources together)" : "(greedy)") !=
          std::string::npos);
    for (const char* batch : {"1", "2"}) {
      CAPTURE(batch);
      const test::CliResult fb = test::gpt2vk(with({"-f", file, "--batch", batch}));
      REQUIRE_MESSAGE(fb.exit_code == 0, fb.err);
      CHECK(fb.out == f.out);
    }
    // Sampled: generate(do_sample=True)'s defaults at --temp 2, source i seeded 3 + i, as the
    // library draws them; the same lines together or one at a time.
    const test::CliResult sf =
        test::gpt2vk(with({"-f", file, "--sample", "--temp", "2", "--seed", "3"}));
    REQUIRE_MESSAGE(sf.exit_code == 0, sf.err);
    CHECK(sf.out == sampled);
    CHECK(sf.out != f.out);
    CHECK(sf.err.find("sampled, seed 3") != std::string::npos);
    const test::CliResult s1 =
        test::gpt2vk(with({"-f", file, "--sample", "--temp", "2", "--seed", "3", "--batch", "1"}));
    CHECK(s1.out == sampled);
  }
}

TEST_CASE("seq2seq command: bad input is a clear error, exit 1") {
  test::TempDir dir;
  test::marian_folder(dir.path());
  const std::string m = dir.path().string();
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"seq2seq", "-m", m, "--device", "cpu"});
    return test::gpt2vk(args);
  };
  auto fails = [&](const std::vector<std::string>& args, const std::string& says) {
    CAPTURE(says);
    const test::CliResult r = run(args);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find(says) != std::string::npos, r.err);
  };
  fails({"-p", "hi", "--beams", "0"}, "--beams 0: 1 to 64");
  fails({"-p", "hi", "--beams", "1000"}, "--beams 1000: 1 to 64");
  fails({"-p", "hi", "--beams", "40"}, "at most half the vocabulary (32)");
  fails({"-p", "hi", "-n", "0"}, "-n 0: nothing to generate");
  fails({"-p", "hi", "--temp", "0.7"}, "are for sampling: add --sample");
  fails({"-p", "hi", "--sample", "--beams", "4"}, "beam sampling is not supported");
  fails({"-p", "hi", "--sample", "--top-p", "0"}, "top-p 0: above 0, at most 1");
  fails({"-p", "hi", "--sample", "--temp", "-1"}, "temperature -1: 0 (greedy) to 100");
  fails({"-p", "hi", "--batch", "0"}, "--batch 0: 1 to 8 sources together");
  fails({"-p", "hi", "--batch", "9"}, "--batch 9: 1 to 8 sources together");
  fails({"-p", "hi", "--batch", "2", "--beams", "4"}, "sources decode together without beams only");
  fails({"-p", "hi", "--early-stopping", "maybe"}, "expected true, false or never");
  fails({}, "give a text with --prompt or --file");
  std::string long_text;
  for (int i = 0; i < 100; i++) long_text += "word ";
  fails({"-p", long_text}, "tokens; the model takes at most 64");
  const std::string file = (dir.path() / "bad.txt").string();
  test::write_file(file, "one\n\nthree\n");
  fails({"-f", file}, "bad.txt:2: an empty line");
  test::write_file(file, std::string("caf\xC3", 4) + "\n");
  fails({"-f", file}, "bad.txt:1: invalid UTF-8 at byte 3");
  // Another family's folder, and a corrupt or missing tokenizer.
  {
    const test::CliResult r = test::gpt2vk({"seq2seq", "-m", source("tests/data/models/gpt2-tiny").string(),
                                            "-p", "hi", "--device", "cpu"});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("not an encoder-decoder") != std::string::npos);
  }
  test::write_file(dir.path() / "source.spm", "not a model");
  fails({"-p", "hi"}, "source.spm");
  std::filesystem::remove(dir.path() / "source.spm");
  fails({"-p", "hi"}, "source.spm");
}

// A T5 folder as make-model writes it (random weights over the unigram model's 4,000 pieces and
// 100 sentinels): one spiece.model for both sides. The tiny gated shape, and the tiny one whose
// attention is narrower than the model (flan-t5-small's kind: d_kv x heads < d_model).
TEST_CASE("seq2seq command: a T5 folder and its spiece.model, CPU and GPU alike") {
  for (const char* shape : {"tiny-narrow", "tiny-gated"}) {
    CAPTURE(shape);
    test::TempDir dir;
    const std::string m = dir.path().string();
    const test::CliResult made = test::gpt2vk(
        {"make-model", "--arch", "t5", "--shape", shape, "--dtype", "f32", "-o", m});
    REQUIRE_MESSAGE(made.exit_code == 0, made.err);
    const std::string text = "translate English to German: The house is wonderful.";
    auto ck = model::Checkpoint::load(dir.path());
    const model::Config& c = ck->config();
    CHECK((c.attn_width() != c.n_embd) == (std::string(shape) == "tiny-narrow"));
    auto s2s = model::make_cpu_seq2seq(*ck, model::Precision::F32);
    const auto tok = model::load_sentencepiece(dir.path(), model::SpmFlavor::T5);
    const std::string greedy = tok->decode(model::greedy(*s2s, tok->encode(text), 12));
    std::vector<std::string> devices{"cpu"};
    if (test::gpu()) devices.push_back("");
    for (const std::string& device : devices) {
      CAPTURE(device);
      std::vector<std::string> args{"seq2seq", "-m", m, "--precision", "f32", "-n", "12", "-p", text};
      if (!device.empty()) args.insert(args.end(), {"--device", device});
      const test::CliResult r = test::gpt2vk(args);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      CHECK(r.out == greedy + "\n");
      CHECK(test::no_validation_messages(r));
    }
    if (std::string(shape) == "tiny-narrow") continue;
    std::filesystem::remove(dir.path() / "spiece.model");
    const test::CliResult r = test::gpt2vk({"seq2seq", "-m", m, "-p", "hi", "--device", "cpu"});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("spiece.model: no such file") != std::string::npos);
  }
}
