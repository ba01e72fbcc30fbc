// gpt2vk train on an encoder-decoder (issue 40, item 7): pairs of a source and a target
// (model/training/pairs.h) drawn at random (schedule.h's random_pairs), the step of
// test_train_seq2seq.cpp, and a checkpoint in MarianMTModel's layout that seq2seq reads as it
// is. tests/data/pairs: a Marian of width 16, one layer a side, over a character-level
// SentencePiece model of the letters a to j, and 4-letter strings with their reversals. Then
// models/reverse, the model trained with it, on its held-out strings.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "model/ops/types.h"
#include "model/training/pairs.h"
#include "model/training/schedule.h"
#include "tests/cli.h"
#include "tests/files.h"

namespace {

namespace fs = std::filesystem;

// One id a character, then an end (0): the shape of a SentencePiece side's encode.
std::vector<int32_t> chars(std::string_view text) {
  std::vector<int32_t> ids;
  for (char ch : text) ids.push_back(ch - 'a' + 2);
  ids.push_back(0);
  return ids;
}

fs::path pairs_dir() {
  return test::source_dir() / "tests/data/pairs";
}

std::vector<std::string> run_args(const fs::path& out, const std::string& steps) {
  return {"train",
          "--init",
          (pairs_dir() / "config.json").string(),
          "--data",
          (pairs_dir() / "pairs.tsv").string(),
          "-o",
          out.string(),
          "--steps",
          steps,
          "--batch",
          "4",
          "--lr",
          "3e-3",
          "--seed",
          "5"};
}

}  // namespace

TEST_CASE("train pairs: the decoder's inputs are the targets shifted behind the start token") {
  const model::training::Pairs p =
      model::training::read_pairs("p.tsv", "abc\tcba\n\nbca\tacb\r\n", chars, chars, 13);
  CHECK(p.size() == 2);
  CHECK(p.S == 4);
  CHECK(p.T == 4);
  CHECK(p.sources == std::vector<int32_t>{2, 3, 4, 0, 3, 4, 2, 0});
  CHECK(p.targets == std::vector<int32_t>{4, 3, 2, 0, 2, 4, 3, 0});
  std::vector<int32_t> sources, inputs, targets;
  model::training::gather_pairs(p, {1, 1, 0}, {4, 4, 13, 12}, sources, inputs, targets);
  CHECK(sources == std::vector<int32_t>{3, 4, 2, 0, 3, 4, 2, 0, 2, 3, 4, 0});
  CHECK(inputs == std::vector<int32_t>{13, 2, 4, 3, 13, 2, 4, 3, 13, 4, 3, 2});
  CHECK(targets == std::vector<int32_t>{2, 4, 3, 0, 2, 4, 3, 0, 4, 3, 2, 0});
  // Refused, naming the line.
  const auto fails = [](std::string_view text, const std::string& message) {
    CHECK_THROWS_WITH_AS(model::training::read_pairs("p.tsv", text, chars, chars, 12),
                         doctest::Contains(message.c_str()), std::runtime_error);
  };
  fails("abc\tcba\nabcd\n", "p.tsv:2: no tab");
  fails("\tcba\n", "p.tsv:1: an empty source");
  fails("abc\t\n", "p.tsv:1: an empty target");
  fails("abc\tcba\nak\tba\n", "p.tsv:2: the source holds the pad token (id 12)");  // k: 12
  fails("\n\n", "p.tsv: no pairs");
}

