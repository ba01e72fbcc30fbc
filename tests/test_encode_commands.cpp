// The encoder commands (embed, fill-mask, classify) on the folders Hugging Face's libraries
// saved (tests/data/hf), from text to output: the folder's WordPiece vocabulary, the encoder on
// the tests' GPU with fp32 weights, and each command's reading of the head, against what the
// libraries computed for the same texts (expected.json / expected.safetensors).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/hf_expected.h"

namespace {

std::string hf(const char* name) {
  return (test::source_dir() / "tests/data/hf" / name).string();
}

std::vector<std::string> fixture_texts(const char* name) {
  const auto j = nlohmann::json::parse(test::read_file(hf(name) + "/expected.json"));
  return j["texts"].get<std::vector<std::string>>();
}

std::vector<double> softmax(const std::vector<double>& x) {
  double top = -INFINITY, sum = 0;
  for (double v : x) top = std::max(top, v);
  std::vector<double> p;
  for (double v : x) sum += p.emplace_back(std::exp(v - top));
  for (double& v : p) v /= sum;
  return p;
}

// "LABEL p  LABEL p ..." -> label -> p.
std::map<std::string, double> label_line(const std::string& line) {
  std::istringstream in(line);
  std::map<std::string, double> out;
  std::string label;
  double p = 0;
  while (in >> label >> p) out[label] = p;
  return out;
}

}  // namespace

TEST_CASE("embed: sentence-transformers' embeddings from the texts, as .npy and on stdout") {
  if (!test::gpu()) return;
  const std::vector<std::string> texts = fixture_texts("bert-st");
  test::TempDir dir;
  const std::string lines = (dir.path() / "texts.txt").string();
  {
    std::ofstream f(lines);
    for (const std::string& t : texts) f << t << "\n";
  }
  const std::string npy = (dir.path() / "e.npy").string();
  const test::CliResult r =
      test::gpt2vk({"embed", "-m", hf("bert-st"), "-f", lines, "--precision", "f32", "-o", npy});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(test::no_validation_messages(r));
  CHECK(r.err.find("4 embeddings of 32 written") != std::string::npos);
  CHECK(r.err.find("mean pooling, normalized") != std::string::npos);  // from the folder
  // float32 [4, 32] after NumPy's 128-byte header (format 1.0, padded to 64).
  const std::string bytes = test::read_file(npy);
  REQUIRE(bytes.size() == 128 + 4 * 32 * 4);
  CHECK(bytes.substr(0, 6) == "\x93NUMPY");
  CHECK(bytes.find("'shape': (4, 32)") != std::string::npos);
  const auto e = test::read_expected(hf("bert-st") + "/expected.safetensors");
  for (size_t i = 0; i < texts.size(); i++) {
    CAPTURE(i);
    const std::vector<double> ref = e.at("embeddings").row(i);
    double dot = 0;
    for (size_t c = 0; c < 32; c++) {
      float v = 0;
      std::memcpy(&v, bytes.data() + 128 + (i * 32 + c) * 4, 4);
      dot += double{v} * ref[c];
    }
    CHECK(dot >= 0.99999);  // both unit length
  }

  // One text a pass (--batch 1) against the four texts of different lengths in one pass (the
  // default): the same embeddings within 1e-6 (each sequence's queries see its own keys only).
  const std::string single = (dir.path() / "single.npy").string();
  const test::CliResult r1 = test::gpt2vk(
      {"embed", "-m", hf("bert-st"), "-f", lines, "--precision", "f32", "--batch", "1", "-o", single});
  REQUIRE_MESSAGE(r1.exit_code == 0, r1.err);
  const std::string bytes1 = test::read_file(single);
  REQUIRE(bytes1.size() == bytes.size());
  for (size_t i = 128; i < bytes.size(); i += 4) {
    float a = 0, b = 0;
    std::memcpy(&a, bytes.data() + i, 4);
    std::memcpy(&b, bytes1.data() + i, 4);
    CHECK(std::fabs(a - b) <= 1e-6f);
  }

  // One text on stdout; the similarity matrix's diagonal is 1.
  const test::CliResult one = test::gpt2vk({"embed", "-m", hf("bert-st"), "-p", texts[0]});
  REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  std::istringstream in(one.out);
  size_t n = 0;
  for (double v; in >> v;) n++;
  CHECK(n == 32);
  const test::CliResult sim = test::gpt2vk({"embed", "-m", hf("bert-st"), "-f", lines, "--similarity"});
  REQUIRE_MESSAGE(sim.exit_code == 0, sim.err);
  CHECK(sim.out.starts_with("1.0000 "));
}

