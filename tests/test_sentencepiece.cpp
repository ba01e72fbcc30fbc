// SentencePiece tokenizers (T5, Marian) on the models of tests/data/spm: T5's sentinels and special
// tokens in the raw text, a Marian folder's vocab.json between pieces and ids, decode, and every
// error path (missing files, corrupt models, a bad vocab.json, invalid UTF-8). The corpus-wide
// comparison with Google's Python library is test_sentencepiece_python.cpp.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/text/sentencepiece.h"
#include "tests/files.h"

using model::SpmFlavor;
using model::SpmSide;
using nlohmann::json;

namespace {

std::filesystem::path spm_data(const std::string& name) {
  return test::source_dir() / "tests/data/spm" / name;
}

// A T5 folder holding `model` as spiece.model.
void t5_folder(const test::TempDir& dir, const std::string& model = "unigram.model") {
  test::write_file(dir / "spiece.model", test::read_file(spm_data(model)));
}

std::vector<int32_t> without_eos(std::vector<int32_t> ids) {
  REQUIRE(!ids.empty());
  ids.pop_back();
  return ids;
}

// A Marian folder: source.spm the unigram model, target.spm the BPE one, and a vocab.json in
// Marian's order ("</s>" 0, "<unk>" 1, the two models' pieces, "<pad>" last) that leaves out
// every piece in `missing` and adds ">>de<<".
json marian_folder(const test::TempDir& dir, const std::vector<std::string>& missing) {
  test::write_file(dir / "source.spm", test::read_file(spm_data("unigram.model")));
  test::write_file(dir / "target.spm", test::read_file(spm_data("bpe.model")));
  json vocab = json::object();
  auto add = [&](const std::string& piece) {
    const size_t id = vocab.size();
    if (!vocab.contains(piece)) vocab[piece] = id;
  };
  add("</s>");
  add("<unk>");
  add(">>de<<");
  for (const char* model : {"unigram.model", "bpe.model"}) {
    test::TempDir t5;
    t5_folder(t5, model);
    const auto tok = model::load_sentencepiece(t5.path(), SpmFlavor::T5);
    for (int32_t id = 0; id < static_cast<int32_t>(tok->vocab_size()) - 100; id++) {
      const std::string p = tok->piece(id);
      if (p != "<pad>" && p != "<s>" &&
          std::find(missing.begin(), missing.end(), p) == missing.end())
        add(p);
    }
  }
  add("<pad>");
  test::write_file(dir / "vocab.json", vocab.dump());
  return vocab;
}

// The byte offset just after a model file's first n pieces (ModelProto field 1, written first:
// each is the key byte 0x0A, a varint length, the bytes). A cut there is well-formed protobuf.
size_t after_pieces(const std::string& model, size_t n) {
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    REQUIRE(static_cast<uint8_t>(model.at(at++)) == 0x0A);
    size_t length = 0;
    for (unsigned shift = 0;; shift += 7) {
      const auto b = static_cast<uint8_t>(model.at(at++));
      length |= size_t{b & 0x7Fu} << shift;
      if ((b & 0x80) == 0) break;
    }
    at += length;
  }
  return at;
}

}  // namespace

TEST_CASE("sentencepiece t5: ids, </s>, and the model's special ids") {
  test::TempDir dir;
  t5_folder(dir);
  const auto tok = model::load_sentencepiece(dir.path(), SpmFlavor::T5);
  // unigram.model: pad 0, eos 1, unk 2 (tests/data/spm/README.md); 4000 pieces + 100 sentinels.
  CHECK(tok->vocab_size() == 4100);
  CHECK(tok->eos() == 1);
  CHECK(tok->unk() == 2);
  CHECK(tok->pad() == std::optional<int32_t>(0));
  CHECK(tok->end_of_text() == std::optional<int32_t>(1));
  CHECK(tok->piece(1) == "</s>");
  const std::vector<int32_t> ids = tok->encode("Hello world");
  REQUIRE(ids.size() >= 3);
  CHECK(ids.back() == 1);
  CHECK(tok->decode(ids) == "Hello world");
  CHECK(tok->encode("") == std::vector<int32_t>{1});
  CHECK(tok->decode(tok->encode("  Hello   world  ")) ==
        "Hello world");  // the model's whitespace rule

  // bpe.model numbers its specials differently: unk 0, bos 1, eos 2, pad 3.
  test::TempDir bpe;
  t5_folder(bpe, "bpe.model");
  const auto b = model::load_sentencepiece(bpe.path(), SpmFlavor::T5);
  CHECK(b->eos() == 2);
  CHECK(b->unk() == 0);
  CHECK(b->pad() == std::optional<int32_t>(3));
  CHECK(b->encode("Hello").back() == 2);
}