// Pairs of different lengths in one step, as transformers' collators pad them: sources with the
// pad id, the decoder's inputs too, the targets with ignore_target (-100).
TEST_CASE("train pairs: pairs of different lengths are padded to the step's") {
  const model::training::Pairs p =
      model::training::read_pairs("p.tsv", "abcd\tdc\nab\tbadc\n", chars, chars, 12);
  CHECK((p.S == 5 && p.T == 5));
  CHECK((p.source(1).size() == 3 && p.target(0).size() == 3));
  std::vector<int32_t> sources, inputs, targets;
  model::training::gather_pairs(p, {0, 1}, {6, 5, 13, 12}, sources, inputs, targets);
  const int32_t none = model::ignore_target;
  CHECK(sources == std::vector<int32_t>{2, 3, 4, 5, 0, 12, 2, 3, 0, 12, 12, 12});
  CHECK(inputs == std::vector<int32_t>{13, 5, 4, 12, 12, 13, 3, 2, 5, 4});
  CHECK(targets == std::vector<int32_t>{5, 4, 0, none, none, 3, 2, 5, 4, 0});
  CHECK(model::training::source_lengths(sources, 6, 12) == std::vector<uint32_t>{5, 3});
  CHECK_THROWS_WITH_AS(
      model::training::gather_pairs(p, {0}, {4, 5, 13, 12}, sources, inputs, targets),
      doctest::Contains("pair 0 is longer than a step's S = 4 and T = 5"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      model::training::gather_pairs(p, {1}, {5, 5, 13, std::nullopt}, sources, inputs, targets),
      doctest::Contains("no pad_token_id"), std::invalid_argument);
}

TEST_CASE("train pairs: the rows a step draws come from its seed alone") {
  uint64_t a = 5, b = 5;
  const std::vector<uint64_t> first = model::training::random_pairs(a, 40, 8);
  CHECK(first == model::training::random_pairs(b, 40, 8));
  CHECK(a == b);
  CHECK(model::training::random_pairs(a, 40, 8) != first);  // the state moved on
  for (uint64_t r : first) CHECK(r < 40);
}

TEST_CASE("gpt2vk train on pairs: a Marian checkpoint seq2seq reads; one seed, the same bits") {
  const test::TempDir dir;
  std::vector<std::string> a = run_args(dir / "a", "6");
  a.insert(a.end(), {"--val-data", (pairs_dir() / "heldout.tsv").string(), "--eval-every", "3",
                     "--log", (dir / "a.jsonl").string()});
  const test::CliResult r = test::gpt2vk(a);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(test::no_validation_messages(r));
  CHECK(r.err.find("validation loss") != std::string::npos);
  for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors",
                        "trainer_state.json", "source.spm", "target.spm", "vocab.json"})
    CHECK_MESSAGE(fs::exists(dir / "a" / f), f);
  CHECK(test::read_file(dir / "a" / "model.safetensors")
            .find("model.encoder.layers.0.self_attn.q_proj.weight") != std::string::npos);
  const test::CliResult gen = test::gpt2vk({"seq2seq", "-m", (dir / "a").string(), "-p", "abcd"});
  CHECK_MESSAGE(gen.exit_code == 0, gen.err);
  CHECK(!gen.out.empty());
  // The same seed: the same bits. Two runs of 3 steps, the second resumed: the same bits too.
  REQUIRE(test::gpt2vk(run_args(dir / "b", "6")).exit_code == 0);
  CHECK(test::read_file(dir / "b" / "model.safetensors") ==
        test::read_file(dir / "a" / "model.safetensors"));
  REQUIRE(test::gpt2vk(run_args(dir / "c", "3")).exit_code == 0);
  const test::CliResult resumed =
      test::gpt2vk({"train", "--resume", (dir / "c").string(), "--steps", "6"});
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.err);
  CHECK(test::read_file(dir / "c" / "model.safetensors") ==
        test::read_file(dir / "a" / "model.safetensors"));
}