TEST_CASE("fill-mask: the masked-LM head's best tokens, as transformers computes them") {
  if (!test::gpu()) return;
  // Text 1 of the fixture is "Paris is the [MASK] of France!", its mask at token 4.
  const std::vector<std::string> texts = fixture_texts("bert-mlm");
  const test::CliResult r =
      test::gpt2vk({"fill-mask", "-m", hf("bert-mlm"), "-p", texts[1], "--precision", "f32"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto e = test::read_expected(hf("bert-mlm") + "/expected.safetensors");
  const test::Array& logits = e.at("logits");  // [4, 21, 111]
  const std::vector<double> p = softmax(logits.slice((1 * 21 + 4) * 111, 111));
  size_t best = 0;
  for (size_t v = 1; v < p.size(); v++)
    if (p[v] > p[best]) best = v;
  std::vector<std::string> vocab;
  std::istringstream words(test::read_file(hf("bert-mlm") + "/vocab.txt"));
  for (std::string w; std::getline(words, w);) vocab.push_back(w);
  std::istringstream out(r.out);
  std::string token;
  double prob = 0;
  out >> token >> prob;
  CHECK(token == vocab[best]);
  CHECK(prob == doctest::Approx(p[best]).epsilon(1e-3));
  size_t lines = 0;
  for (char ch : r.out) lines += ch == '\n';
  CHECK(lines == 5);  // --top-k's default
}

TEST_CASE("classify: a sequence's labels and a label per word") {
  if (!test::gpu()) return;
  const std::vector<std::string> texts = fixture_texts("bert-seqcls");
  const auto e = test::read_expected(hf("bert-seqcls") + "/expected.safetensors");
  const auto labels = nlohmann::json::parse(test::read_file(hf("bert-seqcls") + "/config.json"))["id2label"];
  test::TempDir dir;
  const std::string lines = (dir.path() / "texts.txt").string();
  {
    std::ofstream f(lines);
    for (const std::string& t : texts) f << t << "\r\n";  // Windows line ends too
  }
  const test::CliResult r =
      test::gpt2vk({"classify", "-m", hf("bert-seqcls"), "-f", lines, "--precision", "f32"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::istringstream out(r.out);
  size_t i = 0;
  for (std::string line; std::getline(out, line); i++) {
    CAPTURE(line);
    const std::vector<double> p = softmax(e.at("logits").row(i));
    const auto got = label_line(line);
    REQUIRE(got.size() == 3);
    for (size_t l = 0; l < 3; l++)
      CHECK(got.at(labels[std::to_string(l)].get<std::string>()) == doctest::Approx(p[l]).epsilon(1e-3));
  }
  CHECK(i == texts.size());

  // Token classification: one label per word, a word's pieces joined ("played" from p ##l ##a
  // ##y ##ed).
  const test::CliResult t = test::gpt2vk({"classify", "-m", hf("bert-tokcls"), "-p", texts[2]});
  REQUIRE_MESSAGE(t.exit_code == 0, t.err);
  CHECK(t.out.find("played/") != std::string::npos);
  size_t words = 0;
  for (char ch : t.out) words += ch == '/';
  CHECK(words == 14);  // a dog ran in the park , and the music played at night .
}

TEST_CASE("encoder commands: bad input is a clear error, exit code 1") {
  if (!test::gpu()) return;
  test::TempDir dir;
  const std::string empty_line = (dir.path() / "empty.txt").string();
  std::ofstream(empty_line) << "one\n\nthree\n";
  const std::string bad_utf8 = (dir.path() / "bad.txt").string();
  std::ofstream(bad_utf8) << "ok\nbad \xff text\n";
  const std::string no_vocab = (dir.path() / "novocab").string();
  std::filesystem::create_directories(no_vocab);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(hf("bert-mlm") + "/" + f, no_vocab + "/" + f);
  const std::string gpt2 = (test::source_dir() / "tests/data/models/gpt2-tiny").string();
  const std::string out = (dir.path() / "x.npy").string();
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const Case cases[] = {
      {{"fill-mask", "-m", hf("bert-mlm"), "-p", "no mask here"}, "the prompt has no [MASK] token"},
      {{"fill-mask", "-m", hf("bert-seqcls"), "-p", "a [MASK]"}, "without the masked-LM head"},
      {{"classify", "-m", hf("bert-mlm"), "-p", "a"}, "without a classifier"},
      {{"embed", "-m", hf("bert-st"), "-p", ""}, "give a text with --prompt or --file"},
      {{"embed", "-m", hf("bert-st"), "-f", empty_line}, "empty.txt:2: an empty line"},
      {{"embed", "-m", hf("bert-st"), "-f", bad_utf8}, "bad.txt:2: invalid UTF-8 at byte 4"},
      {{"embed", "-m", no_vocab, "-p", "a"}, "vocab"},
      {{"embed", "-m", gpt2, "-p", "a"}, "a GPT-2 decoder, not an encoder"},
      {{"generate", "-m", hf("bert-mlm"), "-p", "a"}, "a BERT encoder (BertForMaskedLM)"},
      {{"embed", "-m", hf("bert-st"), "-p", "a", "-o", (dir.path() / "x.txt").string()},
       "-o writes .npy"},
      {{"embed", "-m", hf("bert-st"), "-p", "a", "--batch", "0"}, "--batch 0"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const test::CliResult r = test::gpt2vk(c.args);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.err.find(c.error) != std::string::npos, r.err);
  }
  CHECK(!std::filesystem::exists(out));
}

// 10,000 lines in one file: every one embedded, in order (the CPU reference, so that the suite
// stays quick; the GPU path is the one above).
TEST_CASE("embed: 10,000 lines") {
  test::TempDir dir;
  const std::string lines = (dir.path() / "many.txt").string();
  {
    std::ofstream f(lines);
    for (int i = 0; i < 10000; i++) f << "the cat " << (i % 2 ? "sat" : "ran") << " on the mat\n";
  }
  const std::string out = (dir.path() / "e.json").string();
  const test::CliResult r =
      test::gpt2vk({"embed", "-m", hf("bert-st"), "-f", lines, "--device", "cpu", "-o", out});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = nlohmann::json::parse(test::read_file(out));
  REQUIRE(j["embeddings"].size() == 10000);
  CHECK(j["embeddings"][0] == j["embeddings"][2]);
  CHECK(j["embeddings"][0] != j["embeddings"][1]);
  CHECK(j["embeddings"][9999] == j["embeddings"][1]);
}

TEST_CASE("make-model --arch bert: a random BERT folder every encoder command reads") {
  if (!test::gpu()) return;
  test::TempDir dir;
  const std::string out = (dir.path() / "bert").string();
  const test::CliResult made = test::gpt2vk(
      {"make-model", "--arch", "bert", "--shape", "tiny", "--head", "seqcls", "-o", out});
  REQUIRE_MESSAGE(made.exit_code == 0, made.err);
  CHECK(made.err.find("BERT tiny shape (2 layers, width 128, 2 heads), "
                      "BertForSequenceClassification") != std::string::npos);
  // BERT's vocabulary layout: 30,522 lines, [CLS] at 101.
  const test::CliResult tok = test::gpt2vk({"tokenize", "-m", out, "-p", "Hi!", "--text"});
  REQUIRE_MESSAGE(tok.exit_code == 0, tok.err);
  CHECK(tok.out.starts_with("101\t\"[CLS]\"\n"));
  CHECK(tok.out.find("\"##i\"") != std::string::npos);  // lowercased, a character a piece
  const test::CliResult cls = test::gpt2vk({"classify", "-m", out, "-p", "hello world"});
  REQUIRE_MESSAGE(cls.exit_code == 0, cls.err);
  CHECK(label_line(cls.out).size() == 2);
  const test::CliResult emb = test::gpt2vk({"embed", "-m", out, "-p", "hello world"});
  REQUIRE_MESSAGE(emb.exit_code == 0, emb.err);
  std::istringstream in(emb.out);
  size_t n = 0;
  for (double v; in >> v;) n++;
  CHECK(n == 128);
  const test::CliResult wrong = test::gpt2vk({"make-model", "--head", "mlm2", "-o", out});
  CHECK(wrong.exit_code != 0);
  const test::CliResult gpt2_head =
      test::gpt2vk({"make-model", "--shape", "tiny", "--head", "seqcls", "-o", out + "2"});
  CHECK(gpt2_head.exit_code == 1);
  CHECK(gpt2_head.err.find("--head is for --arch bert") != std::string::npos);
}

TEST_CASE("compare and logits: an encoder's hidden states and head") {
  if (!test::gpu()) return;
  const test::CliResult c =
      test::gpt2vk({"compare", "-m", hf("bert-mlm"), "-p", "Paris is the [MASK] of France."});
  REQUIRE_MESSAGE(c.exit_code == 0, c.err);
  CHECK(c.out.find("hidden states [9, 32]") != std::string::npos);
  CHECK(c.out.find("BertForMaskedLM head [9, 111]") != std::string::npos);
  CHECK(c.out.find("OK: the GPU matches the CPU reference") != std::string::npos);

  // logits: ids in, the last hidden state out, as transformers computed it for text 0.
  const auto e = test::read_expected(hf("bert-mlm") + "/expected.safetensors");
  std::vector<int32_t> ids;
  for (size_t t = 0; t < e.at("input_ids").shape[1]; t++)
    if (e.at("attention_mask").row(0)[t] != 0) ids.push_back(static_cast<int32_t>(e.at("input_ids").row(0)[t]));
  test::TempDir dir;
  test::write_file(dir.path() / "ids.bin",
                   std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
  const std::string out = (dir.path() / "h.bin").string();
  const test::CliResult l = test::gpt2vk({"logits", "-m", hf("bert-mlm"), "--ids",
                                          (dir.path() / "ids.bin").string(), "-o", out,
                                          "--precision", "f32"});
  REQUIRE_MESSAGE(l.exit_code == 0, l.err);
  const std::string bytes = test::read_file(out);
  REQUIRE(bytes.size() == ids.size() * 32 * 4);
  const std::vector<double> ref = e.at("hidden").slice(0, ids.size() * 32);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    float v = 0;
    std::memcpy(&v, bytes.data() + i * 4, 4);
    worst = std::max(worst, std::fabs(double{v} - ref[i]));
  }
  CHECK(worst < 1e-4);
}

TEST_CASE("bench: an encoder's tokens/s and sequences/s") {
  if (!test::gpu()) return;
  const test::CliResult r =
      test::gpt2vk({"bench", "-m", hf("bert-st"), "-p", "16,64", "-r", "2", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.size() == 2);
  CHECK(j[0]["test"] == "enc16");
  CHECK(j[1]["test"] == "enc64");
  CHECK(j[1]["samples"].size() == 2);
  CHECK(j[1]["tokens_per_s"].get<double>() > 0);
  CHECK(j[1]["sequences_per_s"].get<double>() == doctest::Approx(j[1]["tokens_per_s"].get<double>() / 64));
  // --batch: each length again as N sequences in passes of N.
  const test::CliResult batched =
      test::gpt2vk({"bench", "-m", hf("bert-st"), "-p", "16,64", "-r", "1", "--batch", "4", "--json"});
  REQUIRE_MESSAGE(batched.exit_code == 0, batched.err);
  const auto jb = nlohmann::json::parse(batched.out);
  REQUIRE(jb.size() == 4);
  CHECK(jb[1]["test"] == "enc16 x4");
  CHECK(jb[3]["test"] == "enc64 x4");
  CHECK(jb[3]["tokens_per_s"].get<double>() > 0);
  // --profile: where a pass of one and a pass of 4 spend their GPU time, op by op, after the
  // table (on stderr with --json).
  const test::CliResult profiled =
      test::gpt2vk({"bench", "-m", hf("bert-st"), "-p", "16", "-r", "1", "--batch", "4", "--profile"});
  REQUIRE_MESSAGE(profiled.exit_code == 0, profiled.err);
  CHECK(profiled.out.find("enc16 x4") != std::string::npos);
  for (const char* title : {"profile: encode of one sequence of 16 tokens, one pass",
                            "profile: encode of 4 sequences of 16 tokens, one pass"}) {
    CAPTURE(title);
    const size_t at = profiled.out.find(title);
    REQUIRE(at != std::string::npos);
    const std::string table = profiled.out.substr(at, profiled.out.find("counter", at) - at);
    CHECK(table.find("| matmul") != std::string::npos);
    CHECK(table.find("| attention") != std::string::npos);
    CHECK(table.find("| all (GPU)") != std::string::npos);
  }
  const test::CliResult decoder = test::gpt2vk({"bench", "-p", "8", "--batch", "4"});
  CHECK(decoder.exit_code == 1);
  CHECK(decoder.err.find("--batch is an encoder's") != std::string::npos);
  const test::CliResult too_long = test::gpt2vk({"bench", "-m", hf("bert-st"), "-p", "65"});
  CHECK(too_long.exit_code == 1);
  CHECK(too_long.err.find("the model takes at most 64 tokens") != std::string::npos);
}
