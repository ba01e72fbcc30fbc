// BERT's WordPiece tokenizer: ids and token types equal to Hugging Face's on the fixtures of
// tests/data/hf (saved by transformers, whose BertTokenizer runs the tokenizers crate), the edge
// cases one by one, every error path, and, in test_wordpiece_npm.cpp, a megabyte of many scripts
// against the crate itself (the npm package) on bert-base-uncased's vocabulary.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "model/formats/safetensors.h"
#include "model/text/wordpiece.h"
#include "tests/files.h"

using nlohmann::json;

namespace {

std::filesystem::path hf(const std::string& name) {
  return test::source_dir() / "tests/data/hf" / name;
}

// An I64 tensor of a safetensors file, as int64 values, row-major. The project's reader checks
// the file and lists I64 tensors as unsupported (the engine never reads them), so the bytes are
// taken here through the header's data_offsets.
std::vector<int64_t> read_i64(const std::filesystem::path& file, const std::string& name,
                              std::vector<uint64_t>& shape) {
  const auto st = model::SafeTensors::open(file);  // throws for a malformed file
  bool listed = false;
  for (const auto& u : st->unsupported()) {
    if (u.name == name && u.dtype == "I64") listed = true, shape = u.shape;
  }
  REQUIRE_MESSAGE(listed, file.string(), " has no I64 tensor ", name);
  const std::string bytes = test::read_file(file);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json header = json::parse(bytes.substr(8, n));
  const auto offsets = header.at(name).at("data_offsets").get<std::vector<uint64_t>>();
  std::vector<int64_t> values((offsets[1] - offsets[0]) / 8);
  std::memcpy(values.data(), bytes.data() + 8 + n + offsets[0], values.size() * 8);
  return values;
}

std::vector<int32_t> row(const std::vector<int64_t>& m, const std::vector<uint64_t>& shape,
                         size_t r, size_t n) {
  std::vector<int32_t> out;
  for (size_t j = 0; j < n; j++) out.push_back(static_cast<int32_t>(m[r * shape[1] + j]));
  return out;
}

const model::WordPiece& mlm() {
  static const auto tok = model::load_wordpiece(hf("bert-mlm"));
  return *tok;
}

// "[CLS] the cat [SEP]": the pieces of an encoding, to read failures and write expectations.
std::string pieces(const model::WordPiece& tok, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + tok.token(id);
  return s;
}

std::string encoded(std::string_view text) { return pieces(mlm(), mlm().encode(text).ids); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("wordpiece: ids and token types equal Hugging Face's on the BERT fixtures") {
  for (const char* name : {"bert-mlm", "bert-seqcls", "bert-tokcls", "bert-st"}) {
    CAPTURE(name);
    const auto tok = model::load_wordpiece(hf(name));
    const json expected = json::parse(test::read_file(hf(name) / "expected.json"));
    const auto file = hf(name) / "expected.safetensors";
    std::vector<uint64_t> shape, mask_shape;
    const std::vector<int64_t> ids = read_i64(file, "input_ids", shape);
    const std::vector<int64_t> mask = read_i64(file, "attention_mask", mask_shape);
    const auto& texts = expected.at("texts");
    REQUIRE(shape.size() == 2);
    REQUIRE(shape[0] == texts.size());
    REQUIRE(mask_shape == shape);
    for (size_t i = 0; i < texts.size(); i++) {
      const std::string text = texts[i].get<std::string>();
      CAPTURE(text);
      size_t n = 0;
      for (size_t j = 0; j < shape[1]; j++) n += mask[i * shape[1] + j] != 0;
      const model::WordPieceEncoding e = tok->encode(text);
      CHECK(e.ids == row(ids, shape, i, n));
      CHECK(e.type_ids == std::vector<int32_t>(n, 0));
      CHECK(e.truncated == 0);
      if (expected.contains("tokens")) {
        std::vector<std::string> want = expected["tokens"][i];
        want.resize(n);  // the rest is [PAD]
        std::vector<std::string> got;
        for (int32_t id : e.ids) got.push_back(tok->token(id));
        CHECK(got == want);
      }
    }
    if (expected.contains("pair")) {
      std::vector<uint64_t> ps, ts;
      const std::vector<int64_t> pair_ids = read_i64(file, "pair_input_ids", ps);
      const std::vector<int64_t> pair_types = read_i64(file, "pair_token_type_ids", ts);
      const model::WordPieceEncoding e =
          tok->encode(expected["pair"][0].get<std::string>(), expected["pair"][1].get<std::string>());
      CHECK(e.ids == row(pair_ids, ps, 0, ps[1]));
      CHECK(e.type_ids == row(pair_types, ts, 0, ts[1]));
    }
  }
}

TEST_CASE("wordpiece: the sentence-transformers folder reads tokenizer.json like vocab.txt") {
  REQUIRE_FALSE(std::filesystem::exists(hf("bert-st") / "vocab.txt"));
  const auto st = model::load_wordpiece(hf("bert-st"));
  REQUIRE(st->size() == mlm().size());
  for (int32_t id = 0; id < static_cast<int32_t>(mlm().size()); id++)
    CHECK(st->token(id) == mlm().token(id));
  // bert-mlm by its tokenizer.json alone.
  test::TempDir dir;
  test::write_file(dir / "tokenizer.json", test::read_file(hf("bert-mlm") / "tokenizer.json"));
  const auto tj = model::load_wordpiece(dir.path());
  CHECK(tj->encode("Paris is the [MASK] of France!").ids ==
        mlm().encode("Paris is the [MASK] of France!").ids);
  CHECK(tj->options().normalizer.lowercase);
  CHECK_FALSE(tj->options().normalizer.strip_accents.has_value());
}

// The expected pieces here were checked with the npm package tokenizers 0.23.2 (the crate).
TEST_CASE("wordpiece: edge cases") {
  CHECK(encoded("") == "[CLS] [SEP]");
  CHECK(encoded(" \t\n ") == "[CLS] [SEP]");
  // max_input_chars_per_word is 100: 100 letters are pieces, 101 one [UNK].
  CHECK(mlm().encode(std::string(100, 'a')).ids.size() == 102);
  CHECK(encoded(std::string(101, 'a')) == "[CLS] [UNK] [SEP]");
  CHECK(encoded("the " + std::string(101, 'b') + " cat") == "[CLS] the [UNK] cat [SEP]");
  // A word with one piece missing from the vocabulary is [UNK] whole, not in part.
  CHECK(encoded("cat1 dog") == "[CLS] [UNK] dog [SEP]");
  // Controls vanish, even inside a word (U+0007, U+00AD soft hyphen, U+200B, U+E000 private
  // use, U+FFFD); \t \n \r and U+2028 separate words; U+000B is a control (Cc), not a space.
  CHECK(encoded("c\x07" "a\u00ADt\u200B\uE000\uFFFD") == "[CLS] cat [SEP]");
  CHECK(encoded("the\tcat\nsat\ron\u2028mat") == "[CLS] the cat sat on mat [SEP]");
  CHECK(encoded("c\va\ft") == "[CLS] cat [SEP]");
  CHECK(encoded(std::string("the\0cat", 7)) == "[CLS] the ##c ##a ##t [SEP]");
  // Accents stripped (NFD, nonspacing marks dropped) when lowercasing; composed or not.
  CHECK(encoded("café") == "[CLS] c ##a ##f ##e [SEP]");
  CHECK(encoded("CAFE\u0301") == "[CLS] c ##a ##f ##e [SEP]");
  CHECK(encoded("Über") == "[CLS] u ##b ##er [SEP]");
  // U+0130 (İ): NFD I + U+0307, the dot stripped, then lowercased.
  CHECK(encoded("\u0130t") == "[CLS] it [SEP]");
  // CJK ideographs are words of their own; U+2B820..U+2B91F are not among the crate's ranges.
  CHECK(encoded("中国text") == "[CLS] 中 国 text [SEP]");
  CHECK(encoded("a中b") == "[CLS] a 中 b [SEP]");
  CHECK(encoded("a\U0002B820b") == "[CLS] [UNK] [SEP]");
  CHECK(encoded("a\U0002B920b") == "[CLS] a [UNK] b [SEP]");
  // Punctuation splits: ASCII 33-47, 58-64, 91-96, 123-126 and Unicode's P*.
  CHECK(encoded("the(cat)sat.") == "[CLS] the ( cat ) sat . [SEP]");
  CHECK(encoded("dog\u2014cat") == "[CLS] dog [UNK] cat [SEP]");
  CHECK(encoded("dog$cat") == "[CLS] dog [UNK] cat [SEP]");  // ASCII symbols count as punctuation
  CHECK(encoded("dog€cat") == "[CLS] [UNK] [SEP]");      // € (Sc) does not split
  // Special tokens stay whole in the raw text (before lowercasing), even beside other text.
  CHECK(encoded("the [MASK].") == "[CLS] the [MASK] . [SEP]");
  CHECK(encoded("the[MASK]cat") == "[CLS] the [MASK] cat [SEP]");
  CHECK(encoded("[mask]") == "[CLS] [UNK] m ##a ##s ##k [UNK] [SEP]");
  CHECK(encoded("[CLS][SEP][PAD][UNK]") == "[CLS] [CLS] [SEP] [PAD] [UNK] [SEP]");
}

TEST_CASE("wordpiece: truncation is reported, single and longest-first pairs") {
  const std::string text = "the cat sat on the mat.";  // 7 tokens
  const model::WordPieceEncoding whole = mlm().encode(text, 9);
  CHECK(whole.truncated == 0);
  CHECK(whole.ids.size() == 9);
  const model::WordPieceEncoding cut = mlm().encode(text, 5);
  CHECK(cut.truncated == 4);
  CHECK(pieces(mlm(), cut.ids) == "[CLS] the cat sat [SEP]");
  CHECK(mlm().encode(text, 2).truncated == 7);
  CHECK_THROWS_AS(mlm().encode(text, 1), std::invalid_argument);
  CHECK_THROWS_AS(mlm().encode(text, text, 2), std::invalid_argument);

  // Pairs (room = max_length - 3). Both long: the shorter keeps floor(room/2), A on a tie.
  auto pair = [](std::string_view a, std::string_view b, size_t max) {
    const model::WordPieceEncoding e = mlm().encode(a, b, max);
    return pieces(mlm(), e.ids) + " | " + std::to_string(e.truncated);
  };
  CHECK(pair("a b c d e", "a b c d e", 7) == "[CLS] a b [SEP] a b [SEP] | 6");
  CHECK(pair("a b c d e", "a b c d e", 8) == "[CLS] a b [SEP] a b c [SEP] | 5");
  CHECK(pair("a b c d", "a b c d e", 8) == "[CLS] a b [SEP] a b c [SEP] | 4");
  CHECK(pair("a b c d e", "a b c d", 8) == "[CLS] a b c [SEP] a b [SEP] | 4");
  // Only the longer is cut while the shorter fits in its half.
  CHECK(pair("a b", "a b c d e f g h", 10) == "[CLS] a b [SEP] a b c d e [SEP] | 3");
  CHECK(pair("a b c d e f g h", "a", 6) == "[CLS] a b [SEP] a [SEP] | 6");
  CHECK(pair("a", "b", 5) == "[CLS] a [SEP] b [SEP] | 0");
  // "Longer" as the crate sees it: the first max_length tokens to the end of a word, the check
  // skipped after special tokens (all three checked with the npm package tokenizers 0.23.2).
  CHECK(pair("a a a a a a a a a a", "xyz xyz xyz", 6) == "[CLS] a [SEP] x ##y [SEP] | 16");
  CHECK(pair("a b c d e [PAD] f g", "a b c d e f g h", 6) == "[CLS] a b [SEP] a [SEP] | 13");
  CHECK(pair("a b c d e f g", "a b c d e f g h", 6) == "[CLS] a [SEP] a b [SEP] | 12");
  const model::WordPieceEncoding e = mlm().encode("a b", "c", 6);
  CHECK(e.type_ids == std::vector<int32_t>{0, 0, 0, 0, 1, 1});
}

TEST_CASE("wordpiece: options from tokenizer_config.json") {
  test::TempDir dir;
  test::write_file(dir / "vocab.txt", test::read_file(hf("bert-mlm") / "vocab.txt"));
  // Cased: no lowercasing, and with strip_accents null no accent stripping either.
  test::write_file(dir / "tokenizer_config.json", R"({"do_lower_case": false})");
  auto cased = model::load_wordpiece(dir.path());
  CHECK(pieces(*cased, cased->tokenize("The café")) == "[UNK] [UNK]");  // no "##é" in the vocabulary
  // Cased with accents stripped.
  test::write_file(dir / "tokenizer_config.json",
                   R"({"do_lower_case": false, "strip_accents": true})");
  auto strip = model::load_wordpiece(dir.path());
  CHECK(pieces(*strip, strip->tokenize("café")) == "c ##a ##f ##e");
  // Lowercased, accents kept; CJK not spaced out.
  test::write_file(dir / "tokenizer_config.json",
                   R"({"strip_accents": false, "tokenize_chinese_chars": false})");
  auto keep = model::load_wordpiece(dir.path());
  CHECK(pieces(*keep, keep->tokenize("CAFÉ 中国")) == "[UNK] [UNK]");  // "##é", "##国" absent
  CHECK(pieces(*keep, keep->tokenize("É")) == "é");
  // Special tokens renamed (as AddedToken objects), and never_split kept whole.
  test::write_file(dir / "vocab.txt", "<pad>\n<unk>\n<s>\n</s>\nhi\n!\nhi!\n");
  test::write_file(dir / "tokenizer_config.json",
                   R"({"unk_token": {"content": "<unk>"}, "cls_token": "<s>", "sep_token": "</s>",
                       "pad_token": "<pad>", "mask_token": null, "never_split": ["hi!"]})");
  auto renamed = model::load_wordpiece(dir.path());
  CHECK(renamed->encode("hi hi! hi !<s>x").ids == std::vector<int32_t>{2, 4, 6, 4, 5, 2, 1, 3});
  CHECK(renamed->pad() == 0);
}

TEST_CASE("wordpiece: errors name the file and the problem") {
  test::TempDir dir;
  CHECK(contains(error_of([&] { model::load_wordpiece(dir / "absent"); }),
                 "no vocab.txt, nor tokenizer.json"));
  test::write_file(dir / "vocab.txt", "[CLS]\n[SEP]\nthe\n");
  std::string e = error_of([&] { model::load_wordpiece(dir.path()); });
  CHECK(contains(e, "vocab.txt: the vocabulary has no unk_token \"[UNK]\""));
  test::write_file(dir / "vocab.txt", "[UNK]\n[SEP]\nthe\n");
  CHECK(contains(error_of([&] { model::load_wordpiece(dir.path()); }), "no cls_token \"[CLS]\""));
  test::write_file(dir / "vocab.txt", "[UNK]\n[CLS]\nthe\n");
  CHECK(contains(error_of([&] { model::load_wordpiece(dir.path()); }), "no sep_token \"[SEP]\""));
  test::write_file(dir / "vocab.txt", "[UNK]\n[CLS]\n[SEP]\nth\xff\n");
  CHECK(contains(error_of([&] { model::load_wordpiece(dir.path()); }),
                 "vocab.txt: invalid UTF-8 at byte offset 20"));
  test::write_file(dir / "vocab.txt", "[UNK]\n[CLS]\n[SEP]\n");
  test::write_file(dir / "tokenizer_config.json", R"({"do_lower_case": true,)");
  e = error_of([&] { model::load_wordpiece(dir.path()); });
  CHECK(contains(e, "tokenizer_config.json: invalid JSON"));
  test::write_file(dir / "tokenizer_config.json", R"({"do_lower_case": "yes"})");
  CHECK(contains(error_of([&] { model::load_wordpiece(dir.path()); }), "tokenizer_config.json: "));

  // tokenizer.json that is not BERT's.
  test::TempDir tj;
  json t = json::parse(test::read_file(hf("bert-st") / "tokenizer.json"));
  t["model"]["type"] = "BPE";
  test::write_file(tj / "tokenizer.json", t.dump());
  CHECK(contains(error_of([&] { model::load_wordpiece(tj.path()); }),
                 "tokenizer.json: model type \"BPE\" is not WordPiece"));
  t = json::parse(test::read_file(hf("bert-st") / "tokenizer.json"));
  t["normalizer"] = {{"type", "NFC"}};
  test::write_file(tj / "tokenizer.json", t.dump());
  CHECK(contains(error_of([&] { model::load_wordpiece(tj.path()); }), "is not BertNormalizer"));
  t = json::parse(test::read_file(hf("bert-st") / "tokenizer.json"));
  t["model"]["vocab"]["extra"] = 3;
  test::write_file(tj / "tokenizer.json", t.dump());
  CHECK(contains(error_of([&] { model::load_wordpiece(tj.path()); }),
                 "tokenizer.json: model.vocab: \"extra\" has id 3"));
  test::write_file(tj / "tokenizer.json", "{\"model\": ");
  CHECK(contains(error_of([&] { model::load_wordpiece(tj.path()); }),
                 "tokenizer.json: invalid JSON"));

  // Text that is not UTF-8, and ids out of range.
  CHECK(contains(error_of([] { mlm().encode("ab\xff" "cd"); }), "invalid UTF-8 at byte offset 2"));
  CHECK(contains(error_of([] { mlm().encode("ok", "\xc3"); }), "invalid UTF-8 at byte offset 0"));
  CHECK(contains(error_of([] { mlm().token(111); }), "token id 111 is out of range [0, 111)"));
}
