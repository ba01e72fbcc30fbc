// Tokenizers: GPT-2's BPE against golden ids from two independent implementations
// (tools/goldens/tokenizer/), the bytes and chars tokenizers, and every error path.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "model/text/tokenizer.h"
#include "tests/files.h"
#include "model/text/gpt2_tokenizer.h"

using nlohmann::json;
using namespace std::literals;

namespace {

const model::Tokenizer& gpt2() {
  static const std::unique_ptr<model::Tokenizer> tok =
      model::load_tokenizer(test::source_dir() / "data" / "gpt2", model::TokenizerSpec{});
  return *tok;
}

struct Golden {
  std::string text;
  std::vector<int32_t> ids;
};

const std::vector<Golden>& goldens() {
  static const std::vector<Golden> all = [] {
    std::vector<Golden> out;
    for (const json& g :
         json::parse(test::read_file(test::source_dir() / "tests/data/tokenizer/goldens.json"))) {
      out.push_back({g.at("text").get<std::string>(), g.at("ids").get<std::vector<int32_t>>()});
    }
    return out;
  }();
  return all;
}

std::string escaped(std::string_view s, size_t max = 80) {
  std::string shown =
      json(std::string(s.substr(0, max))).dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > max ? shown + "..." : shown;
}

std::string ids_around(const std::vector<int32_t>& ids, size_t at) {
  std::ostringstream s;
  for (size_t i = at >= 3 ? at - 3 : 0; i < ids.size() && i < at + 4; i++) {
    s << (i == at ? "  >" : "  ") << ids[i] << '=' << escaped(gpt2().token_bytes(ids[i]));
  }
  return s.str();
}

// "" when equal, else where and how the two differ, with the tokens around the first mismatch.
std::string first_mismatch(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) at++;
  if (at == got.size() && at == want.size()) return "";
  return "first mismatch at token " + std::to_string(at) + " of " + std::to_string(want.size()) +
         "\n  got: " + ids_around(got, at) + "\n  want:" + ids_around(want, at);
}

}  // namespace

TEST_CASE("GPT-2 tokenizer matches the goldens id for id") {
  REQUIRE(goldens().size() >= 100);
  CHECK(gpt2().vocab_size() == 50257);
  CHECK(gpt2().end_of_text() == 50256);
  for (size_t i = 0; i < goldens().size(); i++) {
    const Golden& g = goldens()[i];
    INFO("case ", i, " ", escaped(g.text));
    CHECK(first_mismatch(gpt2().encode(g.text), g.ids) == "");
  }
}

TEST_CASE("GPT-2 decode inverts the goldens") {
  for (const Golden& g : goldens()) {
    INFO(escaped(g.text));
    CHECK(gpt2().decode(g.ids) == g.text);
    CHECK(gpt2().decode(gpt2().encode(g.text)) == g.text);
  }
}

TEST_CASE("GPT-2 takes \\s as Unicode White_Space, as OpenAI's encoder.py and tiktoken do") {
  // U+0085 is White_Space and U+FEFF is not; JavaScript's \s says the opposite, so these ids
  // come from tools/goldens/tokenizer/check_python.py (OpenAI's algorithm on Python's `regex`).
  CHECK(first_mismatch(gpt2().encode("a  \u0085x"), {64, 220, 220, 126, 227, 87}) == "");
  CHECK(first_mismatch(gpt2().encode("a \uFEFFb"), {64, 27332, 119, 123, 65}) == "");
  CHECK(first_mismatch(gpt2().encode(" \uFEFF!"), {27332, 119, 123, 0}) == "");
}

TEST_CASE("GPT-2 decode of part of a character gives U+FFFD") {
  const std::vector<int32_t> smile = gpt2().encode("\xF0\x9F\x98\x80");  // 😀
  REQUIRE(smile == std::vector<int32_t>{47249, 222});                    // F0 9F 98 | 80
  CHECK(gpt2().decode(std::span(smile).first(1)) == "\uFFFD");
  CHECK(gpt2().decode(std::span(smile).last(1)) == "\uFFFD");
  const std::vector<int32_t> cut = {47249, 32, 222};  // F0 9F 98 'A' 80
  CHECK(gpt2().decode(cut) == "\uFFFDA\uFFFD");
  CHECK(gpt2().decode(std::vector<int32_t>{50256}) == "<|endoftext|>");
  CHECK_THROWS_WITH_AS(gpt2().decode(std::vector<int32_t>{50257}),
                       "token id 50257 is out of range [0, 50257)", std::runtime_error);
  CHECK_THROWS_WITH_AS(gpt2().token_bytes(-1), doctest::Contains("token id -1 is out of range"),
                       std::runtime_error);
}