TEST_CASE("sentencepiece t5: <extra_id_k> is id vocab_size - 1 - k, in text and in decode") {
  test::TempDir dir;
  t5_folder(dir);
  const auto tok = model::load_sentencepiece(dir.path(), SpmFlavor::T5);
  const std::vector<int32_t> hello = without_eos(tok->encode("Hello")),
                             world = without_eos(tok->encode("world"));
  std::vector<int32_t> want = hello;
  want.push_back(4099);  // <extra_id_0>
  want.insert(want.end(), world.begin(), world.end());
  want.push_back(4000);  // <extra_id_99>
  want.push_back(1);
  // Each text between special tokens is encoded on its own (T5Tokenizer's legacy behaviour).
  CHECK(tok->encode("Hello <extra_id_0> world<extra_id_99>") == want);
  CHECK(tok->encode("Hello<extra_id_0>world <extra_id_99>") == want);
  CHECK(tok->piece(4099) == "<extra_id_0>");
  CHECK(tok->piece(4000) == "<extra_id_99>");
  CHECK(tok->token_bytes(4057) == "<extra_id_42>");
  // The sentinel is kept; the text after it keeps its space, as the tokenizers crate decodes.
  CHECK(tok->decode(want) == "Hello<extra_id_0> world<extra_id_99>");

  // Only k < extra_ids is a sentinel: <extra_id_100> is text.
  for (int32_t id : tok->encode("<extra_id_100>")) CHECK(id < 4000);
  // </s>, <pad> and <unk> in the text are their ids, as the transformers tokenizer's special
  // tokens; decode leaves them out.
  std::vector<int32_t> specials = hello;
  for (int32_t id : {1, 0, 2}) specials.push_back(id);
  specials.insert(specials.end(), world.begin(), world.end());
  specials.push_back(1);
  CHECK(tok->encode("Hello</s><pad><unk>world") == specials);
  CHECK(tok->decode(specials) == "Hello world");
  for (int32_t id : {0, 1, 2}) CHECK(tok->token_bytes(id) == "");

  CHECK_THROWS_WITH_AS(tok->decode(std::vector<int32_t>{4100}), doctest::Contains("[0, 4100)"),
                       std::runtime_error);
  // A model with more rows than the tokenizer has ids (t5-small: 32,128 for 32,100) may
  // generate one of the extra ids: it has no text, as in transformers' fast tokenizer.
  std::vector<int32_t> padded = hello;
  padded.insert(padded.end(), {4100, 4127});
  padded.insert(padded.end(), world.begin(), world.end());
  CHECK(tok->decode_generated(padded, 4128) == "Hello world");
  CHECK_THROWS_WITH_AS(tok->decode_generated(std::vector<int32_t>{4128}, 4128),
                       doctest::Contains("[0, 4100)"), std::runtime_error);
  CHECK_THROWS_WITH_AS(tok->token_bytes(-1), doctest::Contains("out of range"), std::runtime_error);
  CHECK_THROWS_WITH_AS(tok->piece(4100), doctest::Contains("out of range"), std::runtime_error);
}

TEST_CASE("sentencepiece t5: tokenizer_config.json's extra_ids") {
  test::TempDir dir;
  t5_folder(dir);
  test::write_file(dir / "tokenizer_config.json", R"({"extra_ids": 10, "eos_token": "</s>"})");
  const auto tok = model::load_sentencepiece(dir.path(), SpmFlavor::T5);
  CHECK(tok->vocab_size() == 4010);
  CHECK(tok->encode("<extra_id_9>") == std::vector<int32_t>{4000, 1});
  for (int32_t id : tok->encode("<extra_id_10>")) CHECK(id < 4000);

  test::write_file(dir / "tokenizer_config.json", R"({"extra_ids": -1})");
  CHECK_THROWS_WITH_AS(model::load_sentencepiece(dir.path(), SpmFlavor::T5),
                       doctest::Contains("tokenizer_config.json: extra_ids -1"),
                       std::runtime_error);
  test::write_file(dir / "tokenizer_config.json", "{");
  CHECK_THROWS_WITH_AS(model::load_sentencepiece(dir.path(), SpmFlavor::T5),
                       doctest::Contains("tokenizer_config.json: not JSON"), std::runtime_error);
}