// Pairs of different lengths (2 to 6 letters) train in one run: each step padded to the files'
// longest, the validation loss over the held-out pairs' targets, a shorter --sample-prompt
// padded too; the checkpoint translates.
TEST_CASE("gpt2vk train on pairs of different lengths") {
  const test::TempDir dir;
  test::write_file(dir / "mixed.tsv",
                   "ab\tba\nabcdef\tfedcba\nbca\tacb\ncdbe\tebdc\n"
                   "jih\thij\ngfedc\tcdefg\n");
  test::write_file(dir / "val.tsv", "hg\tgh\ndcbae\teabcd\nija\taji\nbcde\tedcb\n");
  std::vector<std::string> args = run_args(dir / "m", "4");
  args[4] = (dir / "mixed.tsv").string();
  args.insert(args.end(), {"--val-data", (dir / "val.tsv").string(), "--eval-every", "2",
                           "--sample-every", "2", "--sample-prompt", "abc"});
  const test::CliResult r = test::gpt2vk(args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(test::no_validation_messages(r));
  CHECK_MESSAGE(r.err.find("validation loss") != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find("step 2 sample: ") != std::string::npos, r.err);
  const test::CliResult gen = test::gpt2vk({"seq2seq", "-m", (dir / "m").string(), "-p", "ab"});
  CHECK_MESSAGE(gen.exit_code == 0, gen.err);
}

TEST_CASE("gpt2vk train on pairs refuses what it does not take, naming it") {
  const test::TempDir dir;
  const auto fails = [&](std::vector<std::string> args, const std::string& message) {
    const test::CliResult r = test::gpt2vk(args);
    CHECK_MESSAGE(r.exit_code != 0, message);
    CHECK_MESSAGE(r.err.find(message) != std::string::npos, r.err);
  };
  const std::vector<std::string> ok = run_args(dir / "o", "2");
  const auto with = [&](std::vector<std::string> args, std::vector<std::string> more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  fails(with(ok, {"--ctx", "8"}), "--ctx: an encoder-decoder (Marian) takes its lengths");
  fails(with(ok, {"--recompute"}), "--recompute: an encoder-decoder");
  fails(with(ok, {"--sample-every", "1", "--sample-prompt", "abcdefg"}),
        "--sample-prompt: 9 source tokens; a sample's source takes 1 to the pairs' longest, 6");
  fails(with(ok, {"--sampling", "sequential"}), "--sampling sequential: an encoder-decoder");
  std::vector<std::string> other = ok;
  test::write_file(dir / "notab.tsv", "abcd dcba\n");
  other[4] = (dir / "notab.tsv").string();
  fails(other, "notab.tsv:1: no tab");
  test::write_file(dir / "long.tsv", std::string(40, 'a') + "\tb\n");
  other[4] = (dir / "long.tsv").string();
  fails(other, "a source of 42 tokens (in " + other[4] + ") is past the model's context of 16");
  std::vector<std::string> val =
      with(ok, {"--val-data", (dir / "long.tsv").string(), "--eval-every", "1"});
  fails(val, "long.tsv) is past the model's context");
  test::write_file(dir / "few.tsv", "ab\tba\n");
  fails(with(ok, {"--val-data", (dir / "few.tsv").string(), "--eval-every", "1"}),
        "few.tsv: 1 pairs; an evaluation takes B=4");
  CHECK(!fs::exists(dir / "o"));  // nothing written by any of them
}

// --sample-every on models/reverse: its translation of a held-out string, by the weights as they
// are between steps (a rate too small to move them), is the reversal seq2seq gives; with no
// --sample-prompt, the first training pair's source.
TEST_CASE("gpt2vk train on pairs samples translations between steps") {
  const fs::path dir = test::source_dir() / "models" / "reverse";
  std::istringstream held(test::read_file(dir / "heldout.tsv"));
  std::string first, second;
  std::getline(held, first);
  std::getline(held, second);
  const test::TempDir tmp;
  test::write_file(tmp / "pairs.tsv", second + "\n" + first + "\n");
  const std::vector<std::string> args{"train",
                                      "-m",
                                      dir.string(),
                                      "--data",
                                      (tmp / "pairs.tsv").string(),
                                      "--steps",
                                      "2",
                                      "--batch",
                                      "2",
                                      "--lr",
                                      "1e-9",
                                      "--sample-every",
                                      "1"};
  std::vector<std::string> prompted = args;
  prompted.insert(prompted.end(), {"--sample-prompt", first.substr(0, first.find('\t')), "-o",
                                   (tmp / "a").string()});
  const test::CliResult r = test::gpt2vk(prompted);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string want = first.substr(first.find('\t') + 1);
  for (const char* step : {"step 1", "step 2"})
    CHECK_MESSAGE(r.err.find(std::string("gpt2vk: ") + step + " sample: \"" + want + "\"") !=
                      std::string::npos,
                  r.err);
  std::vector<std::string> plain = args;
  plain.insert(plain.end(), {"--sample-len", "4", "-o", (tmp / "b").string()});
  const test::CliResult d = test::gpt2vk(plain);
  REQUIRE_MESSAGE(d.exit_code == 0, d.err);
  // The first pair's (`second`'s) reversal, cut to 4 target ids: the word-start piece and 3
  // letters.
  const std::string cut = second.substr(second.find('\t') + 1, 3);
  CHECK_MESSAGE(d.err.find("step 1 sample: \"" + cut + "\"") != std::string::npos, d.err);
}

// models/reverse, the shipped reversal model (models/reverse/README.md): the first 200 of its
// held-out strings reversed exactly by greedy seq2seq, as the whole 2,000 were when it was made.
TEST_CASE("models/reverse reverses held-out strings it never saw") {
  const fs::path dir = test::source_dir() / "models" / "reverse";
  std::istringstream held(test::read_file(dir / "heldout.tsv"));
  std::string sources, line;
  std::vector<std::string> want;
  while (want.size() < 200 && std::getline(held, line)) {
    const size_t tab = line.find('\t');
    sources += line.substr(0, tab) + "\n";
    want.push_back(line.substr(tab + 1));
  }
  REQUIRE(want.size() == 200);
  const test::TempDir tmp;
  test::write_file(tmp / "sources.txt", sources);
  const test::CliResult r =
      test::gpt2vk({"seq2seq", "-m", dir.string(), "-f", (tmp / "sources.txt").string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::istringstream out(r.out);
  size_t exact = 0, n = 0;
  while (std::getline(out, line) && n < want.size()) exact += line == want[n++];
  CHECK(n == want.size());
  CHECK(exact == want.size());
}