TEST_CASE("GPT-2 encode is fast on a large text and on one very long word") {
  std::string text;
  while (text.size() < (1u << 20)) {
    for (const Golden& g : goldens()) text += g.text + "\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = gpt2().encode(text);
  const auto t1 = std::chrono::steady_clock::now();
  const std::string word(200000, 'a');  // one pre-token: a quadratic merge loop would take minutes
  const std::vector<int32_t> word_ids = gpt2().encode(word);
  const auto t2 = std::chrono::steady_clock::now();
  const double text_s = std::chrono::duration<double>(t1 - t0).count();
  const double word_s = std::chrono::duration<double>(t2 - t1).count();
  MESSAGE("encode: ", text.size() >> 10, " KiB in ", text_s, " s; a 200,000-letter word in ",
          word_s, " s");
  CHECK(gpt2().decode(ids) == text);
  CHECK(gpt2().decode(word_ids) == word);
  // Generous bounds (sanitizer and debug builds run several times slower than release).
  CHECK(text_s < 5.0);
  CHECK(word_s < 5.0);
}

TEST_CASE("GPT-2 encode from several threads at once gives the goldens") {
  // A fresh tokenizer, so that the threads fill its word cache together.
  const auto tok =
      model::load_tokenizer(test::source_dir() / "data" / "gpt2", model::TokenizerSpec{});
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < failures.size(); t++) {
    threads.emplace_back([t, &failures, &tok] {
      // Every thread encodes every case, each starting elsewhere in the list.
      const size_t n = goldens().size();
      for (size_t k = 0; k < n; k++) {
        const size_t i = (k + t * n / 4) % n;
        if (tok->encode(goldens()[i].text) != goldens()[i].ids)
          failures[t] += std::to_string(i) + " ";
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& f : failures) CHECK(f == "");
}

TEST_CASE("every tokenizer rejects invalid UTF-8, naming the byte offset") {
  model::TokenizerSpec bytes{model::TokenizerKind::Bytes, {}};
  model::TokenizerSpec chars{model::TokenizerKind::Chars, {"a", "b", "\xC3\xA9"}};
  const auto b = model::load_tokenizer("unused", bytes), c = model::load_tokenizer("unused", chars);
  for (const model::Tokenizer* tok :
       std::initializer_list<const model::Tokenizer*>{&gpt2(), b.get(), c.get()}) {
    CHECK_THROWS_WITH_AS(tok->encode("ab\xFF"
                                     "a"),
                         "invalid UTF-8 at byte offset 2 (bytes FF 61)", std::runtime_error);
    CHECK_THROWS_WITH_AS(tok->encode("a\xC0\xAF"), doctest::Contains("byte offset 1 (bytes C0 AF)"),
                         std::runtime_error);  // overlong '/'
    CHECK_THROWS_WITH_AS(tok->encode("ab\xED\xA0\x80"), doctest::Contains("byte offset 2"),
                         std::runtime_error);  // a surrogate
    CHECK_THROWS_WITH_AS(tok->encode("\xC3\xA9\xE2\x82"), doctest::Contains("byte offset 2"),
                         std::runtime_error);  // cut short
  }
}

TEST_CASE("bytes tokenizer: id = byte") {
  const auto tok = model::load_tokenizer("unused", {model::TokenizerKind::Bytes, {}});
  CHECK(tok->vocab_size() == 256);
  CHECK(tok->end_of_text() == std::nullopt);
  CHECK(tok->encode("h\xC3\xA9!") == std::vector<int32_t>{104, 0xC3, 0xA9, 33});
  CHECK(tok->encode("").empty());
  CHECK(tok->decode(std::vector<int32_t>{104, 0xC3, 0xA9, 33}) == "h\xC3\xA9!");
  CHECK(tok->decode(std::vector<int32_t>{104, 0xC3, 33}) == "h\uFFFD!");
  CHECK(tok->token_bytes(255) == "\xFF");
  CHECK_THROWS_WITH_AS(tok->token_bytes(256), "token id 256 is out of range [0, 256)",
                       std::runtime_error);
}

TEST_CASE("chars tokenizer: one id per character of the config's list") {
  const model::TokenizerSpec spec{model::TokenizerKind::Chars,
                                  {"\n", " ", "a", "\xC3\xA9", "\xF0\x9F\x98\x80"}};
  const auto tok = model::load_tokenizer("models/m", spec);
  CHECK(tok->vocab_size() == 5);
  CHECK(tok->encode("a \xC3\xA9\n\xF0\x9F\x98\x80") == std::vector<int32_t>{2, 1, 3, 0, 4});
  CHECK(tok->decode(std::vector<int32_t>{4, 2, 3}) ==
        "\xF0\x9F\x98\x80"
        "a\xC3\xA9");
  CHECK_THROWS_WITH_AS(
      tok->encode("aa b"),
      "character 'b' (U+0062) at byte offset 3 is not in the model's character list",
      std::runtime_error);
  CHECK_THROWS_WITH_AS(tok->encode("\xC3\xA9\t"),
                       doctest::Contains("character U+0009 at byte offset 2"), std::runtime_error);
  CHECK_THROWS_WITH_AS(tok->token_bytes(5), "token id 5 is out of range [0, 5)",
                       std::runtime_error);

  const auto bad = [](std::vector<std::string> chars) {
    return model::load_tokenizer("models/m", {model::TokenizerKind::Chars, std::move(chars)});
  };
  CHECK_THROWS_WITH_AS(
      bad({}), doctest::Contains("models/m/config.json: chars: the character list is empty"),
      std::runtime_error);
  CHECK_THROWS_WITH_AS(bad({"a", "bc"}),
                       doctest::Contains("chars[1]: \"bc\" is not a single character"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(bad({"a", ""}),
                       doctest::Contains("chars[1]: \"\" is not a single character"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(bad({"\xFF"}),
                       doctest::Contains("chars[0]: invalid UTF-8 is not a single character"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(bad({"a", "b", "a"}),
                       doctest::Contains("chars[2]: 'a' (U+0061) is also entry 0"),
                       std::runtime_error);
}

namespace {

// A small GPT-2-style vocabulary: GPT-2's 256 byte tokens (ids 0-255 of data/gpt2/vocab.json)
// plus "Ġt", "he" and "Ġthe", with merges "Ġ t", "h e", "Ġt he". `edit` breaks one thing.
struct TinyGpt2 {
  json vocab;
  std::string merges = "#version: 0.2\n\xC4\xA0 t\nh e\n\xC4\xA0t he\n";
  TinyGpt2() {
    static const json bytes = [] {
      json out;
      const json gpt2_vocab =
          json::parse(test::read_file(test::source_dir() / "data/gpt2/vocab.json"));
      for (auto it = gpt2_vocab.begin(); it != gpt2_vocab.end(); ++it) {
        if (it.value().get<int>() < 256) out[it.key()] = it.value();
      }
      return out;
    }();
    vocab = bytes;
    vocab["\xC4\xA0t"] = 256;
    vocab["he"] = 257;
    vocab["\xC4\xA0the"] = 258;
  }
  std::unique_ptr<model::Tokenizer> load(const std::string& vocab_text) const {
    return model::make_gpt2_tokenizer(vocab_text, merges, "d/vocab.json", "d/merges.txt");
  }
  std::unique_ptr<model::Tokenizer> load() const { return load(vocab.dump()); }
};

}  // namespace

TEST_CASE("GPT-2 tokenizer from a small vocabulary, with CRLF merges and files on disk") {
  TinyGpt2 tiny;
  const int32_t n = tiny.vocab.at("n").get<int32_t>(),
                space = tiny.vocab.at("\xC4\xA0").get<int32_t>();
  CHECK(tiny.load()->encode(" the then") == std::vector<int32_t>{258, 258, n});
  CHECK(tiny.load()->encode("  the") == std::vector<int32_t>{space, 258});
  CHECK(tiny.load()->end_of_text() == std::nullopt);
  CHECK(tiny.load()->encode("<|endoftext|>").size() == 13);  // not special without the token
  tiny.merges = "#version: 0.2\r\n\xC4\xA0 t\r\nh e\r\n\xC4\xA0t he\r\n\r\n";
  CHECK(tiny.load()->encode(" the") == std::vector<int32_t>{258});

  test::TempDir dir;
  CHECK_THROWS_WITH_AS(model::load_tokenizer(dir.path(), {}),
                       doctest::Contains("vocab.json: no such file"), std::runtime_error);
  test::write_file(dir / "vocab.json", tiny.vocab.dump());
  CHECK_THROWS_WITH_AS(model::load_tokenizer(dir.path(), {}),
                       doctest::Contains("merges.txt: no such file"), std::runtime_error);
  test::write_file(dir / "merges.txt", tiny.merges);
  CHECK(model::load_tokenizer(dir.path(), {})->encode(" the") == std::vector<int32_t>{258});
}

TEST_CASE("GPT-2 merges every occurrence of the best pair per pass, as encoder.py does") {
  // Merges out of training order ("ab a" ranks before "a b", which makes "ab"), and overlapping
  // pairs. Expected pieces from bpe() of tools/goldens/tokenizer/check_python.py, i.e. OpenAI's
  // encoder.py; merging one pair at a time would give "aba b" for "abab".
  TinyGpt2 tiny;
  int32_t next_id = 259;
  for (const char* t : {"ab", "aba", "aa", "aaa"}) tiny.vocab[t] = next_id++;
  tiny.merges = "ab a\na b\na a\naa a\n";
  const auto tok = tiny.load();
  const auto pieces = [&](std::string_view word) {
    std::string out;
    for (int32_t id : tok->encode(word)) out.append(out.empty() ? "" : " ").append(tok->token_bytes(id));
    return out;
  };
  CHECK(pieces("abab") == "ab ab");
  CHECK(pieces("ababab") == "ab ab ab");
  CHECK(pieces("aaaa") == "aa aa");
  CHECK(pieces("aaaaa") == "aa aaa");
  CHECK(pieces("abaaba") == "aba aba");
  CHECK(pieces("aab") == "a ab");
}

TEST_CASE("malformed vocab.json is refused with the key and the problem") {
  const auto fails = [](const std::string& vocab_text, const std::string& message) {
    CAPTURE(vocab_text.substr(0, 60));
    CHECK_THROWS_WITH_AS(TinyGpt2().load(vocab_text), doctest::Contains(message.c_str()),
                         std::runtime_error);
  };
  const auto edited = [](const std::function<void(json&)>& edit) {
    TinyGpt2 tiny;
    edit(tiny.vocab);
    return tiny.vocab.dump();
  };
  fails("{\"a\": 0,", "d/vocab.json: not valid JSON: ");
  fails("[0, 1]", "d/vocab.json: expected a JSON object of token -> id, got array");
  fails("{}", "d/vocab.json: empty vocabulary");
  fails(edited([](json& v) { v["he"] = "257"; }),
        "d/vocab.json: \"he\": id must be an integer, got \"257\"");
  fails(edited([](json& v) { v["he"] = 1.5; }), "\"he\": id must be an integer, got 1.5");
  fails(edited([](json& v) { v["he"] = 259; }), "\"he\": id 259 is out of range [0, 259)");
  fails(edited([](json& v) { v["he"] = -1; }), "\"he\": id -1 is out of range");
  fails(edited([](json& v) { v["he"] = 256; }), "id 256 is also the id of \"he\"");
  fails(edited([](json& v) {
          v.erase("he");
          v["h\xE4\xB8\xAD"] = 257;
        }),
        "\"h\xE4\xB8\xAD\": U+4E2D is not a character of GPT-2's byte alphabet");
  fails(edited([](json& v) {
          v.erase("he");
          v[""] = 257;
        }),
        "d/vocab.json: \"\": empty token");
  fails(edited([](json& v) {
          v.erase("!");
          v["!!"] = 0;
        }),
        "d/vocab.json: no token for byte 33 (written \"!\")");
}

TEST_CASE("malformed merges.txt is refused with the line and the problem") {
  const auto fails = [](const std::string& merges, const std::string& message) {
    TinyGpt2 tiny;
    tiny.merges = merges;
    CAPTURE(merges);
    CHECK_THROWS_WITH_AS(tiny.load(), doctest::Contains(message.c_str()), std::runtime_error);
  };
  fails("#version: 0.2\nh e x\n",
        "d/merges.txt: line 2: expected two tokens separated by one space, got \"h e x\"");
  fails("h  e\n", "d/merges.txt: line 1: expected two tokens separated by one space");
  fails("he\n", "line 1: expected two tokens separated by one space, got \"he\"");
  fails("h e\n\nh e\n", "d/merges.txt: line 2: empty line");
  fails("h e\nh z\xC4\xA0\n", "line 2: \"z\xC4\xA0\" is not a token of d/vocab.json");
  fails("h e\nh \xE4\xB8\xAD\n",
        "line 2: \"\xE4\xB8\xAD\": U+4E2D is not a character of GPT-2's byte alphabet");
  fails("h e\nt h\n", "line 2: the merge of \"t\" and \"h\" is not a token of d/vocab.json");
  fails("#version: 0.2\nh e\n\xC4\xA0 t\nh e\n",
        "line 4: duplicate merge \"h e\" (first on line 2)");
  fails("h e\n\xFF\n", "d/merges.txt: invalid UTF-8 at byte offset 4");
}

TEST_CASE("a padded vocabulary's ids past the tokenizer's have no text") {
  // llm.c pads GPT-2's 50,257 tokens to 50,304 rows; a model may pick one of the extra rows.
  const auto tok =
      model::load_tokenizer(test::source_dir() / "data" / "gpt2", model::TokenizerSpec{});
  CHECK(tok->generated_bytes(50256, 50304) == tok->token_bytes(50256));
  CHECK(tok->generated_bytes(50257, 50304) == "");
  CHECK(tok->generated_bytes(50303, 50304) == "");
  CHECK_THROWS_WITH_AS(tok->generated_bytes(50304, 50304), doctest::Contains("out of range"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(tok->generated_bytes(-1, 50304), doctest::Contains("out of range"),
                       std::runtime_error);
}