TEST_CASE("sentencepiece t5: a byte-fallback piece streams as its byte") {
  test::TempDir dir;
  t5_folder(dir, "bpe.model");
  const auto tok = model::load_sentencepiece(dir.path(), SpmFlavor::T5);
  // U+1F600 (4 bytes) is not among bpe.model's pieces: four <0xNN> pieces.
  const std::vector<int32_t> ids = tok->encode("\xF0\x9F\x98\x80");
  std::string stream;
  size_t bytes = 0;
  for (int32_t id : without_eos(ids)) {
    stream += tok->token_bytes(id);
    bytes += tok->piece(id).starts_with("<0x");
  }
  CHECK(bytes == 4);
  CHECK(stream.ends_with("\xF0\x9F\x98\x80"));
  CHECK(tok->decode(ids) == "\xF0\x9F\x98\x80");
  // Half a character decodes to U+FFFD, never to invalid UTF-8.
  const std::vector<int32_t> half(ids.end() - 3, ids.end() - 1);
  CHECK(tok->decode(half) == "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("sentencepiece marian: pieces through vocab.json, </s>, <unk>, language codes") {
  test::TempDir dir;
  const json vocab = marian_folder(dir, {"\xE2\x96\x81w"});  // "▁w" left out
  const auto src = model::load_sentencepiece(dir.path(), SpmFlavor::Marian, SpmSide::Source);
  const auto tgt = model::load_sentencepiece(dir.path(), SpmFlavor::Marian, SpmSide::Target);
  CHECK(src->vocab_size() == vocab.size());
  CHECK(src->eos() == 0);
  CHECK(src->unk() == 1);
  CHECK(src->pad() == std::optional<int32_t>(static_cast<int32_t>(vocab.size()) - 1));

  // The pieces each side's model gives, by vocab.json; "▁w" is not there: <unk>.
  test::TempDir t5;
  t5_folder(t5, "unigram.model");
  const auto uni = model::load_sentencepiece(t5.path(), SpmFlavor::T5);
  const std::string text = "Hello world, Привет мир";
  std::vector<int32_t> want;
  size_t unknown = 0;
  for (int32_t id : without_eos(uni->encode(text))) {
    const std::string p = uni->piece(id);
    want.push_back(vocab.contains(p) ? vocab[p].get<int32_t>() : 1);
    unknown += !vocab.contains(p);
  }
  CHECK(unknown == 1);
  want.push_back(0);
  CHECK(src->encode(text) == want);

  // A language code opening the text is one piece; one vocab.json lacks is <unk>.
  std::vector<int32_t> coded = {vocab[">>de<<"].get<int32_t>()};
  coded.insert(coded.end(), want.begin(), want.end());
  CHECK(src->encode(">>de<< " + text) == coded);
  CHECK(src->encode(">>xx<<" + text).front() == 1);
  CHECK(src->encode("a >>de<<").size() > 2);  // not at the start: text
  // </s> and <unk> in the text are vocab.json's ids; the text after a special token may open
  // with a language code again (MarianTokenizer looks at each text between special tokens).
  const std::vector<int32_t> a = without_eos(src->encode("a"));
  std::vector<int32_t> specials = a;
  for (int32_t id : {0, 1, vocab[">>de<<"].get<int32_t>()}) specials.push_back(id);
  specials.insert(specials.end(), a.begin(), a.end());
  specials.push_back(0);
  CHECK(src->encode("a</s><unk>>>de<<a") == specials);

  // Decode: the target model detokenizes; </s>, <pad>, <unk> are left out.
  const std::string target_text = "Guten Tag, καλημέρα, 你好";
  std::vector<int32_t> ids = tgt->encode(target_text);
  CHECK(tgt->decode(ids) == target_text);
  ids.insert(ids.begin(), *tgt->pad());
  ids.insert(ids.begin() + 2, tgt->unk());
  CHECK(tgt->decode(ids) == tgt->decode(tgt->encode(target_text)));
  CHECK(tgt->token_bytes(tgt->eos()) == "");
  CHECK(tgt->piece(0) == "</s>");
  CHECK_THROWS_WITH_AS(tgt->decode(std::vector<int32_t>{static_cast<int32_t>(vocab.size())}),
                       doctest::Contains("out of range"), std::runtime_error);
}

TEST_CASE("sentencepiece: a missing file is named") {
  test::TempDir dir;
  CHECK_THROWS_WITH_AS(model::load_sentencepiece(dir.path(), SpmFlavor::T5),
                       doctest::Contains("spiece.model: no such file"), std::runtime_error);
  CHECK_THROWS_WITH_AS(model::load_sentencepiece(dir.path(), SpmFlavor::Marian, SpmSide::Source),
                       doctest::Contains("source.spm: no such file"), std::runtime_error);
  CHECK_THROWS_WITH_AS(model::load_sentencepiece(dir.path(), SpmFlavor::Marian, SpmSide::Target),
                       doctest::Contains("target.spm: no such file"), std::runtime_error);
  test::write_file(dir / "source.spm", test::read_file(spm_data("unigram.model")));
  CHECK_THROWS_WITH_AS(model::load_sentencepiece(dir.path(), SpmFlavor::Marian, SpmSide::Source),
                       doctest::Contains("vocab.json: no such file"), std::runtime_error);
}

TEST_CASE("sentencepiece: a corrupt model is an error naming the file, never a crash") {
  test::TempDir dir;
  const std::filesystem::path file = dir / "spiece.model";
  auto rejected = [&](const std::string& bytes) {
    test::write_file(file, bytes);
    CHECK_THROWS_WITH_AS(model::load_sentencepiece(dir.path(), SpmFlavor::T5),
                         doctest::Contains(file.string().c_str()), std::runtime_error);
  };
  rejected("");
  std::mt19937 rng(40);
  for (size_t n : {1u, 7u, 100u, 4096u, 60000u}) {
    std::string noise(n, '\0');
    for (char& c : noise) c = static_cast<char>(rng());
    INFO(n << " random bytes");
    rejected(noise);
  }
  // Cut anywhere, a model is rejected: inside a field the parse fails; between two pieces the
  // file parses but lacks the specs that follow the pieces.
  for (const std::string name : {"bpe.model", "unigram.model"}) {
    const std::string model = test::read_file(spm_data(name));
    // after_pieces(100): SentencePiece itself loads unigram.model cut there, as 100 pieces.
    std::vector<size_t> cuts = {
        1, 2, 10, after_pieces(model, 100), model.size() - 1, model.size() - 2};
    for (size_t i = 1; i < 40; i++) cuts.push_back(model.size() * i / 40);
    for (size_t cut : cuts) {
      INFO(name << " cut to " << cut << " of " << model.size() << " bytes");
      rejected(model.substr(0, cut));
    }
  }
}

TEST_CASE("sentencepiece marian: a vocab.json that is not piece -> ids 0..n-1 is named") {
  test::TempDir dir;
  marian_folder(dir, {});
  const std::filesystem::path file = dir / "vocab.json";
  auto rejected = [&](const std::string& text, const std::string& why) {
    test::write_file(file, text);
    CHECK_THROWS_WITH_AS(model::load_sentencepiece(dir.path(), SpmFlavor::Marian),
                         doctest::Contains((file.string() + ": " + why).c_str()),
                         std::runtime_error);
  };
  rejected("[1, 2]", "not an object");
  rejected("{\"</s>\": 0, \"<unk>\": ", "not JSON");
  rejected(R"({"</s>": 0, "<unk>": "1"})", "\"<unk>\" has \"1\", not an integer id");
  rejected(R"({"</s>": 0, "<unk>": 2})", "\"<unk>\" has id 2, outside [0, 2)");
  rejected(R"({"</s>": 0, "<unk>": 1, "a": 1})", "\"a\" has id 1, as \"<unk>\" does");
  rejected(R"({"<unk>": 0, "a": 1})", "no \"</s>\" piece");
  rejected(R"({"</s>": 0, "a": 1})", "no \"<unk>\" piece");
}

TEST_CASE("sentencepiece: invalid UTF-8 in the text names the byte offset") {
  test::TempDir t5, marian;
  t5_folder(t5);
  marian_folder(marian, {});
  const auto a = model::load_sentencepiece(t5.path(), SpmFlavor::T5);
  const auto b = model::load_sentencepiece(marian.path(), SpmFlavor::Marian);
  for (const auto* tok : {a.get(), b.get()}) {
    CHECK_THROWS_WITH_AS(tok->encode("abc\xFF"
                                     "def"),
                         doctest::Contains("byte offset 3"), std::runtime_error);
    CHECK_THROWS_WITH_AS(tok->encode("<extra_id_0>\xC3"), doctest::Contains("byte offset 12"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(tok->encode("\xED\xA0\x80"), doctest::Contains("byte offset 0"),
                         std::runtime_error);  // a surrogate
  }
}
